#!/usr/bin/env python3
"""shardfs benchmark: shardfs against the loose tree and its peers, same data, same run.

Usage (from the source tree, after `ninja -C build`):

    sudo python3 tools/bench/shardfs_bench.py --build-dir build [--files 100000] [--reps 3]
        [--systems loose,squashfuse,kernel,archivemount,raw,shardfs] [--kernel]
        [--json out.json] [--plot out.png]

What it does (see tools/bench/README.md for the full description):
  1. Generates a deterministic ImageNet-like tree train/<class>/<class>_<n>.jpg of incompressible
     bytes (log-normal sizes around --median-kib) with a JSON sidecar for a fraction of samples, and
     caches it in --workdir (default /var/tmp/shardfs-bench-<files>-<seed>) keyed by its
     parameters, so reruns reuse it. Also cached there: the squashfs image and the single tar.
  2. Packs it into ~256 MiB tar shards and indexes them (`shardfs pack` when the binary has it,
     else `tar` + `shardfs index build`), timing both.
  3. For each system measures mount time, a readdir walk, an lstat walk, a read of every file in
     tree order with one reader and in a fixed shuffled order with 4 readers, each warm and cold
     (caches dropped and a fresh mount before each cold run), after checking the content: the
     reader's checksum over all files must equal the loose tree's, else the system is FAILED.
  4. Prints a table with median [min..max], ratios against the loose tree of the same run and
     the targets (met / not met); --json writes everything, --plot draws the ratios.

--kernel adds shardfs-kernel: `shardfs mount --kernel` of the same index (an EROFS image of the
view served by the kernel's driver, no daemon) with every figure shardfs gets, plus
the image's build time (mounts with an empty image cache) and size.

Cleanup: every mount made is unmounted, also on failure, Ctrl-C or SIGTERM; only processes the
script started are signalled. Needs root for drop_caches (cold runs) and loop mounts (kernel
squashfs); without root those parts are skipped and the report says so.

Disk: the tree, the shards, the squashfs image and the single tar each take about the dataset's
size (100,000 files ~ 1.3 GB each; 1,000,000 files ~ 13 GB each).

Python 3 standard library only. The parts, beside this file: bench_dataset (the generated tree),
bench_images (shards and index, squashfs image, single tar), bench_mounts (processes and mounts,
cleanup), bench_workloads (reader runs, their checks, figures), bench_systems (each system checked
then measured), bench_kernel (shardfs-kernel's image cache), bench_report (table and targets),
bench_common (constants, log, errors), bench_args (the options every mode shares, the binaries,
the report's JSON); --views is bench_views, --remote (shards over HTTP) bench_remote, --loader
(the real loader) bench_loader, --cluster (four rank mounts over one object store)
bench_cluster, --netfs (shards, index and loose files on sshfs with a round-trip delay)
bench_netfs, --scale bench_scale, --archives bench_archives, --python bench_python,
--python-peers (the package against webdataset's own readers) bench_peers, --dirops
(cold lookups through two builds, e.g. libfuse 3.14 against 3.17) bench_dirops, --job (a
training job as a whole: ranks x workers x epochs on network storage and local disk) bench_job. bench_plot
(--plot) runs under --plot-python, which has matplotlib.
"""

import argparse
import os
import shutil
import sys

from bench_args import (add_binary_args, add_json_arg, add_phase_timeout_arg, add_seed_arg,
                        add_workdir_arg, binaries_missing, host_facts, resolve_binaries,
                        write_report_json)
from bench_common import ALL_SYSTEMS, DEFAULT_SYSTEMS, fmt_bytes, log, parse_size, tree_bytes
from bench_dataset import dataset_key, generate_dataset, tree_file_list
from bench_images import build_single_tar, build_squashfs, pack_or_reuse
from bench_kernel import KernelImageCache
import bench_cluster
import bench_loader
import bench_netfs
from bench_mounts import Mount, run_in_scratch
import bench_plot
from bench_remote import run_remote
from bench_report import compute_targets, print_report
from bench_archives import archives_main
from bench_dirops import dirops_main
from bench_peers import main_peers
from bench_python import main_python
from bench_fuse import main_fuse
from bench_job import main_job
from bench_scale import scale_main
from bench_systems import Bench
from bench_views import run_views
from bench_workloads import SystemRun, can_drop_caches


def add_dataset_args(ap):
    """The generated tree: its size, shape and cache."""
    ap.add_argument("--files", type=int, help="samples (default 100000; 1000000 with --views)")
    ap.add_argument("--classes", type=int, default=100, help="class directories (default 100)")
    add_seed_arg(ap, "PRNG seed (default 1)")
    ap.add_argument("--median-kib", type=float, help="median file size (12; 1 with --views)")
    ap.add_argument("--sigma", type=float, default=0.6, help="log-normal sigma of sizes (0.6)")
    ap.add_argument("--json-fraction", type=float, default=0.1,
                    help="fraction of samples with a JSON sidecar (0.1)")
    add_workdir_arg(ap, "cache and scratch dir (default /var/tmp/shardfs-bench-<files>-<seed>)")


def add_run_args(ap):
    """The main run: systems, repetitions, shards, budgets, binaries and outputs."""
    ap.add_argument("--reps", type=int, default=3, help="samples of every figure (default 3)")
    ap.add_argument("--procs", type=int, default=4, help="readers for the shuffled read (4)")
    ap.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                    help=f"comma-separated subset of {','.join(ALL_SYSTEMS)} (default: all but "
                    "shardfs-kernel); the loose tree is always measured (it is the reference)")
    ap.add_argument("--kernel", action="store_true",
                    help="add shardfs-kernel: `shardfs mount --kernel` of the same index (EROFS, "
                    "no daemon; needs root); with --loader, a third path beside loose and mount")
    ap.add_argument("--plot", metavar="FILE.png",
                    help="draw every figure's ratio to the loose tree, systems side by side "
                    "(matplotlib, under --plot-python)")
    ap.add_argument("--plot-python", default="/usr/bin/python3",
                    help="the interpreter with matplotlib for --plot (/usr/bin/python3)")
    ap.add_argument("--shard-size", default="256MiB", help="target shard size (256MiB)")
    ap.add_argument("--pack-method", choices=["auto", "pack", "tar"], default="auto",
                    help="auto: `shardfs pack` when it exists, else tar + index build")
    ap.add_argument("--reuse-pack", action="store_true",
                    help="reuse the shards and index of an earlier run (pack time is then the "
                    "recorded one)")
    ap.add_argument("--mount-options", default="", help="-o options for `shardfs mount`")
    ap.add_argument("--archivemount-budget", type=float, default=60.0,
                    help="seconds per archivemount phase before it is reported as timeout (60)")
    add_phase_timeout_arg(ap, "seconds per phase for the other systems (3600)")
    add_binary_args(ap)
    add_json_arg(ap)
    ap.add_argument("--keep", action="store_true",
                    help="keep this run's scratch (mountpoints, lists, logs) in the work dir")
    ap.add_argument("--clean", action="store_true",
                    help="delete the whole work dir at the end, cached dataset included")


def add_mode_args(ap):
    """The other modes, each run instead of the main one."""
    ap.add_argument("--views", action="store_true",
                    help="measure named views and versions instead (bench_views.py): "
                    "small files straight into tar shards, default 1000000 of them")
    ap.add_argument("--view-paths", type=int, default=0,
                    help="--views: paths in the exclude list and the rename map (files/10)")
    ap.add_argument("--versions", type=int, default=1000,
                    help="--views: versions added before mounting again (1000)")
    ap.add_argument("--mount-reps", type=int, default=9,
                    help="--views: warm mounts per mount-time figure (9)")
    ap.add_argument("--remote", action="store_true",
                    help="measure shards read over HTTP through a bounded cache instead "
                    "(bench_remote.py): nginx on loopback behind a proxy adding --latency")
    ap.add_argument("--latency", type=float, default=0.005,
                    help="--remote: seconds the proxy adds per request (0.005)")
    ap.add_argument("--chunk-size", default="4M", help="--remote: -o chunk_size of the mounts (4M)")
    ap.add_argument("--fetch-threads", type=int, default=0,
                    help="--remote: -o fetch_threads of the mounts (0: the mount's default)")
    ap.add_argument("--scale", metavar="LIST",
                    help="measure growth with the file count instead (bench_scale.py, its own "
                    "options: --scale 1 --help)")
    ap.add_argument("--python", action="store_true",
                    help="the Python package (Index.read, shardfs.torch.ImageFolder) against the "
                    "loose tree and the mounts instead (bench_python.py, its own options: "
                    "--python --help)")
    ap.add_argument("--python-peers", action="store_true",
                    help="the Python package's SampleDataset and SampleStream against "
                    "webdataset's own readers (wids' ShardListDataset, the WebDataset "
                    "pipeline) on the same tar shards instead (bench_peers.py, its own "
                    "options: --python-peers --help)")
    ap.add_argument("--fuse", action="store_true",
                    help="what a file costs through the FUSE mount (Python open() warm, dentries "
                    "cold, requests per file, threads, index reads) beside the loose tree and "
                    "mount --kernel instead (bench_fuse.py, its own options: --fuse --help)")
    ap.add_argument("--archives", metavar="KINDS", nargs="?", const="zip,gz",
                    help="measure zip and .tar.gz archives against fuse-zip, archivemount and "
                    "indexed_gzip instead (bench_archives.py, its own options: "
                    "--archives --help)")
    bench_loader.add_args(ap)  # --loader and its options.
    bench_cluster.add_args(ap)  # --cluster and its options.
    bench_netfs.add_args(ap)  # --netfs and its options.
    ap.add_argument("--hold", type=float, default=0.0, help=argparse.SUPPRESS)


def finish_args(a, ap):
    """Checks the options against each other and fills in the defaults that depend on the
    mode; ap.error (exit 2) on a bad combination."""
    if a.loader:
        bench_loader.finish_args(a, ap)
    if a.cluster:
        bench_cluster.finish_args(a, ap)
    if a.netfs:
        bench_netfs.finish_args(a, ap)
    if a.views and a.remote:
        ap.error("--views and --remote are separate runs")
    if a.files is None:
        a.files = 1_000_000 if a.views else 100_000
    if a.median_kib is None:
        a.median_kib = 1.0 if a.views else 12.0
    resolve_binaries(a)
    a.systems = [x.strip() for x in a.systems.split(",") if x.strip()]
    if a.kernel and "shardfs-kernel" not in a.systems:
        a.systems.append("shardfs-kernel")
    bad = [x for x in a.systems if x not in ALL_SYSTEMS]
    if bad:
        ap.error(f"unknown system(s): {','.join(bad)}")
    if "loose" not in a.systems:
        a.systems.insert(0, "loose")
    if a.files < 1 or a.classes < 1 or a.reps < 1 or a.procs < 1:
        ap.error("--files, --classes, --reps and --procs must be positive")
    parse_size(a.shard_size)
    if a.plot:
        if a.views or a.remote or a.cluster:
            ap.error("--plot draws the main run, --loader and --netfs only")
        why = bench_plot.unavailable(a.plot_python)
        if why:
            ap.error(f"--plot: {why}")
    a.workdir = a.workdir or (f"/var/tmp/shardfs-bench-views-{a.files}-{a.seed}" if a.views
                              else f"/var/tmp/shardfs-bench-{a.files}-{a.seed}")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="shardfs_bench.py",
        description="Benchmark shardfs against the loose tree, squashfuse, kernel squashfs, "
        "archivemount and raw shard reads on a generated ImageNet-like dataset.",
        epilog="Needs root for cold runs (drop_caches) and kernel squashfs (loop mount). "
        "See tools/bench/README.md.")
    add_dataset_args(ap)
    add_run_args(ap)
    add_mode_args(ap)
    a = ap.parse_args(argv)
    finish_args(a, ap)
    return a


def main(argv):
    if any(x == "--scale" or x.startswith("--scale=") for x in argv):
        return scale_main(argv)  # Its own options and cleanup.
    if any(x == "--archives" or x.startswith("--archives=") for x in argv):
        return archives_main(argv)  # Its own options and cleanup (bench_archives.py).
    if "--python-peers" in argv:
        return main_peers(argv)  # Its own options and cleanup (bench_peers.py).
    if "--python" in argv:
        return main_python(argv)  # Its own options and cleanup (bench_python.py).
    if "--fuse" in argv:
        return main_fuse(argv)  # Its own options and cleanup (bench_fuse.py).
    if "--dirops" in argv:
        return dirops_main(argv)  # Its own options and cleanup (bench_dirops.py).
    if "--job" in argv:
        return main_job(argv)  # Its own options and cleanup (bench_job.py).
    a = parse_args(argv)
    missing = binaries_missing(a, "shardfs_bench")
    if missing:
        return missing

    def body(scratch):
        if a.views:
            a.loadavg_start = os.getloadavg()
            return run_views(a, scratch)
        if a.remote:
            return run_remote(a, scratch)
        if a.loader:
            return bench_loader.run_loader(a, scratch)
        if a.cluster:
            return bench_cluster.run_cluster(a, scratch)
        if a.netfs:
            return bench_netfs.run_netfs(a, scratch)
        return run(a, scratch)

    return run_in_scratch(a.workdir, "run-", body, keep=a.keep,
                          remove_instead=a.workdir if a.clean else None)


class Wanted:
    """The systems this run measures, and those that cannot run here with the reason: a peer
    that cannot run is reported, not silently dropped."""

    def __init__(self, systems):
        self.systems = list(systems)
        self.skipped = []  # "system: why" lines for the report.
        self.reasons = {}  # system -> why

    def __contains__(self, name):
        return name in self.systems

    def skip(self, system, why):
        self.skipped.append(f"{system}: {why}")
        self.reasons[system] = why
        self.systems.remove(system)

    def need(self, tool_names, system):
        """The first of tool_names on PATH, or None after skipping system."""
        for t in tool_names:
            if shutil.which(t):
                return t
        self.skip(system, f"{' or '.join(tool_names)} not installed")
        return None


def check_systems(a, is_root):
    """Which of a.systems can run here; returns (Wanted, the squashfuse binary or None)."""
    wanted = Wanted(a.systems)
    squashfuse_bin = wanted.need(["squashfuse_ll", "squashfuse"], "squashfuse") \
        if "squashfuse" in wanted else None
    if "archivemount" in wanted:
        wanted.need(["archivemount"], "archivemount")
    if "kernel" in wanted and not is_root:
        wanted.skip("kernel", "squashfs loop mount needs root")
    if "shardfs-kernel" in wanted:
        why = kernel_mount_unavailable(is_root)
        if why:
            wanted.skip("shardfs-kernel", why)
    if ("squashfuse" in wanted or "kernel" in wanted) and not shutil.which("mksquashfs"):
        for sname in ("squashfuse", "kernel"):
            if sname in wanted:
                wanted.skip(sname, "mksquashfs not installed")
    return wanted, squashfuse_bin


class Inputs:
    """What the systems read, built (or taken from the cache) once: the shards and their index,
    the squashfs image and the single tar, each None when no wanted system needs it; `build`
    holds their sizes and times for the report."""

    def __init__(self, a, ddir, tree, files, scratch, wanted):
        self.build = {}
        self.pack = self.image = self.whole_tar = None
        build_log = os.path.join(scratch, "build.log")
        if {"shardfs", "shardfs-kernel", "raw"} & set(wanted.systems):
            self.pack_shards(a, ddir, tree, files, scratch)
        if "squashfuse" in wanted or "kernel" in wanted:
            log("squashfs: building image (cached after the first run)")
            self.image, im = build_squashfs(tree, ddir, build_log)
            self.build.update({"squashfs_comp": im["comp"], "squashfs_seconds": im["seconds"],
                               "squashfs_bytes": im["bytes"], "squashfs_cached": im["cached"]})
        if "archivemount" in wanted:
            log("archivemount: building the single tar (cached after the first run)")
            self.whole_tar, tm = build_single_tar(tree, ddir, build_log)
            self.build.update({"tar_seconds": tm["seconds"], "tar_bytes": tm["bytes"]})

    def pack_shards(self, a, ddir, tree, files, scratch):
        _, pack = pack_or_reuse(a, ddir, tree, files, scratch)
        idx_apparent, idx_alloc = tree_bytes(pack["index"])
        self.build.update({"pack_method": pack["method"], "pack_seconds": pack["pack_seconds"],
                           "index_build_seconds": pack["index_build_seconds"],
                           "pack_cached": pack["cached"], "index_bytes": idx_apparent,
                           "index_disk_bytes": idx_alloc, "shards": len(pack["shards"]),
                           "shard_bytes": sum(os.path.getsize(p) for p in pack["shards"])})
        log(f"pack: {pack['method']}: {pack['pack_seconds']:.2f} s, index "
            f"{fmt_bytes(idx_apparent)}")
        self.pack = pack


def measure_one(a, bench, scratch, name, inputs, squashfuse_bin):
    """Checks then measures one mounted or raw system (not the loose tree)."""
    mnt_root = os.path.join(scratch, "mnt")

    def maker(argv_fn, kind):
        mp = os.path.join(mnt_root, name)
        os.makedirs(mp, exist_ok=True)
        log_path = os.path.join(scratch, f"{name}.log")
        return lambda: Mount(name, mp, argv_fn(mp), kind, log_path)

    pack, image = inputs.pack, inputs.image
    if name == "raw":
        return bench.run_raw(pack["shards"])
    if name == "squashfuse":
        return bench.run_mounted(
            name, squashfuse_bin, maker(lambda mp: [squashfuse_bin, "-f", image, mp], "fuse3"),
            a.phase_timeout)
    if name == "kernel":
        return bench.run_mounted(
            name, "kernel squashfs",
            maker(lambda mp: ["mount", "-t", "squashfs", "-o", "loop,ro", image, mp], "kernel"),
            a.phase_timeout)
    if name == "archivemount":
        return bench.run_mounted(
            name, "archivemount",
            maker(lambda mp: ["archivemount", "-f", "-o", "readonly", inputs.whole_tar, mp],
                  "fuse2"),
            a.archivemount_budget)
    if name == "shardfs":
        opts = ["-o", a.mount_options] if a.mount_options else []
        return bench.run_mounted(
            name, "shardfs",
            maker(lambda mp: [a.shardfs, "mount", "-f"] + opts + [pack["index"], mp], "fuse3"),
            a.phase_timeout)
    # shardfs-kernel: its own image cache in the scratch dir, emptied to time image builds.
    kimage = KernelImageCache(os.path.join(scratch, "kernel-image-cache"),
                              os.path.join(scratch, f"{name}.log"))
    return bench.run_mounted(
        name, "shardfs mount --kernel",
        maker(lambda mp: kimage.mount_argv(a.shardfs, pack["index"], mp, a.mount_options),
              "kernel"),
        a.phase_timeout, image=kimage, backing=pack["shards"])


def measure_systems(a, bench, scratch, wanted, inputs, squashfuse_bin):
    """The loose tree first (the reference), then every other system in ALL_SYSTEMS order;
    a skipped one gets a SystemRun saying why."""
    os.makedirs(os.path.join(scratch, "mnt"))
    systems = {"loose": bench.run_loose()}
    for name in ALL_SYSTEMS[1:]:
        if name in wanted.reasons:
            systems[name] = SystemRun(name, name)
            systems[name].status, systems[name].reason = "skipped", wanted.reasons[name]
        elif name in wanted:
            systems[name] = measure_one(a, bench, scratch, name, inputs, squashfuse_bin)
    if "squashfuse" in systems:
        systems["squashfuse"].info["binary"] = squashfuse_bin
    if "kernel" in systems and inputs.build.get("squashfs_comp"):
        systems["kernel"].info["comp"] = inputs.build["squashfs_comp"]
    return systems


def main_report(a, meta, tree, bench, systems, build, environment):
    """The main run's JSON report (schema shardfs-bench/1), targets included."""
    report = {
        "schema": "shardfs-bench/1",
        "params": {"files": a.files, "classes": a.classes, "seed": a.seed,
                   "median_kib": a.median_kib, "sigma": a.sigma,
                   "json_fraction": a.json_fraction, "reps": a.reps, "procs": a.procs,
                   "shard_size": a.shard_size, "systems": a.systems,
                   "archivemount_budget": a.archivemount_budget,
                   "mount_options": a.mount_options, "workdir": a.workdir},
        "environment": environment,
        "dataset": {k: meta[k] for k in ("samples", "sidecars", "files", "dirs", "bytes")}
        | {"cached": meta.get("cached", False), "path": tree},
        "build": build,
        "reference": bench.reference,
        "systems": {n: s.to_json(systems["loose"]) for n, s in systems.items()},
    }
    report["targets"] = compute_targets(systems)
    return report


def run(a, scratch):
    """The main run: every wanted system against the loose tree; 1 if any system erred."""
    is_root = os.geteuid() == 0
    wanted, squashfuse_bin = check_systems(a, is_root)
    skipped, notes = wanted.skipped, []
    can_cold, why = can_drop_caches()
    if not can_cold:
        skipped.insert(0, f"cold runs (all systems): {why}")
    key, params = dataset_key(a)
    ddir = os.path.join(a.workdir, f"dataset-{key}")
    meta = generate_dataset(a, ddir)
    tree = os.path.join(ddir, "tree")
    files = tree_file_list(tree)
    inputs = Inputs(a, ddir, tree, files, scratch, wanted)
    bench = Bench(a, ddir, scratch, meta, files, can_cold)
    systems = measure_systems(a, bench, scratch, wanted, inputs, squashfuse_bin)

    if os.cpu_count() and os.cpu_count() <= 2:
        notes.append("2 CPUs or fewer: 4-reader figures are CPU-bound here")
    if bench.foreign_drops:
        notes.append(f"{bench.foreign_drops} drop_caches by other processes during warm "
                     "samples (each such sample was taken again, up to "
                     f"{bench.WARM_RETRIES} times)")
    environment = host_facts(a) | {"cold_runs": can_cold, "skipped": skipped, "notes": notes,
                                   "foreign_drops": bench.foreign_drops,
                                   "loadavg_end": os.getloadavg()}
    report = main_report(a, meta, tree, bench, systems, inputs.build, environment)
    write_report_json(a.json_out, report)
    print_report(report, systems)
    if a.plot:
        bench_plot.plot(a, report, scratch)
    bad = [n for n, s in systems.items() if s.status == "error"]
    if bad:
        log(f"errors in: {', '.join(bad)}")
        return 1
    return 0


def kernel_mount_unavailable(is_root):
    """Why `shardfs mount --kernel` cannot run here, or None (the mount says more if it fails)."""
    if not is_root:
        return "shardfs mount --kernel needs root (CAP_SYS_ADMIN)"
    try:
        with open("/proc/filesystems") as f:
            if not any(line.split()[-1:] == ["erofs"] for line in f):
                return "no erofs in /proc/filesystems (modprobe erofs?)"
    except OSError as e:
        return f"/proc/filesystems: {e}"
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
