#!/usr/bin/env python3
"""shardfs bench --dirops: cold lookups through two builds of the mount, A against B, interleaved.

Made to measure what libfuse >= 3.17.1 buys (meson's -Dlibfuse=subproject, README.md "libfuse
3.17"): it passes FUSE_PARALLEL_DIROPS to the kernel, which then takes a directory's lock shared
for LOOKUP and READDIR; with libfuse up to 3.16 the lookups in one directory are serialized.

Two generated indexes of --files small files (256 B to 2 KiB of random bytes, `shardfs pack`
of A): "tree", spread over --dirs folders, and "flat", all in one folder. For each rep, each
layout and each build (A then B on even reps, B then A on odd ones): a fresh mount (default
options plus --mount-options), one lstat of every file (the daemon's index blocks and the page
cache warm), `echo 2 > /proc/sys/vm/drop_caches` (the kernel's dentries and inodes dropped),
then --procs processes each lstat their share of the files in a shuffled order (the same order
for A and B within a rep); the figure is the time from their common start to the last one done.
The sizes they saw must add up to the tree's, else the run fails. A probe mount with `-d` first
records, for each build, the INIT reply's flags and whether FUSE_PARALLEL_DIROPS is among them.

Usage (as root: drop_caches; after building both, e.g. build/ and build-fuse317/):
    python3 tools/bench/shardfs_bench.py --dirops --build-dir build --build-dir-b build-fuse317
        [--files 20000] [--dirs 100] [--procs 4] [--reps 5] [--mount-options prefill_dirs=false]
        [--json out.json]
Prints per layout and build the median [min..max] seconds, and B's speedup (A's median over
B's) against the 1.3x the issue asked for. Python 3 standard library only.
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

from bench_args import (add_binary_args, add_json_arg, add_seed_arg, add_workdir_arg,
                        host_facts, resolve_binaries, write_report_json)
from bench_common import MOUNT_TIMEOUT, BenchError, log
from bench_mounts import REG, Mount, kill_group, run_in_scratch

FUSE_PARALLEL_DIROPS = 1 << 18  # fuse_kernel.h: an INIT flag.
TARGET_SPEEDUP = 1.3  # What B must gain on one layout for the 3.17 build to be kept.
LAYOUTS = ("tree", "flat")

# One reader: lstat its list after the parent says go; print the monotonic clock (shared by all
# processes) at the end, the files seen and their sizes' sum.
WORKER = r"""
import os, sys, time
paths = open(sys.argv[1]).read().split("\0")
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.read(1)
total = missing = 0
for p in paths:
    try:
        total += os.lstat(p).st_size
    except FileNotFoundError:
        missing += 1
print(time.monotonic(), len(paths) - missing, total, flush=True)
"""


def parse_dirops_args(argv):
    ap = argparse.ArgumentParser(prog="shardfs_bench.py --dirops",
                                 description="Cold lookups, across a tree and in one folder, "
                                 "through two builds of the mount (A/B interleaved).")
    ap.add_argument("--dirops", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--files", type=int, default=20000, help="files per index (20000)")
    ap.add_argument("--dirs", type=int, default=100, help="folders of the tree layout (100)")
    ap.add_argument("--procs", type=int, default=4, help="processes doing lookups (4)")
    ap.add_argument("--reps", type=int, default=5, help="samples per layout and build (5)")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="tree,flat (both)")
    add_seed_arg(ap)
    add_binary_args(ap)  # A's --build-dir and --shardfs (its shardfs packs); no bench_reader.
    ap.add_argument("--build-dir-b", required=True, help="B's meson build dir")
    ap.add_argument("--shardfs-b", help="B's shardfs binary (BUILD_DIR_B/tools/cli/shardfs)")
    ap.add_argument("--mount-options", default="", help="-o options for both mounts")
    ap.add_argument("--phase-timeout", type=float, default=600.0,
                    help="seconds per timed run (600)")
    add_workdir_arg(ap, "default /var/tmp/shardfs-bench-dirops-<files>-<dirs>-<seed>")
    add_json_arg(ap)
    a = ap.parse_args(argv)
    a.layouts = [x for x in a.layouts.split(",") if x]
    if any(x not in LAYOUTS for x in a.layouts) or not a.layouts:
        ap.error(f"--layouts: a comma-separated subset of {','.join(LAYOUTS)}")
    if a.files < 1 or a.dirs < 1 or a.procs < 1 or a.reps < 1:
        ap.error("--files, --dirs, --procs and --reps must be positive")
    resolve_binaries(a)
    a.shardfs_b = a.shardfs_b or os.path.join(a.build_dir_b, "tools", "cli", "shardfs")
    for exe in (a.shardfs, a.shardfs_b):
        if not os.access(exe, os.X_OK):
            ap.error(f"{exe} is not an executable; build first or pass "
                     "--build-dir(-b)/--shardfs(-b)")
    a.workdir = a.workdir or f"/var/tmp/shardfs-bench-dirops-{a.files}-{a.dirs}-{a.seed}"
    return a


def make_layout(a, layout):
    """The layout's tree and index, cached in the work dir: (index path, sorted relative paths,
    sum of sizes)."""
    base = os.path.join(a.workdir, f"data-{layout}")
    src, pack, done = (os.path.join(base, x) for x in ("src", "pack", "done.json"))
    if not os.path.exists(done):
        log(f"{layout}: generating {a.files} files in {src}")
        rnd = random.Random(f"{a.seed}-{layout}")
        ndirs = a.dirs if layout == "tree" else 1
        total = 0
        for i in range(a.files):
            d = os.path.join(src, f"d{i % ndirs:04d}")
            os.makedirs(d, exist_ok=True)
            data = rnd.randbytes(rnd.randint(256, 2048))
            with open(os.path.join(d, f"f{i:07d}.bin"), "wb") as f:
                f.write(data)
            total += len(data)
        p = subprocess.run([a.shardfs, "pack", "-q", "--force", src, "--out", pack],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            raise BenchError(f"shardfs pack {src}: exit {p.returncode}: {p.stdout[-400:]}")
        with open(done, "w") as f:
            json.dump({"bytes": total}, f)
    rels = sorted(os.path.relpath(os.path.join(d, n), src)
                  for d, _, names in os.walk(src) for n in names)
    with open(done) as f:
        total = json.load(f)["bytes"]
    return os.path.join(pack, "index"), rels, total


def probe_init(shardfs, index, mp, log_path):
    """Mounts with -d and returns the INIT reply's (protocol minor, flags) from libfuse's debug
    log."""
    m = Mount("probe", mp, [shardfs, "mount", "-d", index, mp], "fuse3", log_path)
    m.mount(MOUNT_TIMEOUT)
    m.unmount()
    with open(log_path, errors="replace") as f:
        text = f.read()
    # libfuse logs the kernel's INIT ("INIT: 7.x", "flags=") and then its reply, indented.
    reply = re.findall(r"fuse:\s{2,}INIT: 7\.(\d+)\s*\n.*?fuse:\s{2,}flags=0x([0-9a-f]+)", text)
    if not reply:
        raise BenchError(f"no INIT reply in the debug log {log_path}")
    return int(reply[-1][0]), int(reply[-1][1], 16)


def drop_dentries():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def cold_lookups(a, shardfs, index, mp, rels, total, order, scratch, log_path):
    """One sample: a fresh mount, a warm pass, dentries dropped, then a.procs readers over
    `order`; returns the seconds from their start to the last one done."""
    opts = ["-o", a.mount_options] if a.mount_options else []
    m = Mount("shardfs", mp, [shardfs, "mount", "-f"] + opts + [index, mp], "fuse3", log_path)
    m.mount(MOUNT_TIMEOUT)
    procs = []
    try:
        for r in rels:  # Warm: the daemon's blocks; the kernel's dentries are dropped next.
            os.lstat(os.path.join(mp, r))
        for i in range(a.procs):
            lst = os.path.join(scratch, f"share-{i}")
            with open(lst, "w") as f:
                f.write("\0".join(os.path.join(mp, r) for r in order[i::a.procs]))
            p = subprocess.Popen([sys.executable, "-c", WORKER, lst], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
            REG.procs.add(p)
            procs.append(p)
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise BenchError("a lookup process did not start")
        drop_dentries()
        start = time.monotonic()
        for p in procs:
            p.stdin.close()  # Go.
        ends, seen, size = [], 0, 0
        deadline = start + a.phase_timeout
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
            end, n, s = p.stdout.read().split()
            ends.append(float(end))
            seen, size = seen + int(n), size + int(s)
            REG.procs.discard(p)
        if seen != len(rels) or size != total:
            raise BenchError(f"{shardfs} on {index}: the readers saw {seen} files of {size} "
                             f"bytes, the tree has {len(rels)} of {total}")
        return max(ends) - start
    except subprocess.TimeoutExpired:
        raise BenchError(f"lookups through {shardfs} took over {a.phase_timeout:.0f} s")
    finally:
        for p in procs:
            kill_group(p)
        m.unmount()


def summary(samples):
    return {"samples": samples, "median": statistics.median(samples), "min": min(samples),
            "max": max(samples)}


def run_dirops(a, scratch):
    if os.geteuid() != 0:
        raise BenchError("--dirops needs root (drop_caches between warm pass and lookups)")
    builds = {"A": a.shardfs, "B": a.shardfs_b}
    data = {x: make_layout(a, x) for x in a.layouts}
    mp = os.path.join(scratch, "mnt")
    os.makedirs(mp)
    report = {"schema": "shardfs-bench-dirops/1",
              "params": {"files": a.files, "dirs": a.dirs, "procs": a.procs, "reps": a.reps,
                         "seed": a.seed, "layouts": a.layouts, "mount_options": a.mount_options,
                         "target_speedup": TARGET_SPEEDUP},
              "environment": host_facts(a) | {"shardfs_b": a.shardfs_b},
              "builds": {}, "layouts": {}}
    for name, exe in builds.items():
        minor, flags = probe_init(exe, data[a.layouts[0]][0], mp,
                                  os.path.join(scratch, f"probe-{name}.log"))
        parallel = bool(flags & FUSE_PARALLEL_DIROPS)
        report["builds"][name] = {"shardfs": exe, "init_minor": minor, "init_flags": f"{flags:#x}",
                                  "parallel_dirops": parallel}
        log(f"build {name}: {exe}: INIT reply 7.{minor} flags {flags:#010x}: "
            f"FUSE_PARALLEL_DIROPS {'sent' if parallel else 'not sent'}")
    samples = {x: {"A": [], "B": []} for x in a.layouts}
    for rep in range(a.reps):
        rnd = random.Random(f"{a.seed}-order-{rep}")
        for layout in a.layouts:
            index, rels, total = data[layout]
            order = rels[:]
            rnd.shuffle(order)
            for name in ("A", "B") if rep % 2 == 0 else ("B", "A"):
                secs = cold_lookups(a, builds[name], index, mp, rels, total, order, scratch,
                                    os.path.join(scratch, f"mount-{name}.log"))
                samples[layout][name].append(secs)
                log(f"rep {rep + 1}/{a.reps} {layout} {name}: {secs:.3f} s")
    for layout in a.layouts:
        fig = {n: summary(samples[layout][n]) for n in ("A", "B")}
        fig["speedup_b"] = fig["A"]["median"] / fig["B"]["median"]
        report["layouts"][layout] = fig
    report["environment"]["loadavg_end"] = os.getloadavg()
    write_report_json(a.json_out, report)
    print_dirops_report(report)
    return 0


def print_dirops_report(r):
    p = r["params"]
    print(f"cold lookups, {p['files']} files, {p['procs']} processes, {p['reps']} reps "
          f"(tree: {p['dirs']} folders; flat: one folder); mount options: "
          f"{p['mount_options'] or 'defaults'}; kernel {r['environment']['kernel']}")
    for n, b in r["builds"].items():
        print(f"  {n}: {b['shardfs']}: INIT 7.{b['init_minor']} flags {b['init_flags']}, "
              f"FUSE_PARALLEL_DIROPS {'sent' if b['parallel_dirops'] else 'not sent'}")
    print(f"  {'layout':<6} {'A median [min..max] s':<28} {'B median [min..max] s':<28} B speedup")
    for layout, fig in r["layouts"].items():
        cells = [f"{fig[n]['median']:.3f} [{fig[n]['min']:.3f}..{fig[n]['max']:.3f}]"
                 for n in ("A", "B")]
        met = "met" if fig["speedup_b"] >= p["target_speedup"] else "not met"
        print(f"  {layout:<6} {cells[0]:<28} {cells[1]:<28} {fig['speedup_b']:.2f}x "
              f"(target {p['target_speedup']}x: {met})")


def dirops_main(argv):
    a = parse_dirops_args(argv)
    os.makedirs(a.workdir, exist_ok=True)
    return run_in_scratch(a.workdir, "run-", lambda scratch: run_dirops(a, scratch))


if __name__ == "__main__":
    sys.exit(dirops_main(sys.argv[1:]))
