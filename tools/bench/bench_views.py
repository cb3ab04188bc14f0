"""--views: named views and versions over one index, their targets measured in one run.

What it measures, on N small files written straight into ~256 MiB GNU tar shards (cached in the
work dir with their index, so reruns start at once):
  - `view create` of a view excluding K listed paths (time; index bytes added, from the index
    directory's size before and after), of a rename map of K paths (time), and `view diff` of the
    two (time; its contents checked against the lists);
  - mount time of the view and of the base tree (median of warm mounts), and again with V more
    versions in the index (made by a loop of small exclude views; how long that took is reported);
  - through the exclude view against the base tree, same run, same file list (the view's files):
    readdir walk, lstat walk, reads in tree order (1 reader) and shuffled (--procs readers), warm
    and cold, with the checks and figures of the main bench (bench_systems.Bench.run_mounted);
  - `index add` of one new ~shard-size shard of small files to the N-entry index against
    `index build` of that shard alone.
Every read is checked against checksums computed here (XXH3-64 through libxxhash), not against
shardfs. A command that is not built yet is reported as such; the rest of the run goes on.
"""

import json
import os
import random
import shutil
import statistics
import sys
import time

from bench_args import host_facts, write_report_json
from bench_common import MB, BenchError, Xxh3, fmt_bytes, log, tree_bytes
from bench_dataset import class_names
from bench_mounts import Mount, run_tool
from bench_report import fmt_num, target_row
from bench_systems import Bench
from bench_views_dataset import (base_index, dirs_of, generate_views_dataset, read_manifest,
                                 reference, views_dataset_key)
from bench_workloads import can_drop_caches

VIEW_SPEC = "clean@1"  # The exclude view, as mounted and measured.
WALK_PHASES = ["walk", "lstat"]
READ_PHASES = ["read_tree1", "read_rand4"]


# -- the run ---------------------------------------------------------------------------------

class Step:
    """One timed command (or a loop of them): samples in seconds, and what came out."""

    def __init__(self, name, title):
        self.name, self.title = name, title
        self.samples = []
        self.status = "ok"  # ok | not built | error
        self.note = ""
        self.info = {}

    def median(self):
        return statistics.median(self.samples) if self.samples and self.status == "ok" else None

    def to_json(self):
        m = self.median()
        return {"title": self.title, "status": self.status, "note": self.note,
                "samples_seconds": self.samples, "median_seconds": m,
                "min_seconds": min(self.samples) if self.samples else None,
                "max_seconds": max(self.samples) if self.samples else None, **self.info}


class ViewsRun:
    def __init__(self, a, scratch):
        self.a = a
        self.scratch = scratch
        self.steps = {}
        self.notes = []
        self.xxh = None  # Xxh3 of the references, set by run_views.

    def step(self, name, title):
        self.steps[name] = Step(name, title)
        return self.steps[name]

    def shardfs(self, st, args, out_path=None):
        """Runs `shardfs ARGS`; returns (stdout, seconds) or None after marking st."""
        log_path = os.path.join(self.scratch, f"{st.name}.log")
        rc, so, _, secs = run_tool([self.a.shardfs] + args, timeout=self.a.phase_timeout,
                                   log_path=log_path)
        if rc == 0:
            if out_path:
                with open(out_path, "wb") as f:
                    f.write(so)
            return so, secs
        with open(log_path, "rb") as f:
            tail = f.read()[-600:].decode(errors="replace").strip()
        if "not built yet" in tail:
            st.status, st.note = "not built", tail.splitlines()[-1] if tail else ""
        else:
            st.status = "error"
            st.note = f"exited {rc}: {tail.splitlines()[-1] if tail else ''}"
        log(f"{st.name}: {st.status}: {st.note}")
        return None

    def mount_times(self, st, index, spec, n):
        """Median of n warm mounts (after one untimed) of index [with -o view=spec]."""
        mp = os.path.join(self.scratch, "mnt", st.name)
        os.makedirs(mp, exist_ok=True)
        argv = [self.a.shardfs, "mount", "-f"] + (["-o", f"view={spec}"] if spec else []) + \
            [index, mp]
        log_path = os.path.join(self.scratch, f"{st.name}.log")
        for rep in range(n + 1):
            m = Mount(st.name, mp, argv, "fuse3", log_path)
            try:
                secs = m.mount(min(self.a.phase_timeout, 300))
            except (BenchError, TimeoutError) as e:
                st.status = "not built" if "not built" in str(e) or "NotSupported" in str(e) \
                    or "not supported" in str(e).lower() else "error"
                st.note = str(e)[-300:]
                log(f"{st.name}: {st.status}: {st.note}")
                return
            finally:
                m.unmount()
            if rep:
                st.samples.append(secs)
            else:
                st.info["first_mount_seconds"] = secs


class ViewLists:
    """The exclude list and the rename map of the run: K = --view-paths (else files/10, at most
    a third of the files) random paths each, disjoint, written under scratch/lists."""

    def __init__(self, a, scratch, paths):
        nlist = a.view_paths if a.view_paths else max(1, a.files // 10)
        self.nlist = min(nlist, len(paths) // 3)
        rng = random.Random(a.seed + 13)
        picked = rng.sample(range(len(paths)), 2 * self.nlist)
        self.excluded = sorted((paths[i] for i in picked[:self.nlist]), key=str.encode)
        renamed_from = sorted((paths[i] for i in picked[self.nlist:]), key=str.encode)
        classes = class_names(a.classes)
        cls_pos = {c: k for k, c in enumerate(classes)}

        def moved(p):  # train/<c>/<c>_<n>.jpg -> the next class's directory, same name.
            _, c, name = p.split("/")
            return f"train/{classes[(cls_pos[c] + 1) % len(classes)]}/{name}"

        self.rename_map = {p: moved(p) for p in renamed_from}
        self.dir = os.path.join(scratch, "lists")
        os.makedirs(self.dir)
        self.excl_file = os.path.join(self.dir, "exclude.list")
        with open(self.excl_file, "w") as f:
            f.write("\n".join(self.excluded) + "\n")
        self.map_file = os.path.join(self.dir, "rename.map")
        with open(self.map_file, "w") as f:
            f.write("".join(f"{o}\t{n}\n" for o, n in self.rename_map.items()))


def working_index(ddir, scratch, pristine):
    """A copy of the pristine index in scratch beside links to the shards (the index names
    them relative to itself): views write into it."""
    for sub in ("shards", "extra"):
        os.symlink(os.path.join(ddir, sub), os.path.join(scratch, sub))
    index = os.path.join(scratch, "index")
    shutil.copytree(pristine, index)
    return index


def time_view_create(run, st, index, args, disk_bytes=False):
    """--reps runs of `shardfs view create INDEX ARGS...` into st, with the index bytes each
    added (and the allocated bytes when disk_bytes)."""
    for rep in range(run.a.reps):
        before = tree_bytes(index)
        r = run.shardfs(st, ["view", "create", index] + args)
        if r is None:
            break
        after = tree_bytes(index)
        st.samples.append(r[1])
        st.info.setdefault("index_bytes_added", []).append(after[0] - before[0])
        if disk_bytes:
            st.info.setdefault("index_disk_bytes_added", []).append(after[1] - before[1])
        st.info["output"] = r[0].decode(errors="replace").strip()


def create_views(run, index, lists, info):
    """Step 1: view create with the exclude list (clean), with the rename map (relabeled), and
    view diff of the two, checked against the lists."""
    idx_before = tree_bytes(index)
    st = run.step("create_exclude", f"view create, exclude list of {lists.nlist:,} paths")
    time_view_create(run, st, index, ["clean", "--exclude-list", lists.excl_file, "-m",
                                      f"drop {lists.nlist} listed samples"], disk_bytes=True)
    st = run.step("create_rename", f"view create, rename map of {lists.nlist:,} paths")
    time_view_create(run, st, index, ["relabeled", "--rename-map", lists.map_file])
    st = run.step("diff", "view diff of the two (--json)")
    if run.steps["create_exclude"].status == "ok" and \
            run.steps["create_rename"].status == "ok":
        diff_out = os.path.join(run.scratch, "diff.json")
        for rep in range(run.a.reps):
            r = run.shardfs(st, ["view", "diff", index, "clean@1", "relabeled@1", "--json"],
                            out_path=diff_out)
            if r is None:
                break
            st.samples.append(r[1])
        if st.status == "ok":
            st.info["check"] = check_diff(diff_out, lists.excluded, lists.rename_map)
            if st.info["check"] != "ok":
                run.notes.append(f"view diff contents: {st.info['check']}")
    else:
        st.status, st.note = "not run", "needs both views"
    info["index_bytes_before_views"] = idx_before[0]
    info["index_bytes_after_views"] = tree_bytes(index)[0]


def measure_walks_and_reads(run, bench, index, rows, view_rows, have_view):
    """Step 3: walks and reads through the view against the base tree, each checked against
    its reference; the lstat and read lists are the view's files. Returns (systems, entries
    each walk lists)."""
    a, scratch = run.a, run.scratch
    view_paths = [r[0] for r in view_rows]
    ref_list = reference(run.xxh, view_rows, [])
    ref_base_walk = reference(run.xxh, rows, dirs_of([r[0] for r in rows]))["walk"]
    ref_view_walk = reference(run.xxh, view_rows, dirs_of(view_paths))["walk"]
    systems = {}
    mnt_root = os.path.join(scratch, "mnt")
    os.makedirs(mnt_root, exist_ok=True)

    def maker(name, opts):
        mp = os.path.join(mnt_root, name)
        os.makedirs(mp, exist_ok=True)
        return lambda: Mount(name, mp, [a.shardfs, "mount", "-f"] + opts + [index, mp], "fuse3",
                             os.path.join(scratch, f"{name}.log"))

    bench.reference = {"walk": ref_base_walk, "lstat": ref_list["lstat"],
                       "read": ref_list["read"]}
    systems["base"] = bench.run_mounted("base", "base tree (default)", maker("base", []),
                                        a.phase_timeout)
    if have_view:
        bench.reference = {"walk": ref_view_walk, "lstat": ref_list["lstat"],
                           "read": ref_list["read"]}
        systems["view"] = bench.run_mounted("view", f"view {VIEW_SPEC}",
                                            maker("view", ["-o", f"view={VIEW_SPEC}"]),
                                            a.phase_timeout)
    walk_entries = {"base": ref_base_walk["files"] + ref_base_walk["dirs"],
                    "view": ref_view_walk["files"] + ref_view_walk["dirs"]}
    return systems, walk_entries


def add_many_versions(run, index, view_paths, have_view):
    """Step 4, first half: --versions more versions of the view `many`, one excluded path each;
    True when they were all made."""
    a = run.a
    st = run.step("many_versions", f"{a.versions} more versions (view create loop, "
                  "1 excluded path each)")
    if not have_view:
        st.status, st.note = "not run", "no view"
        return False
    one = os.path.join(run.scratch, "lists", "one.list")
    start = time.perf_counter()
    for v in range(a.versions):
        with open(one, "w") as f:
            f.write(view_paths[(v * 7919) % len(view_paths)] + "\n")
        r = run.shardfs(st, ["view", "create", index, "many", "--exclude-list", one])
        if r is None:
            break
        st.info.setdefault("per_create", []).append(r[1])
    if st.status == "ok":
        st.samples.append(time.perf_counter() - start)
        pc = st.info.pop("per_create")
        st.info["per_create_median_seconds"] = statistics.median(pc)
        st.info["per_create_max_seconds"] = max(pc)
        st.info["index_bytes_after"] = tree_bytes(index)[0]
    return st.status == "ok"


def measure_with_versions(run, index, lists, many_ok):
    """Step 4, second half: mounts and view create again, with the versions in the index."""
    for name, title, spec in (("mount_view_many", "mount, the exclude view, with the versions",
                               VIEW_SPEC),
                              ("mount_latest_many", "mount, many (latest of the versions)",
                               "many"),
                              ("mount_base_many", "mount, base tree, with the versions", None)):
        st = run.step(name, title)
        if many_ok:
            run.mount_times(st, index, spec, run.a.mount_reps)
        else:
            st.status, st.note = "not run", "no versions"
    st = run.step("create_exclude_many", f"view create, exclude list of {lists.nlist:,} paths, "
                  "with the versions")
    if many_ok:
        r = run.shardfs(st, ["view", "create", index, "clean", "--exclude-list",
                             lists.excl_file])
        if r is not None:
            st.samples.append(r[1])
    else:
        st.status, st.note = "not run", "no versions"


def time_index_add(run, pristine, meta):
    """Step 5: index add of the extra shard to a copy of the pristine index against index build
    of that shard alone, both from a warm page cache."""
    a, scratch = run.a, run.scratch
    extra = meta["extra_shards"][0]
    st_build = run.step("build_extra", "index build of the new shard alone")
    st_add = run.step("index_add", f"index add of the new shard to the {a.files:,}-entry index")
    subprocess_read(extra)  # Both scans then start from a warm page cache.
    for rep in range(a.reps):
        tmp = os.path.join(scratch, "extra-index")
        shutil.rmtree(tmp, ignore_errors=True)
        r = run.shardfs(st_build, ["index", "build", "--quiet", "--out", tmp, extra])
        shutil.rmtree(tmp, ignore_errors=True)
        if r is None:
            break
        st_build.samples.append(r[1])
    for rep in range(a.reps):
        added = os.path.join(scratch, "index-add")
        shutil.rmtree(added, ignore_errors=True)
        shutil.copytree(pristine, added)
        r = run.shardfs(st_add, ["index", "add", "--quiet", added, extra])
        if r is None:
            break
        st_add.samples.append(r[1])
        st_add.info["output"] = r[0].decode(errors="replace").strip()
        shutil.rmtree(added, ignore_errors=True)
    st_add.info["shard_bytes"] = os.path.getsize(extra)
    st_add.info["shard_files"] = meta["extra_files"]


def views_report(a, run, meta, ddir, imeta, info, systems, walk_entries, cold):
    """The JSON report (schema shardfs-bench-views/1), targets included; cold is
    (can_cold, why not)."""
    report = {
        "schema": "shardfs-bench-views/1",
        "params": {"files": a.files, "classes": a.classes, "seed": a.seed,
                   "median_kib": a.median_kib, "sigma": a.sigma, "reps": a.reps,
                   "mount_reps": a.mount_reps, "procs": a.procs, "shard_size": a.shard_size,
                   "view_paths": info["view_paths"], "versions": a.versions,
                   "workdir": a.workdir},
        "environment": host_facts(a) | {"cold_runs": cold[0], "cold_skipped_because": cold[1],
                                        "loadavg_start": a.loadavg_start,
                                        "loadavg_end": os.getloadavg(), "notes": run.notes},
        "dataset": {k: meta[k] for k in ("files", "dirs", "bytes", "extra_files",
                                         "extra_bytes", "generate_seconds")}
        | {"cached": meta.get("cached", False), "shards": len(meta["shards"]),
           "shard_bytes": sum(os.path.getsize(p) for p in meta["shards"]), "path": ddir},
        "build": {"index_build_seconds": imeta["seconds"], "index_bytes": imeta["bytes"],
                  "index_cached": imeta["cached"], **info},
        "steps": {n: s.to_json() for n, s in run.steps.items()},
        "systems": {n: s.to_json(systems.get("base")) for n, s in systems.items()},
        "walk_entries": walk_entries,
    }
    report["targets"] = views_targets(run.steps, systems, walk_entries, a)
    return report


def run_views(a, scratch):
    """The views run: steps 1-5 in order, each reported (a command not built yet is "not
    built", the rest goes on); 1 if a system failed or a step erred."""
    run = ViewsRun(a, scratch)
    run.xxh = Xxh3("the views mode needs it for its reference checksums")
    can_cold, why = can_drop_caches()
    key, params = views_dataset_key(a)
    ddir = os.path.join(a.workdir, f"views-{key}")
    meta = generate_views_dataset(a, ddir, run.xxh)
    pristine, imeta = base_index(a, ddir, meta["shards"], scratch)
    rows = read_manifest(ddir)
    lists = ViewLists(a, scratch, [r[0] for r in rows])
    index = working_index(ddir, scratch, pristine)
    info = {"view_paths": lists.nlist, "versions": a.versions}

    create_views(run, index, lists, info)
    # 2. Mount times: the base tree and the view, warm.
    have_view = run.steps["create_exclude"].status == "ok"
    run.mount_times(run.step("mount_base", "mount, base tree (warm)"), index, None, a.mount_reps)
    st = run.step("mount_view", "mount, the exclude view (warm)")
    if have_view:
        run.mount_times(st, index, VIEW_SPEC, a.mount_reps)
    else:
        st.status, st.note = "not run", "no view"
    excl_set = set(lists.excluded)
    view_rows = [r for r in rows if r[0] not in excl_set]
    bench = Bench(a, ddir, scratch, meta, [r[0] for r in view_rows], can_cold)
    systems, walk_entries = measure_walks_and_reads(run, bench, index, rows, view_rows,
                                                    have_view)
    many_ok = add_many_versions(run, index, [r[0] for r in view_rows], have_view)
    measure_with_versions(run, index, lists, many_ok)
    time_index_add(run, pristine, meta)

    report = views_report(a, run, meta, ddir, imeta, info, systems, walk_entries,
                          (can_cold, why))
    write_report_json(a.json_out, report)
    print_views_report(report, systems)
    bad = [n for n, s in systems.items() if s.status != "ok"]
    bad += [n for n, s in run.steps.items() if s.status == "error"]
    if bad:
        log(f"errors in: {', '.join(bad)}")
        return 1
    return 0


def subprocess_read(path):
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def check_diff(path, excluded, rename_map):
    """'ok' when the diff of clean@1 -> relabeled@1 is exactly: the excluded files added, the
    map's files renamed; else what differs."""
    try:
        with open(path) as f:
            d = json.load(f)
    except ValueError as e:
        return f"not JSON: {e}"
    files = lambda xs: sorted(x.lstrip("/") for x in xs if not x.endswith("/"))  # noqa: E731
    problems = []
    if files(d.get("added", [])) != sorted(excluded):
        problems.append(f"added {len(files(d.get('added', [])))} != {len(excluded)} excluded")
    if files(d.get("removed", [])):
        problems.append(f"{len(files(d['removed']))} removed, want 0")
    ren = {r["from"].lstrip("/"): r["to"].lstrip("/") for r in d.get("renamed", [])
           if not r["from"].endswith("/")}
    if ren != rename_map:
        problems.append(f"renamed {len(ren)} pairs, want {len(rename_map)} (or other pairs)")
    if d.get("replaced"):
        problems.append(f"{len(d['replaced'])} replaced, want 0")
    return "; ".join(problems) or "ok"


# -- targets and the table -------------------------------------------------------------------

def views_targets(steps, systems, walk_entries, a):
    targets = []

    def add(name, value, op, goal, unit, note=""):
        targets.append(target_row(name, value, op, goal, unit, note))

    def med(name, scale=1.0):
        m = steps[name].median() if name in steps else None
        return m * scale if m is not None else None

    add("view create, exclude list", med("create_exclude"), "<=", 2.0, "s")
    added = steps["create_exclude"].info.get("index_bytes_added")
    add("index bytes added by that view", statistics.median(added) / MB if added else None,
        "<=", 2.0, "MB")
    add("view create, rename map", med("create_rename"), "<=", 5.0, "s")
    add("view diff of the two", med("diff"), "<=", 2.0, "s")
    add("mount a view (warm, median)", med("mount_view", 1000), "<=", 50.0, "ms")
    add(f"mount a view with {a.versions} more versions", med("mount_view_many", 1000), "<=",
        50.0, "ms")
    add(f"mount the latest of {a.versions} versions", med("mount_latest_many", 1000), "<=",
        50.0, "ms")
    base, view = systems.get("base"), systems.get("view")
    for phase in WALK_PHASES + READ_PHASES:
        for temp in ("warm", "cold"):
            key = f"{phase}_{temp}"
            r = None
            if base and view and base.status == "ok" and view.status == "ok" and \
                    key in base.figures and key in view.figures:
                b, v = base.figures[key].median(), view.figures[key].median()
                if b and v:
                    if phase == "walk":  # Per entry: the view has fewer entries to list.
                        b, v = b / walk_entries["base"], v / walk_entries["view"]
                    r = v / b
            title = {"walk": "readdir walk time per entry", "lstat": "lstat walk time",
                     "read_tree1": "read tree order, 1 reader, files/s",
                     "read_rand4": f"read shuffled, {a.procs} readers, files/s"}[phase]
            if phase.startswith("read"):
                add(f"{title}, {temp}: view vs base", r, ">=", 0.9, "x")
            else:
                add(f"{title}, {temp}: view vs base", r, "<=", 1.1, "x")
    b, ad = med("build_extra"), med("index_add")
    add("index add minus index build of the shard alone",
        ad - b if ad is not None and b is not None else None, "<=", 1.0, "s")
    return targets


def print_views_header(report, w):
    """Dataset, index, machine, skips and notes."""
    p, d, b, env = report["params"], report["dataset"], report["build"], report["environment"]
    w("\nshardfs bench --views\n")
    w(f"  dataset: {d['files']:,} files, {fmt_bytes(d['bytes'])} in {d['shards']} shards "
      f"({fmt_bytes(d['shard_bytes'])}), {p['classes']} classes, median {p['median_kib']} KiB, "
      f"seed {p['seed']}{' (cached)' if d.get('cached') else ''}; new shard: "
      f"{d['extra_files']:,} files, {fmt_bytes(d['extra_bytes'])}\n")
    w(f"  index:   build {b['index_build_seconds']:.2f} s"
      f"{' (cached)' if b['index_cached'] else ''}, {fmt_bytes(b['index_bytes'])}; "
      f"lists of {p['view_paths']:,} paths; {p['versions']} more versions\n")
    w(f"  machine: {env['cpus']} CPUs, kernel {env['kernel']}, "
      f"{'root' if env['root'] else 'NOT root'}; load {fmt_load(env['loadavg_start'])} at the "
      f"start, {fmt_load(env['loadavg_end'])} at the end; reps {p['reps']}, mount reps "
      f"{p['mount_reps']}\n")
    if not env["cold_runs"]:
        w(f"  SKIPPED: cold runs: {env['cold_skipped_because']}\n")
    for n in env["notes"]:
        w(f"  note: {n}\n")


def print_views_steps(report, w):
    """One line per timed command (mounts in ms, the rest in s), with what each added."""
    w(f"\n  {'step':<62} {'status':<10} {'median':>10} {'min..max':>21}\n")
    for name, s in report["steps"].items():
        ms = name.startswith("mount")
        unit = "ms" if ms else "s"
        scale = 1000 if ms else 1

        def f(v):
            return "-" if v is None else f"{v * scale:.{1 if ms else 3}f}"
        rng = ""
        if s["samples_seconds"]:
            rng = f"{f(s['min_seconds'])}..{f(s['max_seconds'])}"
        med = f"{f(s['median_seconds'])} {unit}" if s["median_seconds"] is not None else "-"
        w(f"  {s['title']:<62} {s['status']:<10} {med:>10} {rng:>21}\n")
        if s.get("index_bytes_added"):
            w(f"  {'  index bytes added':<62} {'':<10} "
              f"{fmt_bytes(statistics.median(s['index_bytes_added'])):>10}\n")
        if s.get("per_create_median_seconds") is not None:
            w(f"  {'  per create (median, max)':<62} {'':<10} "
              f"{s['per_create_median_seconds']:.3f} s {s['per_create_max_seconds']:>10.3f} s\n")
        if s.get("check"):
            w(f"  {'  contents':<62} {s['check']}\n")
        if s["note"]:
            w(f"    ({s['note']})\n")

    mb, mv = report["steps"]["mount_base"], report["steps"]["mount_view"]
    if mb["median_seconds"] is not None and mv["median_seconds"] is not None:
        w(f"  {'  view mount minus base tree mount':<62} {'':<10} "
          f"{(mv['median_seconds'] - mb['median_seconds']) * 1000:>7.1f} ms\n")


def print_views_figures(report, systems, w):
    """The walks and reads of the base tree and the view, with the view's ratio to the base."""
    w(f"\n  {'figure':<36} {'system':<22} {'unit':>7} {'median':>12} {'min..max':>23} "
      f"{'vs base':>9}\n")
    base = systems.get("base")
    for phase in ["mount"] + WALK_PHASES + READ_PHASES:
        for temp in ("warm", "cold"):
            key = f"{phase}_{temp}"
            first = True
            for name, s in systems.items():
                fg = s.figures.get(key)
                if fg is None:
                    continue
                v, unit = fg.values(), fg.unit()
                if fg.status == "ok" and v:
                    med = fmt_num(statistics.median(v), unit)
                    rng = f"{fmt_num(min(v), unit)}..{fmt_num(max(v), unit)}"
                else:
                    med, rng = fg.status, ""
                rt = ""
                if name != "base" and base and key in base.figures:
                    bm, vm = base.figures[key].median(), fg.median()
                    if bm and vm:
                        if phase == "walk":
                            bm /= report["walk_entries"]["base"]
                            vm /= report["walk_entries"]["view"]
                        rt = f"{vm / bm:.2f}x"
                title = f"{phase}, {temp}" if first else ""
                w(f"  {title:<36} {s.label:<22} {unit:>7} {med:>12} {rng:>23} {rt:>9}\n")
                first = False
    for name, s in systems.items():
        if s.status != "ok":
            w(f"  {s.label}: {s.status} ({s.reason})\n")
    w("  (lstat and reads: both over the view's files; walk: each its whole tree, compared "
      "per entry)\n")


def print_views_report(report, systems, out=sys.stdout):
    w = out.write
    print_views_header(report, w)
    print_views_steps(report, w)
    print_views_figures(report, systems, w)
    w("\ntargets (views)\n")
    for t in report["targets"]:
        v = "-" if t["value"] is None else (f"{t['value']:.2f}x" if t["unit"] == "x"
                                             else f"{t['value']:.3g} {t['unit']}")
        goal = f"{t['op']} {t['goal']:g}{'x' if t['unit'] == 'x' else ' ' + t['unit']}"
        w(f"  {t['target']:<58} {v:>10}  {goal:<10} {t['status']}\n")
    w("\n")
    out.flush()


def fmt_load(la):
    return "/".join(f"{x:.2f}" for x in la) if la else "?"
