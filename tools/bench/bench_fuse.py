#!/usr/bin/env python3
"""shardfs bench --fuse: what a file costs through the FUSE mount, beside the loose tree and
`mount --kernel` of the same index, for unmodified Python readers.

Dataset: --files files of 4-16 KiB (incompressible) in --dirs folders, packed into --shards
GNU tar shards with one index; cached in the work dir.

Rows (each system: the loose tree, the FUSE mount, `mount --kernel`):
  open().read() warm          one process, Python's default open(p, "rb") over every file in a
                              shuffled order; a pass unmeasured, then --reps passes, the median.
                              Python < 3.14 asks isatty() at each open(): one FUSE_IOCTL each.
  open() + fastopen warm      the same with shardfs.fastopen.install() in the reader (the
                              opt-in: open(p, "rb") keeps its buffer and asks no isatty()
                              under a shardfs mount; elsewhere it is open() itself); its ratio
                              and target against the loose tree's default open(); needs the
                              Python package in BUILD/src/python, else the row is left out.
  open(buffering=0) warm      the same without isatty().
  dentries cold, 4 processes  `echo 2 > drop_caches` (dentries and inodes dropped, the daemon's
                              memory and the shards' pages kept), then --procs processes each
                              read their share of the shuffled files; from the common start to
                              the last one done (--reps times, the median).
And the daemon's own figures, from `shardfs stats --json` (FUSE only; the kernel mount has no
daemon): the requests the kernel sent per file, by kind, for a first pass after a listing
(cold, as a loader that lists its tree first), a warm pass and a dentries-dropped pass; the
worker threads that ever served a request after --reps dentries-dropped epochs (the cold pass
included: no thread churn means at most the configured workers); the reads of the index's
files per file in a dentries-dropped epoch. A warm measurement during which the page cache lost
pages (/proc/vmstat: a drop_caches, pages reclaimed and read again, as a DAMON pageout scheme
does) is taken again, up to WARM_TRIES times in all; what the one kept lost is in the JSON
(pages_lost_during_warm_MODE, {} for a warm one).

Every file's bytes are checked against the loose tree (blake2b digests) before anything is
timed. Needs root (drop_caches, the kernel mount). With --perf DIR, each of the FUSE mount's
rows runs once more, untimed, under `perf record -a -g` (bench_perf.py): the top symbols go
into the report and the JSON ("profiles"), the whole reports into DIR.

Usage (after `ninja -C build`):
    python3 tools/bench/shardfs_bench.py --fuse [--files 20000] [--reps 3] [--build-dir build]
        [--json out.json] [--mount-options O] [--perf DIR]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

from bench_args import (add_binary_args, add_json_arg, add_seed_arg, add_workdir_arg,
                        host_facts, resolve_binaries, write_report_json)
from bench_common import BenchError, log
from bench_mounts import Mount, run_in_scratch
from bench_perf import Profile, print_profiles

# The targets, against the loose tree on the same set.
TARGETS = {"default": 0.5, "fastopen": 0.5, "unbuffered": 0.95, "dentries_cold": 0.5}
# The row each row is compared with on the loose tree: the opt-in against what an unmodified
# loader gets there, Python's default open().
REFERENCE = {"fastopen": "default"}
TARGET_THREADS = 16  # Over the epochs, cold ones included.
TARGET_INDEX_READS = 0.2  # Per file, over a dentries-dropped epoch.

# One reader process: reads the files named in LIST (one per line, relative to ROOT) in
# that order, PASSES times, and prints a JSON line per pass. With START, it waits until
# time.monotonic() reaches it (a common start for several processes). Mode fastopen imports
# shardfs.fastopen from the package directory PKG (sys.argv[6]) and installs it.
READER = r"""
import json, os, sys, time, hashlib
root, lst, mode, passes, start = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
names = [l.rstrip("\n") for l in open(lst)]
paths = [os.path.join(root, n) for n in names]
buffering = 0 if mode == "unbuffered" else -1
if mode == "fastopen":
    sys.path.insert(0, sys.argv[6])
    import shardfs.fastopen
    shardfs.fastopen.install()
if mode == "digest":
    for n, p in zip(names, paths):
        with open(p, "rb") as f:
            print(n, hashlib.blake2b(f.read(), digest_size=16).hexdigest())
    sys.exit(0)
while start and time.monotonic() < start:
    time.sleep(0.0005)
for _ in range(passes):
    t0 = time.monotonic()
    for p in paths:
        with open(p, "rb", buffering=buffering) as f:
            f.read()
    t1 = time.monotonic()
    print(json.dumps({"start": t0, "end": t1, "files": len(paths)}), flush=True)
"""


def parse_fuse_args(argv):
    ap = argparse.ArgumentParser(prog="shardfs_bench.py --fuse",
                                 description="What a file costs through the FUSE mount, beside "
                                 "the loose tree and mount --kernel.")
    ap.add_argument("--fuse", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--files", type=int, default=20000, help="files (default 20000)")
    ap.add_argument("--dirs", type=int, default=100, help="folders (default 100)")
    ap.add_argument("--shards", type=int, default=4, help="tar shards (default 4)")
    ap.add_argument("--reps", type=int, default=3, help="measured passes and epochs (default 3)")
    ap.add_argument("--procs", type=int, default=4, help="readers of the dentries-cold row (4)")
    ap.add_argument("--mount-options", default="", help="-o options for `shardfs mount`")
    ap.add_argument("--no-kernel", action="store_true", help="leave out mount --kernel")
    ap.add_argument("--subset", type=int, default=0,
                    help="time the passes over this many of the files (a shuffled part); the "
                    "tree, its index and the listing stay whole (0: every file)")
    ap.add_argument("--perf", metavar="DIR", default="",
                    help="profile the FUSE mount's rows: one extra, untimed pass of each under "
                    "`perf record -a -g`, the profiles and their reports in DIR")
    add_seed_arg(ap)
    add_binary_args(ap)  # The mount's shardfs; no bench_reader (the readers are Python).
    add_workdir_arg(ap, "default /var/tmp/shardfs-bench-fuse-<files>-<seed>")
    add_json_arg(ap)
    a = ap.parse_args(argv)
    a.workdir = a.workdir or f"/var/tmp/shardfs-bench-fuse-{a.files}-{a.seed}"
    resolve_binaries(a)
    a.python_package = python_package(a)
    return a


def make_dataset(a):
    """d<NNN>/f<NNNNNNN>.bin of 4-16 KiB, --shards tars of it in name order, and their index;
    cached. Returns (tree, index, sorted relative names)."""
    # Cached per shape: the work dir is per file count and seed already.
    base = os.path.join(a.workdir, f"data-{a.files}-d{a.dirs}-s{a.shards}")
    tree, idx = os.path.join(base, "tree"), os.path.join(base, "idx")
    names = [f"d{i % a.dirs:03d}/f{i:07d}.bin" for i in range(a.files)]
    names.sort()
    if not os.path.exists(os.path.join(base, "done")):
        log(f"generating {a.files} files in {tree}")
        rnd = random.Random(a.seed)
        for d in range(min(a.dirs, a.files)):
            os.makedirs(os.path.join(tree, f"d{d:03d}"), exist_ok=True)
        for n in names:
            with open(os.path.join(tree, n), "wb") as f:
                f.write(rnd.randbytes(rnd.randrange(4096, 16385)))
        shards = []
        per = -(-len(names) // a.shards)
        for s in range(a.shards):
            part = names[s * per:(s + 1) * per]
            if not part:
                break
            lst = os.path.join(base, f"shard-{s:03d}.list")
            with open(lst, "w") as f:
                f.write("\n".join(part) + "\n")
            shards.append(os.path.join(base, f"shard-{s:03d}.tar"))
            subprocess.run(["tar", "--format=posix", "-cf", shards[-1], "-C", tree, "-T", lst],
                           check=True)
        subprocess.run([a.shardfs, "index", "build", "--quiet", "--out", idx, *shards],
                       check=True)
        open(os.path.join(base, "done"), "w").close()
    return tree, idx, names


def run_readers(root, lists, mode, passes, start=0.0, package=""):
    """One reader process per list; their JSON lines, or BenchError with the failure."""
    procs = [subprocess.Popen([sys.executable, "-c", READER, root, lst, mode, str(passes),
                               repr(start), package], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for lst in lists]
    out = []
    for p in procs:
        so, se = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise BenchError(f"a reader of {root} failed: {se.strip()[-400:]}")
        out.append([json.loads(l) for l in so.splitlines() if l.strip()])
    return out


# /proc/vmstat counters that say the page cache lost pages: drop_caches writes, pages freed with
# reclaimed inodes or shadow entries, and reclaimed file pages read again (workingset_refault_file,
# which a DAMON pageout scheme moves and no pgsteal_* does; tests/integration/shardfs_testlib.py
# says why each). A warm pass during which one moved was not all warm: its request counts say so.
PAGE_LOSS_COUNTERS = ("drop_pagecache", "drop_slab", "pginodesteal", "kswapd_inodesteal",
                      "workingset_nodereclaim", "workingset_refault_file")
WARM_TRIES = 3  # A warm measurement that lost pages is taken again, up to this many times in all.


def pages_lost(before=None):
    """The counters above now ({name: count}); with `before` (such a reading), those that moved
    since, by how much."""
    with open("/proc/vmstat") as f:
        now = {k: int(v) for k, _, v in (l.partition(" ") for l in f) if k in PAGE_LOSS_COUNTERS}
    if before is None:
        return now
    return {k: now[k] - v for k, v in before.items() if now.get(k, v) != v}


def drop_dentries():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def write_list(path, names):
    with open(path, "w") as f:
        f.write("\n".join(names) + "\n")
    return path


class Daemon:
    """The FUSE mount's counters: `shardfs stats --json`, by difference."""

    def __init__(self, a, mnt, pid):
        self.a, self.mnt, self.pid = a, mnt, pid

    def stats(self):
        p = subprocess.run([self.a.shardfs, "stats", "--json", self.mnt], capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            raise BenchError(f"shardfs stats {self.mnt}: {p.stderr.strip()}")
        return json.loads(p.stdout)

    def status(self, field):
        """A number of /proc/PID/status (VmHWM is in kB)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return None


def per_file(before, after, files):
    kinds = after["kernel_requests"]
    return {k: round((kinds[k] - before["kernel_requests"][k]) / files, 3) for k in kinds
            if kinds[k] != before["kernel_requests"][k]}


def measure_system(a, scratch, system, root, order, daemon):
    """The rows of one system; with `daemon`, its counters too."""
    row = {}
    everything = write_list(os.path.join(scratch, "order"), order)
    if daemon:
        s0 = daemon.stats()
        for dirpath, _, files in os.walk(root):  # A loader's listing (ImageFolder).
            for f in files:
                os.stat(os.path.join(dirpath, f))
        s1 = daemon.stats()
        row["requests_listing"] = per_file(s0, s1, a.files)  # The whole tree's.
    cold = run_readers(root, [everything], "default", 1)[0][0]
    row["cold_first_pass"] = cold["files"] / (cold["end"] - cold["start"])
    if daemon:
        s2 = daemon.stats()
        row["requests_cold"] = per_file(s1, s2, len(order))
    for mode in warm_modes(a):
        for attempt in range(WARM_TRIES):
            if daemon and attempt:
                s2 = s3  # Each try counted from its own start.
            before = pages_lost()
            passes = run_readers(root, [everything], mode, a.reps + 1,
                                 package=a.python_package)[0][1:]
            lost = pages_lost(before)
            if daemon:
                s3 = daemon.stats()
            if not lost:
                break
            if attempt + 1 < WARM_TRIES:
                log(f"{system}: open() {mode} warm: the page cache lost pages ({lost}); "
                    "taken again")
        rates = [p["files"] / (p["end"] - p["start"]) for p in passes]
        row[mode] = {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}
        row[f"pages_lost_during_warm_{mode}"] = lost
        log(f"{system}: open() {mode} warm {row[mode]['median']:.0f} files/s")
        if daemon:
            row[f"requests_warm_{mode}"] = per_file(s2, s3, len(order) * (a.reps + 1))
            if a.perf:
                with Profile(a.perf, f"{system}-warm-{mode}") as prof:
                    run_readers(root, [everything], mode, 1, package=a.python_package)
                row.setdefault("profiles", {})[f"warm {mode}"] = prof.summary
                s3 = daemon.stats()
            s2 = s3
    share = [order[i::a.procs] for i in range(a.procs)]
    lists = [write_list(os.path.join(scratch, f"share-{i}"), s) for i, s in enumerate(share)]
    times, reads = [], []
    for _ in range(a.reps):
        if daemon:
            s4 = daemon.stats()
        drop_dentries()
        res = run_readers(root, lists, "default", 1, time.monotonic() + 0.5)
        times.append(max(r[0]["end"] for r in res) - min(r[0]["start"] for r in res))
        if daemon:
            s5 = daemon.stats()
            row["requests_dentries_dropped"] = per_file(s4, s5, len(order))
            reads.append((s5["index_reads"] - s4["index_reads"]) / len(order))
    row["dentries_cold"] = {"median": statistics.median(times), "min": min(times),
                            "max": max(times)}
    log(f"{system}: dentries cold, {a.procs} processes: {row['dentries_cold']['median']:.3f} s")
    if daemon:
        end = daemon.stats()
        row["index_reads_per_file"] = max(reads)
        row["worker_threads"] = end["worker_threads"]
        row["threads_now"] = daemon.status("Threads")
        row["peak_rss_bytes"] = daemon.status("VmHWM") * 1024
        if a.perf:
            drop_dentries()
            with Profile(a.perf, f"{system}-dentries-cold") as prof:
                run_readers(root, lists, "default", 1)
            row.setdefault("profiles", {})["dentries cold"] = prof.summary
    return row


def python_package(a):
    """BUILD/src/python if the package's shardfs.fastopen is there, else "" (no fastopen row)."""
    pkg = os.path.join(a.build_dir, "src", "python")
    return pkg if os.path.exists(os.path.join(pkg, "shardfs", "fastopen.py")) else ""


def warm_modes(a):
    return ("default", "fastopen", "unbuffered") if a.python_package else ("default",
                                                                          "unbuffered")


def check_bytes(root, tree, scratch, names):
    """None if every file under root has the loose tree's bytes, else the first that differs."""
    lst = write_list(os.path.join(scratch, "all"), names)
    got = subprocess.run([sys.executable, "-c", READER, root, lst, "digest", "1", "0"],
                         capture_output=True, text=True, timeout=3600)
    want = subprocess.run([sys.executable, "-c", READER, tree, lst, "digest", "1", "0"],
                          capture_output=True, text=True, timeout=3600)
    if got.returncode != 0:
        return f"cannot read: {got.stderr.strip()[-300:]}"
    for g, w in zip(got.stdout.splitlines(), want.stdout.splitlines()):
        if g != w:
            return f"{g.split()[0]} differs"
    return None


def mount(a, scratch, system, idx, tag):
    mnt = os.path.join(scratch, f"{system}-{tag}")
    os.makedirs(mnt)
    opts = ["-o", a.mount_options] if a.mount_options else []
    if system == "fuse":
        argv, kind = [a.shardfs, "mount", "-f", *opts, idx, mnt], "fuse3"
    else:
        argv, kind = [a.shardfs, "mount", "--kernel", "-o",
                      f"cache_dir={os.path.join(scratch, 'kcache')}", idx, mnt], "kernel"
    m = Mount(f"shardfs-{system}", mnt, argv, kind, os.path.join(scratch, f"{system}.log"))
    m.mount(300)
    return m


def measure_mounted(a, scratch, system, idx, tree, names, order):
    """The rows of a mount: its bytes checked on one mount, its figures taken on a fresh one
    (the check warmed everything)."""
    m = mount(a, scratch, system, idx, "check")
    try:
        bad = check_bytes(m.mountpoint, tree, scratch, names)
    finally:
        m.unmount()
    if bad:
        return {"failed": bad}
    m = mount(a, scratch, system, idx, "run")
    try:
        daemon = Daemon(a, m.mountpoint, m.proc.pid) if system == "fuse" else None
        return measure_system(a, scratch, system, m.mountpoint, order, daemon)
    finally:
        m.unmount()


def main_fuse(argv):
    a = parse_fuse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("shardfs_bench.py --fuse: needs root (drop_caches, mount --kernel)")
    os.makedirs(a.workdir, exist_ok=True)
    tree, idx, names = make_dataset(a)
    order = list(names)
    random.Random(a.seed).shuffle(order)
    if a.subset:
        # Passes over a shuffled part of a big tree: the index, the listing and the
        # kernel's view stay whole; the bytes checked are the part's.
        order = order[:a.subset]
        names = sorted(order)

    def body(scratch):
        rep = {"schema": "shardfs-bench-fuse/1", "files": len(names), "reps": a.reps,
               "tree_files": a.files,
               "procs": a.procs, "environment": host_facts(a), "systems": {}}
        rep["systems"]["loose"] = measure_system(a, scratch, "loose", tree, order, None)
        for system in ("fuse", "kernel"):
            if system == "kernel" and a.no_kernel:
                continue
            try:
                rep["systems"][system] = measure_mounted(a, scratch, system, idx, tree, names,
                                                         order)
            except (BenchError, TimeoutError, OSError) as e:
                rep["systems"][system] = {"skipped": str(e)}
        print_fuse_report(rep)
        write_report_json(a.json_out, rep)
        return 0

    return run_in_scratch(a.workdir, "run-", body)


def ratio_cell(row, ref, key, higher_better=True):
    ref_key = REFERENCE.get(key, key)
    if key not in row or ref_key not in ref:
        return "-"
    v, r = row[key]["median"], ref[ref_key]["median"]
    return f"{(v / r if higher_better else r / v):.2f}x"


def print_fuse_report(rep):
    systems = rep["systems"]
    loose = systems["loose"]
    part = (f" of a tree of {rep['tree_files']}" if rep.get("tree_files", rep["files"])
            != rep["files"] else "")
    print(f"\nshardfs bench --fuse: {rep['files']} files{part}, median of {rep['reps']} "
          f"(kernel {rep['environment']['kernel']}, Python {rep['environment']['python']}, "
          f"{rep['environment']['cpus']} CPUs)")
    if rep["environment"].get("page_reclaim"):
        print(f"(this host: {rep['environment']['page_reclaim']}; a warm pass longer than that "
              "re-reads part of its pages from the disk)")
    print(f"{'row':34} " + " ".join(f"{s:>22}" for s in systems))
    rows = (("open().read() warm, files/s", "default", True),
            ("open() + fastopen warm, files/s", "fastopen", True),
            ("open(buffering=0) warm, files/s", "unbuffered", True),
            (f"dentries cold, {rep['procs']} procs, s", "dentries_cold", False))
    for label, key, higher in rows:
        if not any(key in row for row in systems.values()):
            continue  # No fastopen row without the Python package.
        cells = []
        for name, row in systems.items():
            if key not in row:
                cells.append(row.get("failed") or row.get("skipped", "-")[:22])
                continue
            v = row[key]["median"]
            num = f"{v:.0f}" if higher else f"{v:.3f}"
            cells.append(f"{num} ({ratio_cell(row, loose, key, higher)})")
        print(f"{label:34} " + " ".join(f"{c:>22}" for c in cells))
    fuse = systems.get("fuse", {})
    if "default" not in fuse:
        return
    print("\nthe FUSE daemon (kernel requests per file, by kind):")
    for key in ("requests_listing", "requests_cold", "requests_warm_default",
                "requests_warm_fastopen", "requests_warm_unbuffered", "requests_dentries_dropped"):
        if key not in fuse:
            continue
        print(f"  {key[9:]:17} {fuse.get(key)}")
    print(f"  worker threads that served requests after {rep['reps']} dentries-cold epochs: "
          f"{fuse['worker_threads']} (threads now {fuse['threads_now']})")
    print(f"  the daemon's peak RSS: {fuse['peak_rss_bytes'] / 2**20:.0f} MiB")
    print(f"  index reads per file, dentries-cold epoch: {fuse['index_reads_per_file']:.3f}")
    print("\ntargets (FUSE against the loose tree):")
    for key, label in (("default", "open().read() warm"), ("fastopen", "open() + fastopen warm"),
                       ("unbuffered", "buffering=0 warm"),
                       ("dentries_cold", f"dentries cold, {rep['procs']} procs")):
        if key not in fuse:
            continue
        got = fuse[key]["median"] / loose[REFERENCE.get(key, key)]["median"]
        if key == "dentries_cold":
            got = 1 / got
        verdict = "met" if got >= TARGETS[key] else "NOT met"
        print(f"  {label:28} >= {TARGETS[key]}x: {got:.2f}x {verdict}")
    t = fuse["worker_threads"]
    print(f"  {'worker threads':28} <= {TARGET_THREADS}: {t} "
          f"{'met' if t <= TARGET_THREADS else 'NOT met'}")
    r = fuse["index_reads_per_file"]
    print(f"  {'index reads per file':28} <= {TARGET_INDEX_READS}: {r:.3f} "
          f"{'met' if r <= TARGET_INDEX_READS else 'NOT met'}")
    if fuse.get("profiles"):
        print_profiles({f"FUSE, {k}, an extra pass": v for k, v in fuse["profiles"].items()},
                       sys.stdout)
