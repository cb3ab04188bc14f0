#!/usr/bin/env python3
"""Smoke test of tools/bench/bench_speed.py, the speed table, at the small size of its modes
fuse and python: with --before-build-dir it runs every mode on both builds (here this build
twice) in two alternating rounds, each with its own copy of the binary, and prints one table
with a column per build (the median and each run's figure) and the target of every row; the
JSON holds each run's report. A build dir without a shardfs binary
and an unknown row are refused with a message. No mount, process or scratch dir is left
behind. A speed is never asserted."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from bench_testlib import BUILD_ROOT, SOURCE_ROOT, BenchTestCase  # noqa: E402

SCRIPT = os.path.join(SOURCE_ROOT, "tools", "bench", "bench_speed.py")
PYTHON = "/usr/bin/python3"  # The interpreter the package is built for (meson.build).


class BenchSpeedSmokeTest(BenchTestCase):
    PREFIX = "shardfs-bench-speed-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.json_path = os.path.join(cls.tmp, "speed.json")
        cls.keep = os.path.join(cls.tmp, "runs")
        cls.proc = cls.speed(["--build-dir", BUILD_ROOT, "--before-build-dir", BUILD_ROOT,
                              "--rows", "fuse,python", "--small", "--rounds", "2",
                              "--json", cls.json_path,
                              "--keep", cls.keep, "--workdir", os.path.join(cls.tmp, "work")])
        with open(cls.json_path) as f:
            cls.report = json.load(f)

    @classmethod
    def speed(cls, args, timeout=240):
        return subprocess.run([PYTHON, SCRIPT, "--python", PYTHON] + args, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)

    def test_one_table_with_both_builds(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stdout[-4000:] + self.proc.stderr)
        r = self.report
        self.assertEqual(r["schema"], "shardfs-bench-speed/1")
        self.assertEqual(list(r["builds"]), ["before", "after"])
        self.assertEqual(r["failed"], [])
        names = [row["row"] for row in r["rows"]]
        for want in ("FUSE: open().read() warm", "FUSE: open(buffering=0).read() warm",
                     "FUSE: open().read() with shardfs.fastopen, warm",
                     "kernel path: open().read() warm",
                     "Python package: Index.read loop, shuffled files, warm"):
            self.assertIn(want, names)
        self.assertEqual(r["rounds"], 2)
        for row in r["rows"]:
            for label in ("before", "after"):
                self.assertEqual(len(row[label + "_runs"]), 2, row)
                for v in row[label + "_runs"]:
                    self.assertGreater(v, 0, row)
                runs = sorted(row[label + "_runs"])
                self.assertAlmostEqual(row[label], (runs[0] + runs[1]) / 2, row)
            self.assertIn(row["op"], (">=", "<="))
            line = next(ln for ln in self.proc.stdout.splitlines()
                        if ln.startswith("| " + row["row"] + " |"))
            self.assertEqual(line.count("|"), 6, line)  # row, before, after, target, status
            for cell in line.split(" | ")[1:3]:  # The median, then each run's figure.
                self.assertRegex(cell, r"^[0-9.]+(x| ms) \([0-9.]+(x| ms), [0-9.]+(x| ms)\)$")

    def test_each_run_on_its_own_binary(self):
        for mode in ("fuse", "python"):
            for label in ("before", "after"):
                self.assertEqual(len(self.report["reports"][mode][label]), 2)
                for k, rep in enumerate(self.report["reports"][mode][label], 1):
                    self.assertIsNotNone(rep, (mode, label, k))
                    self.assertTrue(os.path.exists(os.path.join(self.keep,
                                                                f"{mode}-{label}-{k}.json")))
        for label in ("before", "after"):
            for rep in self.report["reports"]["fuse"][label]:
                self.assertEqual(rep["environment"]["shardfs"],
                                 os.path.join(self.keep, "shardfs-" + label))

    def test_refuses_what_it_cannot_run(self):
        empty = os.path.join(self.tmp, "no-build")
        os.makedirs(empty, exist_ok=True)
        p = self.speed(["--build-dir", BUILD_ROOT, "--before-build-dir", empty, "--rows", "fuse",
                        "--small"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(os.path.join(empty, "tools", "cli", "shardfs"), p.stderr)
        self.assertIn("no shardfs binary", p.stderr)
        p = self.speed(["--build-dir", BUILD_ROOT, "--rows", "fuse,nope"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown rows ['nope']", p.stderr)
        p = self.speed(["--build-dir", BUILD_ROOT, "--rounds", "0"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("--rounds must be at least 1", p.stderr)


if __name__ == "__main__":
    tl.main()
