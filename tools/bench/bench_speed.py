#!/usr/bin/env python3
"""The speed table: every door's row against loose files, for this build and, with
--before-build-dir, for an earlier build beside it in the same run.

Usage (from the source tree, as root, after `ninja -C build`):

    sudo python3 tools/bench/bench_speed.py --build-dir build [--before-build-dir OLD/build]
        [--rows netfs,pack,python,loader,fuse,tree] [--rounds N] [--small] [--json speed.json]

Each row is one run of an existing mode of shardfs_bench.py (see tools/bench/README.md), which
measures the loose tree beside shardfs in that run; a row's figure is that run's ratio (or its
milliseconds). With --before-build-dir every mode runs twice back to back, the earlier build
first, each with its own binary and Python package, so the before and after of a row share the
machine, the data and the minutes; --rounds N repeats that N times, alternating, and a cell
gives the median and every run's figure (the loader's and --fuse's rows move between runs of
one build by more than most changes). Modes and their sizes:

  netfs   --netfs at 1 ms: default mount, shuffled ImageFolder (2 workers), 10,000 samples of
          40,000 JPEGs, cold and warm, against loose files on local disk
  pack    --netfs --netfs-only pack at 1 ms: pack of 40,000 files from sshfs against tar -cf
  python  --python --no-loader: the Index.read loop over 20,000 shuffled files, warm
  loader  --loader: shuffled ImageFolder (2 workers, decode), 5,000 of 20,000 JPEGs, 3 reps,
          the package and the mount, cold and warm
  fuse    --fuse: 20,000 files of 4-16 KiB, open().read() warm (default, with fastopen,
          buffering=0), FUSE and mount --kernel
  tree    the main bench at 100,000 files, loose and shardfs: tree-order read warm, own cold
          against own warm, a cold mount

--small runs each mode at the size its integration test uses (seconds, not a measurement).
Python 3 standard library only; the modes run under --python (default /usr/bin/python3,
where the package and torch are built).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_report import target_row  # noqa: E402

BENCH = os.path.join(HERE, "shardfs_bench.py")

# name -> (full-size arguments, --small arguments)
MODES = {
    "netfs": (["--netfs", "--netfs-rtts", "1", "--netfs-samples", "10000",
               "--netfs-count-samples", "200", "--netfs-pack-rtt", "0"],
              ["--netfs", "--files", "240", "--classes", "4", "--netfs-rtts", "1",
               "--netfs-samples", "120", "--netfs-count-samples", "40", "--netfs-pack-rtt", "0"]),
    "pack": (["--netfs", "--netfs-rtts", "1", "--netfs-only", "pack"],
             ["--netfs", "--files", "120", "--classes", "4", "--netfs-rtts", "1",
              "--netfs-only", "pack"]),
    "python": (["--python", "--files", "20000", "--no-loader", "--no-kernel"],
               ["--python", "--files", "300", "--reps", "1", "--no-loader", "--no-kernel"]),
    "loader": (["--loader", "--files", "20000", "--loader-samples", "5000", "--loader-reps", "3",
                "--loader-modes", "decode"],
               ["--loader", "--files", "200", "--classes", "4", "--loader-samples", "64",
                "--loader-reps", "1", "--loader-modes", "decode", "--shard-size", "1MiB"]),
    "fuse": (["--fuse", "--files", "20000", "--reps", "3"],
             ["--fuse", "--files", "300", "--dirs", "5", "--shards", "2", "--reps", "1"]),
    "tree": (["--files", "100000", "--systems", "loose,shardfs", "--reps", "3"],
             ["--files", "400", "--classes", "4", "--systems", "loose,shardfs", "--reps", "1",
              "--shard-size", "1MiB"]),
}


def target_value(report, prefix):
    """The value of the report's first target whose name starts with `prefix`."""
    for t in report.get("targets") or []:
        if t["target"].startswith(prefix):
            return t["value"]
    return None


def over(num, den):
    return num / den if num is not None and den else None


def median(rows, name):
    return (rows.get(name) or {}).get("median")


def fuse_rows(rep):
    """bench_fuse's warm rows: each system's files/s over the loose tree's default open()."""
    s = rep.get("systems", {})
    lo = s.get("loose", {})
    out = []
    for system, label in (("fuse", "FUSE"), ("kernel", "kernel path")):
        sy = s.get(system)
        if not sy:
            continue
        out.append((f"{label}: open().read() warm",
                    over(median(sy, "default"), median(lo, "default")), ">=",
                    0.5 if system == "fuse" else 1.0, "x"))
        if system == "fuse":
            out.append(("FUSE: open().read() with shardfs.fastopen, warm",
                        over(median(sy, "fastopen"), median(lo, "default")), ">=", 0.5, "x"))
            out.append(("FUSE: open(buffering=0).read() warm",
                        over(median(sy, "unbuffered"), median(lo, "unbuffered")), ">=", 0.95,
                        "x"))
    return out


def loader_rows(rep):
    out = []
    for temp, goals in (("cold", (1.0, 1.5)), ("warm", (0.9, 1.1))):
        for path, goal in (("mount", goals[0]), ("package", goals[1])):
            label = "FUSE" if path == "mount" else "Python package"
            out.append((f"{label}: shuffled ImageFolder loader, {temp}",
                        target_value(rep, f"decode, 2 workers, {temp}: {path} vs loose"), ">=",
                        goal, "x"))
    return out


def python_rows(rep):
    read = rep.get("read", {})
    return [("Python package: Index.read loop, shuffled files, warm",
             over(median(read, "shardfs.Index"), median(read, "loose")), ">=", 2.0, "x")]


def netfs_rows(rep):
    return [(f"network FS: default mount, shuffled ImageFolder, {temp}, vs local loose",
             target_value(rep, f"{temp}: shardfs vs loose on local disk"), ">=", goal, "x")
            for temp, goal in (("cold", 1.0), ("warm", 0.95))]


def pack_rows(rep):
    return [("network FS: pack from sshfs vs tar -cf there, files/s",
             target_value(rep, "pack from sshfs vs tar"), ">=", 8.0, "x")]


def tree_rows(rep):
    return [("FUSE: tree-order read warm, 1 reader",
             target_value(rep, "warm read, tree order, 1 reader"), ">=", 0.9, "x"),
            ("FUSE: tree-order read cold against its own warm",
             target_value(rep, "cold read, tree order, vs the mount's own"), ">=", 0.7, "x"),
            ("FUSE: a cold mount (caches dropped)",
             target_value(rep, "mount time (cold caches)"), "<=", 50.0, "ms")]


ROWS = {"netfs": netfs_rows, "pack": pack_rows, "python": python_rows, "loader": loader_rows,
        "fuse": fuse_rows, "tree": tree_rows}


def parse_args(argv):
    ap = argparse.ArgumentParser(description="The speed table: each door against loose files, "
                                 "this build and an earlier one in the same run.")
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                        "build"),
                    help="the build measured (its tools/cli/shardfs and src/python)")
    ap.add_argument("--before-build-dir",
                    help="an earlier build, measured beside it, first, in every mode")
    ap.add_argument("--rows", default=",".join(MODES),
                    help="comma-separated modes (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of every mode on each build, alternating (default 1); a cell is "
                    "then the median and every run's figure")
    ap.add_argument("--small", action="store_true",
                    help="each mode at its integration test's size: a check, not a measurement")
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                    else sys.executable, help="the interpreter the modes run under")
    ap.add_argument("--json", dest="json_out", help="write the table and the runs here")
    ap.add_argument("--keep", metavar="DIR", help="keep each run's JSON and log in DIR")
    ap.add_argument("--workdir", help="each mode's data and scratch in WORKDIR/<mode> (default: "
                    "each mode's own cache under /var/tmp)")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    a.rows = [r for r in a.rows.split(",") if r]
    bad = [r for r in a.rows if r not in MODES]
    if bad:
        ap.error(f"unknown rows {bad}; known: {', '.join(MODES)}")
    return a


def builds_of(a, scratch):
    """(label, build dir, a copy of its shardfs): the copy keeps a rebuild during the run from
    changing the binary under a mode."""
    out = []
    for label, b in (("before", a.before_build_dir), ("after", a.build_dir)):
        if not b:
            continue
        exe = os.path.join(b, "tools", "cli", "shardfs")
        if not os.access(exe, os.X_OK):
            sys.exit(f"bench_speed: {exe}: no shardfs binary in this build dir")
        copy = os.path.join(scratch, f"shardfs-{label}")
        shutil.copy2(exe, copy)
        out.append((label, os.path.abspath(b), copy))
    return out


def run_mode(a, mode, build, scratch, k):
    """Run `k` of shardfs_bench.py in `mode` on `build`: its JSON report (or None) and its
    seconds."""
    label, bdir, exe = build
    name = f"{mode}-{label}-{k}"
    out = os.path.join(scratch, name + ".json")
    cmd = [a.python, BENCH] + MODES[mode][1 if a.small else 0] + ["--build-dir", bdir,
                                                                  "--json", out]
    if mode != "python":
        cmd += ["--shardfs", exe]
    if a.workdir:
        cmd += ["--workdir", os.path.join(a.workdir, mode)]
    env = {var: value for var, value in os.environ.items()
           if var not in ("SHARDFS", "SHARDFS_BUILD_ROOT")}
    print(f"[speed {time.strftime('%H:%M:%S')}] {mode} on {label}, run {k}: "
          f"{' '.join(cmd[1:])}", flush=True)
    start = time.monotonic()
    with open(os.path.join(scratch, name + ".log"), "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    took = time.monotonic() - start
    if not os.path.exists(out):
        print(f"  FAILED: exit {rc} after {took:.0f} s, no report "
              f"(its log: {name}.log)", flush=True)
        return None, took
    with open(out) as f:
        return json.load(f), took


def fmt(value, unit):
    if value is None:
        return "-"
    return f"{value:.1f} ms" if unit == "ms" else f"{value:.2f}x"


def fmt_cell(values, unit):
    """The median, and with more than one run each run's figure in run order."""
    mid = median_of(values)
    if len(values) < 2:
        return fmt(mid, unit)
    return f"{fmt(mid, unit)} ({', '.join(fmt(v, unit) for v in values)})"


def median_of(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def table(results, labels):
    """One row per figure: each build's figure in every run (None where a run has none) and
    their median, the target, and whether the last build's median met it."""
    rows = []
    for mode, by_label in results.items():
        per = {lab: [ROWS[mode](rep) if rep else [] for rep in reps]
               for lab, reps in by_label.items()}
        names = []
        for lab in labels:
            for run in per[lab]:
                names += [r[0] for r in run if r[0] not in names]
        for name in names:
            found = {lab: [next((r for r in run if r[0] == name), None) for run in per[lab]]
                     for lab in labels}
            spec = next(r for runs in found.values() for r in runs if r)
            row = {"mode": mode, "row": name, "op": spec[2], "goal": spec[3], "unit": spec[4]}
            for lab, runs in found.items():
                row[lab + "_runs"] = [r[1] if r else None for r in runs]
                row[lab] = median_of(row[lab + "_runs"])
            rows.append(row)
    return rows


def print_table(rows, labels):
    print("\n| row | " + " | ".join(labels) + " | target | |")
    print("|---|" + "---|" * (len(labels) + 2))
    for r in rows:
        vals = " | ".join(fmt_cell(r[lab + "_runs"], r["unit"]) for lab in labels)
        goal = fmt(r["goal"], r["unit"])
        print(f"| {r['row']} | {vals} | {r['op']} {goal} | "
              f"{target_row(r['row'], r[labels[-1]], r['op'], r['goal'], r['unit'])['status']} |")


def main(argv):
    a = parse_args(argv)
    scratch = a.keep or tempfile.mkdtemp(prefix="shardfs-speed-")
    os.makedirs(scratch, exist_ok=True)
    try:
        builds = builds_of(a, scratch)
        labels = [b[0] for b in builds]
        results, seconds = {}, {}
        for mode in a.rows:
            results[mode] = {lab: [] for lab in labels}
            for k in range(1, a.rounds + 1):
                for b in builds:
                    rep, seconds[f"{mode}-{b[0]}-{k}"] = run_mode(a, mode, b, scratch, k)
                    results[mode][b[0]].append(rep)
        rows = table(results, labels)
        print_table(rows, labels)
        missing = [f"{m} on {lab} (run {k})" for m, by in results.items()
                   for lab, reps in by.items() for k, rep in enumerate(reps, 1) if rep is None]
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump({"schema": "shardfs-bench-speed/1",
                           "builds": {b[0]: b[1] for b in builds}, "small": a.small,
                           "rounds": a.rounds, "rows": rows, "seconds": seconds,
                           "failed": missing, "reports": results}, f, indent=1)
        if missing:
            print(f"\nFAILED: no report from {', '.join(missing)}")
            return 1
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
