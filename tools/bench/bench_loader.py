"""`shardfs_bench.py --loader` ("The real loader"): an unmodified torchvision
ImageFolder + torch DataLoader (N workers, shuffle=True, JPEG decode + resize to 224x224) over
the loose tree and over a shardfs mount of the same tree, cold and warm, on real JPEGs. With
--kernel also over `shardfs mount --kernel` of the same index (path "kernel").

The driver stays on the standard library; the torch side runs in loader_worker.py under
--loader-python (Debian's /usr/bin/python3 has torch, torchvision and PIL): one `generate` to
make the dataset, one long-lived `serve` process that imports torch once and runs one loader
epoch per request. Between requests the driver drops caches and remounts, so a cold run is
cold for the dataset and nothing else (torch's own pages stay mapped in the server).

Each figure is one run of --loader-samples samples (0: the whole epoch) from the same seeded
permutation, so every path reads the same samples: their byte count, CRC sum, per-class counts
and (decode) the sum of the decoded tensors must agree between the loose tree and the mount,
else the mount is FAILED. Mode "raw" is the same DataLoader whose loader stops after reading
the bytes: with --required-rate it tells whether storage or decode is the bottleneck.
"""

import contextlib
import hashlib
import json
import math
import os
import platform
import select
import shutil
import subprocess
import sys
import time

from bench_args import MemoryCgroup, page_reclaim, write_report_json
from bench_perf import Profile, print_profiles
from bench_common import MOUNT_TIMEOUT, BenchError, fmt_bytes, log, parse_size, tree_bytes
from bench_dataset import tree_file_list
from bench_images import pack_or_reuse
from bench_kernel import KernelImageCache
from bench_mounts import REG, Mount, kill_group
import bench_plot
from bench_report import median_run, paired_ratio, target_row
from bench_workloads import can_drop_caches, drop_caches, drops_so_far

JPEG_GENERATOR_VERSION = 1
MODES = ["decode", "raw"]
MODE_TITLES = {"decode": "full decode (read + PIL decode + resize 224 + ToTensor)",
               "raw": "raw I/O (read the bytes, no decode)"}
PATHS = ["loose", "mount"]  # "kernel" comes third with --kernel, then "package".
# Beside loose and mount, each with its own columns: shardfs mount --kernel, and the Python
# package's shardfs.torch.ImageFolder reading the index in-process.
EXTRA_PATHS = ["kernel", "package"]
# shardfs.torch.ImageFolder against torchvision's over the loose tree.
PACKAGE_TARGETS = {"cold": 1.5, "warm": 1.1}
TEMPS = ["cold", "warm"]
TARGETS = {"cold": 1.0, "warm": 0.95}  # samples/s through the mount vs the loose tree, decode.
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loader_worker.py")


def add_args(ap):
    ap.add_argument("--loader", action="store_true",
                    help="measure a real torch DataLoader over torchvision ImageFolder instead "
                    "(bench_loader.py): real JPEGs, loose tree vs mount")
    ap.add_argument("--loader-workers", default="2",
                    help="--loader: DataLoader workers, or a list such as 1,2; --cluster: "
                    "one number, per rank (2)")
    ap.add_argument("--loader-samples", type=int, default=0,
                    help="--loader: samples per run (0: one whole epoch)")
    ap.add_argument("--loader-batch", type=int, default=64, help="--loader: batch size (64)")
    ap.add_argument("--required-rate", type=float, default=0.0,
                    help="--loader, --cluster: samples/s the training step consumes; prints "
                    "whether this machine's data path keeps pace (--loader: with how many "
                    "workers; --cluster: the ranks' aggregate)")
    ap.add_argument("--loader-reps", type=int, default=1,
                    help="--loader: runs of every figure, the paths interleaved (loose, "
                    "mount, ... then again); each figure is the median run's (1)")
    ap.add_argument("--loader-image-scale", type=float, default=1.0,
                    help="--loader: the JPEGs' sides times this (1.0: 256..500 x 256..375, "
                    "median ~35 KiB; 0.5: a quarter of the pixels and bytes, for a tree of "
                    "millions on a small disk)")
    ap.add_argument("--loader-perf", dest="perf", metavar="DIR", default="",
                    help="--loader: each decode run once more, untimed, under `perf record "
                    "-a -g`; the profiles and their reports in DIR")
    ap.add_argument("--loader-modes", default="decode,raw",
                    help="--loader: which loaders run: decode (PIL decode + resize), raw (the "
                    "bytes only), or both (decode,raw)")
    ap.add_argument("--memory-limit", default="",
                    help="--loader: run the mounts and the loaders in a memory cgroup with this "
                    "limit (e.g. 2G; root): a tree bigger than the memory a job may use, as in "
                    "a container or a cluster job")
    ap.add_argument("--loader-python", default="/usr/bin/python3",
                    help="--loader: the interpreter with torch and torchvision (/usr/bin/python3)")


def finish_args(a, ap):
    """Checks the --loader options; sets the loader's default work dir."""
    if a.views or a.remote:
        ap.error("--loader, --views and --remote are separate runs")
    try:
        a.loader_workers = sorted({int(x) for x in a.loader_workers.split(",") if x.strip()})
    except ValueError:
        ap.error(f"--loader-workers: not a list of numbers: {a.loader_workers}")
    if not a.loader_workers or a.loader_workers[0] < 1:
        ap.error("--loader-workers must be positive")
    if a.loader_samples < 0 or a.loader_batch < 1 or a.required_rate < 0:
        ap.error("--loader-samples, --loader-batch and --required-rate must not be negative")
    a.loader_modes = [m for m in MODES if m in a.loader_modes.split(",")]
    if not a.loader_modes:
        ap.error(f"--loader-modes: one or both of {','.join(MODES)}")
    if a.memory_limit:
        try:
            a.memory_limit = parse_size(a.memory_limit)
        except ValueError as e:
            ap.error(f"--memory-limit: {e}")
    a.files = a.files or 100_000
    a.workdir = a.workdir or f"/var/tmp/shardfs-bench-loader-{a.files}-{a.seed}"


# -- dataset ---------------------------------------------------------------------------------

def jpeg_dataset(a, scratch):
    """WORKDIR/dataset-jpeg-<key>/tree: real JPEGs, generated once (via tree.partial) and
    reused by every later run with the same parameters. Returns (ddir, meta)."""
    params = {"v": JPEG_GENERATOR_VERSION, "kind": "jpeg", "files": a.files,
              "classes": a.classes, "seed": a.seed}
    if a.loader_image_scale != 1.0:  # Keyed only when set: the cached full-size sets stay.
        params["scale"] = a.loader_image_scale
    key = f"{hash_params(params)}"
    ddir = os.path.join(a.workdir, f"dataset-jpeg-{key}")
    tree = os.path.join(ddir, "tree")
    meta_path = os.path.join(ddir, "dataset.json")
    if os.path.exists(meta_path) and os.path.isdir(tree):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("params") == params:
            log(f"dataset: reusing {tree} ({meta['samples']:,} JPEGs, {fmt_bytes(meta['bytes'])})")
            meta["cached"] = True
            return ddir, meta
    os.makedirs(ddir, exist_ok=True)
    partial = os.path.join(ddir, "tree.partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(tree, ignore_errors=True)
    log(f"dataset: encoding {a.files:,} JPEGs with PIL (cached after the first run)")
    argv = [a.loader_python, WORKER, "generate", "--out", partial, "--files", str(a.files),
            "--classes", str(a.classes), "--seed", str(a.seed),
            "--scale", str(a.loader_image_scale)]
    log_path = os.path.join(scratch, "generate.log")
    with open(log_path, "ab") as logf:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=logf, start_new_session=True)
        REG.procs.add(p)
        try:
            out, _ = p.communicate(timeout=a.phase_timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            raise BenchError(f"JPEG generation took longer than {a.phase_timeout:.0f} s")
        REG.procs.discard(p)
    if p.returncode != 0:
        raise BenchError(f"loader_worker.py generate exited {p.returncode}: "
                         f"{file_tail(log_path)}")
    gen = json.loads(out.decode().strip().splitlines()[-1])
    os.rename(partial, tree)
    meta = {"params": params, "key": key, "samples": a.files, "files": a.files,
            "dirs": 2 + a.classes, "bytes": gen["bytes"], "pool_images": gen["pool"],
            "generate_seconds": gen["seconds"]}
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f, indent=1)
    os.rename(meta_path + ".tmp", meta_path)
    log(f"dataset: {a.files:,} JPEGs, {fmt_bytes(gen['bytes'])} in {gen['seconds']:.1f} s")
    meta["cached"] = False
    return ddir, meta


def hash_params(params):
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


def file_tail(path, n=800):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace").strip()
    except OSError:
        return ""


# -- the torch process ----------------------------------------------------------------------

class LoaderServer:
    """loader_worker.py serve: one JSON request per line in, one JSON result per line out.
    Started in its own session and registered, so cleanup kills it (and its DataLoader workers)
    on any way out."""

    def __init__(self, python, run_dir, log_path, timeout):
        self.log_path = log_path
        self.timeout = timeout
        self.logf = open(log_path, "ab")
        try:
            self.p = subprocess.Popen([python, WORKER, "serve", "--run-dir", run_dir],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self.logf, start_new_session=True)
        except OSError as e:
            self.logf.close()
            raise BenchError(f"--loader-python {python}: {e}")
        REG.procs.add(self.p)
        self.info = self._read(120)
        if not self.info.get("ready"):
            raise BenchError(f"loader_worker.py serve did not start: {self.info}")

    def _read(self, timeout):
        deadline = time.monotonic() + timeout
        fd = self.p.stdout.fileno()
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                self.close(kill=True)
                raise BenchError(f"the loader gave no answer in {timeout:.0f} s; see "
                                 f"{self.log_path}")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.close(kill=True)
                    raise BenchError("the loader process exited (is torch installed for "
                                     f"--loader-python?): {file_tail(self.log_path)}")
                buf += chunk
        return json.loads(buf.decode())

    def run(self, req):
        self.p.stdin.write((json.dumps(req) + "\n").encode())
        self.p.stdin.flush()
        out = self._read(self.timeout)
        if "error" in out:
            raise BenchError(f"loader run {req}: {out['error']}")
        return out

    def close(self, kill=False):
        if self.logf.closed:
            return
        if self.p.poll() is None and not kill:
            try:
                self.p.stdin.close()
                self.p.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        kill_group(self.p)
        self.logf.close()


# -- the run ---------------------------------------------------------------------------------

def loader_pack(a, ddir, tree, files, scratch):
    """The shards and index of the tree (packed or reused); returns (pack, build row)."""
    pdir, pack = pack_or_reuse(a, ddir, tree, files, scratch)
    idx_apparent, _ = tree_bytes(pack["index"])
    build = {"pack_method": pack["method"], "pack_seconds": pack["pack_seconds"],
             "pack_cached": pack["cached"], "shards": len(pack["shards"]),
             "shard_bytes": sum(os.path.getsize(p) for p in pack["shards"]),
             "index_bytes": idx_apparent}
    log(f"pack: {pack['method']}: {pack['pack_seconds']:.2f} s, {build['shards']} shards")
    return pack, build


class LoaderPaths:
    """The paths the loader reads through: loose and the FUSE mount always, `mount --kernel`
    with --kernel as root, the Python package when the build has it; what cannot run is said
    in `skipped`. Each mount is made afresh by fresh_mount and unmounted by unmount_all."""

    def __init__(self, a, scratch, index, skipped):
        self.a = a
        mp = os.path.join(scratch, "mnt")
        os.makedirs(mp)
        opts = ["-o", a.mount_options] if a.mount_options else []
        self.mounts = {"mount": ("shardfs", [a.shardfs, "mount", "-f"] + opts + [index, mp],
                                 "fuse3", os.path.join(scratch, "mount.log"))}
        self.paths = list(PATHS)
        self.image = None
        if a.kernel:
            if os.geteuid() != 0:
                skipped.append("kernel (shardfs mount --kernel): needs root")
            else:
                kmp = os.path.join(scratch, "mnt-kernel")
                os.makedirs(kmp)
                klog = os.path.join(scratch, "mount-kernel.log")
                self.image = KernelImageCache(os.path.join(scratch, "kernel-image-cache"), klog)
                self.mounts["kernel"] = (
                    "shardfs-kernel", self.image.mount_argv(a.shardfs, index, kmp,
                                                            a.mount_options),
                    "kernel", klog)
                self.paths.append("kernel")
        # The Python package (shardfs.torch.ImageFolder over the index, in-process, no mount),
        # where the build has it.
        self.package = os.path.join(a.build_dir, "src", "python")
        if os.path.isdir(os.path.join(self.package, "shardfs")):
            self.paths.append("package")
        else:
            skipped.append(f"package (shardfs.torch): not built in {self.package}")
        self.state = {p: None for p in self.mounts}
        self.mountpoints = {p: argv[-1] for p, (_, argv, _, _) in self.mounts.items()}

    def fresh_mount(self, path):
        if self.state[path] is not None:
            self.state[path].unmount()
        system, argv, kind, log_path = self.mounts[path]
        m = Mount(system, self.mountpoints[path], argv, kind, log_path)
        try:
            m.mount(min(self.a.phase_timeout, MOUNT_TIMEOUT))
        except TimeoutError as e:
            raise BenchError(f"mount {path}: {e}")
        self.state[path] = m

    def unmount_all(self):
        for m in self.state.values():
            if m is not None:
                m.unmount()


def loader_epoch(server, req, path, temp, can_cold, lp, notes):
    """One epoch of the loader (cold: caches dropped and the mount made afresh first); returns
    its result with the path, the temperature and the page-cache drops by other processes."""
    if temp == "cold":
        if can_cold:
            drop_caches()
        if path in lp.mounts:
            lp.fresh_mount(path)
    mark = drops_so_far()
    r = server.run(req)
    # A warm run during which another process dropped the page cache (a shared machine) is
    # reported, not hidden: runs take minutes.
    foreign = (drops_so_far() - mark) if mark is not None else 0
    r.update({"path": path, "temp": temp, "foreign_drops": foreign,
              "status": "ok" if temp == "warm" or can_cold else "skipped"})
    if foreign and temp == "warm":
        notes.append(f"{req['mode']} {req['workers']} workers {path} warm: the page cache was "
                     f"dropped {foreign} time(s) by another process during the run: partly cold")
    log(f"{req['mode']:<6} {req['workers']} workers {path:<6} {temp}: "
        f"{r['samples_per_s']:,.0f} samples/s, I/O share {r['io_share']:.1%} "
        f"({r['samples']:,} samples, {r['seconds']:.1f} s)")
    return r


def loader_epochs(a, server, lp, tree, index, can_cold, notes, profiles):
    """Every (workers, mode, path, cold then warm) epoch, in that order, --loader-reps times
    over (each rep all paths, so that a slow spell of the machine hits them alike). With
    --loader-perf, each decode epoch of the first rep runs once more under `perf record`
    (bench_perf.py); the top symbols go into `profiles` by run name."""
    runs = []
    roots = {"loose": os.path.join(tree, "train")}
    roots |= {p: os.path.join(m, "train") for p, m in lp.mountpoints.items()}
    for rep, w, mode in ((r, w, m) for r in range(a.loader_reps) for w in a.loader_workers
                         for m in a.loader_modes):
        for path in lp.paths:
            req = {"root": roots.get(path), "mode": mode, "workers": w,
                   "batch": a.loader_batch, "samples": a.loader_samples,
                   "seed": a.seed, "size": 224}
            if path == "package":
                req |= {"index": index, "index_root": "train", "pythonpath": lp.package}
            for temp in TEMPS:
                runs.append(loader_epoch(server, req, path, temp, can_cold, lp, notes)
                            | {"rep": rep})
                if a.perf and mode == "decode" and rep == 0:
                    # Once more, untimed, under perf (the same temperature).
                    name = f"loader-{mode}-{w}w-{path}-{temp}"
                    with Profile(a.perf, name) as prof:
                        loader_epoch(server, req, path, temp, can_cold, lp, [])
                    profiles[name] = prof.summary
    return runs


def loader_report(a, meta, tree, build, server, runs, paths, environment):
    """The JSON report (schema shardfs-bench-loader/1), rows, targets and the required rate's
    verdicts included."""
    rows, content_ok = make_rows(a, runs, paths)
    report = {
        "schema": "shardfs-bench-loader/1",
        "params": {"files": a.files, "classes": a.classes, "seed": a.seed,
                   "workers": a.loader_workers, "samples": a.loader_samples,
                   "reps": a.loader_reps,
                   "batch": a.loader_batch, "size": 224, "required_rate": a.required_rate,
                   "shard_size": a.shard_size, "mount_options": a.mount_options,
                   "paths": paths, "workdir": a.workdir, "image_scale": a.loader_image_scale,
                   "modes": a.loader_modes, "memory_limit": a.memory_limit or None},
        "environment": environment | {"torch": server.info.get("torch"),
                                      "torchvision": server.info.get("torchvision"),
                                      "pil": server.info.get("pil")},
        "dataset": {k: meta[k] for k in ("samples", "files", "dirs", "bytes")}
        | {"cached": meta.get("cached", False), "path": tree,
           "pool_images": meta.get("pool_images")},
        "build": build,
        "content": "ok" if content_ok else "FAILED",
        "runs": runs,
        "rows": rows,
    }
    report["targets"] = loader_targets(a, rows, content_ok)
    report["required"] = required_rate(a, rows) if a.required_rate else None
    return report


def run_loader(a, scratch):
    """The loader run: every path, mode and worker count, cold then warm, then the report."""
    can_cold, why = can_drop_caches()
    skipped, notes = [], []
    if not can_cold:
        skipped.append(f"cold runs: {why}; the first run of each figure is discarded instead")
    ddir, meta = jpeg_dataset(a, scratch)
    tree = os.path.join(ddir, "tree")
    pack, build = loader_pack(a, ddir, tree, tree_file_list(tree), scratch)
    # The mounts and the loader start inside the cgroup; the dataset was made outside it.
    with MemoryCgroup(a.memory_limit) if a.memory_limit else contextlib.nullcontext():
        lp = LoaderPaths(a, scratch, pack["index"], skipped)
        server = LoaderServer(a.loader_python, scratch, os.path.join(scratch, "loader.log"),
                              a.phase_timeout)
        try:
            profiles = {}
            runs = loader_epochs(a, server, lp, tree, pack["index"], can_cold, notes, profiles)
            server.close()
        except BaseException:
            server.close(kill=True)  # Do not wait for a running epoch on an error or Ctrl-C.
            raise
        finally:
            lp.unmount_all()
    if a.memory_limit:
        notes.append(f"the mounts and loaders ran in a memory cgroup limited to "
                     f"{fmt_bytes(a.memory_limit)} (--memory-limit)")
    if lp.image is not None:
        lp.image.record(build.setdefault("kernel_image", {}), meta["files"] + meta["dirs"])
    if os.cpu_count() and os.cpu_count() <= 2:
        notes.append(f"{os.cpu_count()} CPUs: decode is CPU-bound here; more workers than "
                     "cores only add contention")
    reclaim = page_reclaim()
    if reclaim:
        notes.append(f"{reclaim}: a warm run re-reads its cold run's pages; runs longer than "
                     "that age are partly cold (--loader-samples shortens them)")
    environment = {"root": os.geteuid() == 0, "cold_runs": can_cold, "cpus": os.cpu_count(),
                   "kernel": platform.release(), "loader_python": a.loader_python,
                   "skipped": skipped, "notes": notes, "page_reclaim": reclaim}
    report = loader_report(a, meta, tree, build, server, runs, lp.paths, environment)
    if profiles:
        report["profiles"] = profiles
    write_report_json(a.json_out, report)
    print_loader_report(report)
    if profiles:
        print_profiles({f"{k}, an extra run": v for k, v in profiles.items()}, sys.stdout)
    if a.plot:
        bench_plot.plot(a, report, scratch)
    return 0


def make_rows(a, runs, paths=PATHS):
    """One row per (mode, workers, temp): loose vs mount (and kernel: its figures and
    ratio_kernel). Every run of a mode read the same samples, so every checksum of that mode
    must be equal; returns (rows, all equal)."""
    every = {}
    for r in runs:
        every.setdefault((r["mode"], r["workers"], r["path"], r["temp"]), []).append(r)
    # With --loader-reps, each figure is its median run's (the lower middle of an even count);
    # every run must have read the same samples.
    by = {k: median_run(v) for k, v in every.items()}
    rows, content_ok = [], True
    for v in every.values():
        content_ok &= all(r["checksum"] == v[0]["checksum"] for r in v)
    for mode in (m for m in MODES if any(r["mode"] == m for r in runs)):
        ref = next(r["checksum"] for r in runs if r["mode"] == mode)
        for w in a.loader_workers:
            for temp in TEMPS:
                lo, mo = by[(mode, w, "loose", temp)], by[(mode, w, "mount", temp)]
                same = mo["checksum"] == lo["checksum"]
                consistent = lo["checksum"] == ref
                content_ok &= same and consistent
                ok = lo["status"] == "ok" and mo["status"] == "ok"
                ratio, ratios = paired_ratio(every, (mode, w, temp), "mount")
                row = {
                    "mode": mode, "workers": w, "temp": temp,
                    "status": ("ok" if ok else "skipped") if same else "FAILED",
                    "samples": lo["samples"],
                    "loose": pick(lo), "mount": pick(mo),
                    "ratio": ratio if ok and same else None, "ratio_reps": ratios,
                    "same_samples": same, "same_as_first_run": consistent}
                for extra in EXTRA_PATHS:
                    ko = by.get((mode, w, extra, temp))
                    if ko is None:
                        continue
                    same_k = ko["checksum"] == lo["checksum"]
                    content_ok &= same_k
                    ok_k = lo["status"] == "ok" and ko["status"] == "ok" and same_k
                    ratio_k, ratios_k = paired_ratio(every, (mode, w, temp), extra)
                    row |= {extra: pick(ko), f"same_samples_{extra}": same_k,
                            f"ratio_{extra}": ratio_k if ok_k else None,
                            f"ratio_{extra}_reps": ratios_k}
                rows.append(row)
    return rows, content_ok


def pick(r):
    return {k: r[k] for k in ("samples_per_s", "seconds", "io_share", "decode_share",
                              "scan_seconds", "first_batch_seconds", "bytes", "status",
                              "reps")}


def loader_targets(a, rows, content_ok):
    out = []
    for row in rows:
        if row["mode"] != "decode":
            continue
        goal = TARGETS[row["temp"]]
        w = row["workers"]
        out.append(target_row(f"decode, {w} worker{'s' * (w > 1)}, {row['temp']}: "
                              "mount vs loose samples/s",
                              row["ratio"] if content_ok else None, ">=", goal, "x",
                              "" if content_ok else "mount read other samples"))
        if "package" in row:
            goal = PACKAGE_TARGETS[row["temp"]]
            out.append(target_row(f"decode, {w} worker{'s' * (w > 1)}, {row['temp']}: "
                                  "package vs loose samples/s",
                                  row["ratio_package"] if content_ok else None, ">=", goal,
                                  "x", "" if content_ok else "a path read other samples"))
    return out


def required_rate(a, rows):
    """For each mode: the mount's samples/s per worker count (the slower of cold and warm)
    and whether it keeps pace with --required-rate; then which of storage or decode limits."""
    rate = a.required_rate
    cpus = os.cpu_count() or 1
    out = {"rate": rate, "basis": "mount, slower of cold and warm", "modes": {}}
    for mode in MODES:
        per = {}
        for row in rows:
            if row["mode"] == mode and row["status"] == "ok":
                v = row["mount"]["samples_per_s"]
                per[row["workers"]] = min(per.get(row["workers"], v), v)
        m = {"samples_per_s": per, "keeps_pace": None, "workers": None, "verdict": ""}
        if per:
            enough = [w for w in sorted(per) if per[w] >= rate]
            if enough:
                w = enough[0]
                m.update(keeps_pace=True, workers=w,
                         verdict=f"keeps pace: yes, with {w} worker{'s' * (w > 1)} "
                         f"({per[w]:,.0f} samples/s >= {rate:,.0f})")
            else:
                w = max(per, key=lambda k: per[k])
                per_worker = per[w] / w
                need = math.ceil(rate / per_worker) if per_worker > 0 else None
                m.update(keeps_pace=False, workers=need,
                         verdict=f"keeps pace: no: best {per[w]:,.0f} samples/s with {w} "
                         f"worker{'s' * (w > 1)}; ~{need:,} workers would be needed at "
                         f"{per_worker:,.0f} samples/s per worker; this machine has {cpus} "
                         f"core{'s' * (cpus > 1)}")
        out["modes"][mode] = m
    dec, raw = out["modes"]["decode"]["keeps_pace"], out["modes"]["raw"]["keeps_pace"]
    # A mode that did not run (--loader-modes) has no figures: keeps_pace None, "unknown".
    if dec is None or raw is None:
        out["bottleneck"] = "unknown (no cold/warm figures)"
    elif not raw:
        best = {m: max(out["modes"][m]["samples_per_s"].values()) for m in MODES}
        out["bottleneck"] = (f"storage: even the raw I/O path, without decode, is below the "
                             f"rate (best {best['raw']:,.0f} samples/s); decode + resize lowers "
                             f"it to {best['decode']:,.0f}")
    elif not dec:
        out["bottleneck"] = ("decode: the raw I/O path keeps pace, decode + resize does not "
                             "(CPU: more cores or workers, or decode elsewhere)")
    else:
        out["bottleneck"] = "neither: storage and decode both keep pace"
    return out


def fmt_rate(v):
    return "-" if v is None else f"{v:,.0f}"


def fmt_share(v):
    return "-" if v is None else f"{v:.1%}"


def print_loader_report(report, out=sys.stdout):
    p, d, b, env = report["params"], report["dataset"], report["build"], report["environment"]
    w = out.write
    w("\nshardfs bench --loader (torch DataLoader over torchvision ImageFolder)\n")
    w(f"  dataset: {d['samples']:,} JPEGs, {fmt_bytes(d['bytes'])}, {p['classes']} classes, "
      f"seed {p['seed']}{' (cached)' if d.get('cached') else ''}"
      f"{', image sides x%g' % p['image_scale'] if p.get('image_scale', 1.0) != 1.0 else ''}\n")
    per_run = f"{p['samples']:,} samples" if p["samples"] else "one epoch"
    w(f"  loader:  torch {env['torch']}, torchvision {env['torchvision']}, PIL {env['pil']}; "
      f"shuffle=True, batch {p['batch']}, resize {p['size']}, {per_run} per run, workers "
      f"{','.join(map(str, p['workers']))}"
      f"{'; the median of %d runs, interleaved' % p['reps'] if p.get('reps', 1) > 1 else ''}\n")
    w(f"  machine: {env['cpus']} CPUs, kernel {env['kernel']}, "
      f"{'root' if env['root'] else 'NOT root'}\n")
    w(f"  pack:    {b['pack_method']}: {b['pack_seconds']:.2f} s, {b['shards']} shards, "
      f"{fmt_bytes(b['shard_bytes'])}\n")
    for sk in env["skipped"]:
        w(f"  SKIPPED: {sk}\n")
    for n in env["notes"]:
        w(f"  note: {n}\n")
    ki = b.get("kernel_image", {})
    if "image_bytes" in ki:
        build = ki.get("image_build_seconds")
        w(f"  kernel:  shardfs mount --kernel: image {fmt_bytes(ki['image_bytes'])}, "
          f"{ki['image_bytes_per_entry']:.1f} B per entry, built in "
          f"{'-' if build is None else f'{build:.2f} s'}\n")
    same = report["content"] == "ok"
    mounts = "mounts" if "kernel" in p.get("paths", []) else "mount"
    w("  samples read: " + (f"same on the loose tree and the {mounts}\n" if same else
                            f"FAILED: the {mounts} read other samples than the loose tree\n"))
    extras = [e for e in EXTRA_PATHS if any(e in r for r in report["rows"])]
    w(f"\n  {'mode':<7} {'workers':>7} {'temp':<5} {'loose samples/s':>16} "
      f"{'mount samples/s':>16} {'mount/loose':>12} "
      + "".join(f"{e + ' samples/s':>18} {e + '/loose':>14} " for e in extras)
      + f"{'I/O share loose':>16} {'I/O share mount':>16}"
      + "".join(f" {'I/O share ' + e:>18}" for e in extras) + "\n")
    for r in report["rows"]:
        rt = f"{r['ratio']:.2f}x" if r["ratio"] is not None else r["status"]
        kr = ks = ""
        for e in extras:
            k = r.get(e, {})
            rk = r.get(f"ratio_{e}")
            kr += (f"{fmt_rate(k.get('samples_per_s')):>18} "
                   f"{f'{rk:.2f}x' if rk is not None else r['status']:>14} ")
            ks += f" {fmt_share(k.get('io_share')):>18}"
        w(f"  {r['mode']:<7} {r['workers']:>7} {r['temp']:<5} "
          f"{fmt_rate(r['loose']['samples_per_s']):>16} "
          f"{fmt_rate(r['mount']['samples_per_s']):>16} {rt:>12} {kr}"
          f"{fmt_share(r['loose']['io_share']):>16} {fmt_share(r['mount']['io_share']):>16}"
          f"{ks}\n")
    w("  (mount: shardfs mount (FUSE); kernel: shardfs mount --kernel (EROFS); package: "
      "shardfs.torch.ImageFolder\n   reading the index in-process; I/O share: time the workers "
      "spent opening and reading files\n   / workers x wall time; the package reads a file "
      "before its loader runs, so its share is ~0)\n")

    w("\ntargets (loader)\n")
    for t in report["targets"]:
        v = "-" if t["value"] is None else f"{t['value']:.2f}x"
        w(f"  {t['target']:<52} {v:>8}  {t['op']} {t['goal']:g}x  {t['status']}\n")

    req = report.get("required")
    if req:
        w(f"\nrequired rate: {req['rate']:,.0f} samples/s ({req['basis']})\n")
        for mode in MODES:
            m = req["modes"][mode]
            figs = ", ".join(f"{k} worker{'s' * (k > 1)}: {fmt_rate(v)}"
                             for k, v in sorted(m["samples_per_s"].items()))
            w(f"  {MODE_TITLES[mode]}\n    samples/s: {figs or '-'}\n"
              f"    data path {m['verdict'] or 'not measured'}\n")
        w(f"  bottleneck: {req['bottleneck']}\n")
    w("\n")
    out.flush()
