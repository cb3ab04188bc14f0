#!/usr/bin/env python3
"""Smoke test of the bench's --dirops mode (tools/bench/bench_dirops.py): cold lookups through two
builds of the mount, here this tree's shardfs as both A and B, at 300 files and one rep.

Checks that it completes with the JSON it documents (every layout, both builds, one sample
each), that the INIT probe found the reply's flags and that this build does not send
FUSE_PARALLEL_DIROPS (the mount does not ask for it: measured, it slows cold lookups in one
folder while the directory prefill runs; tools/bench/README.md, "Parallel lookups"), that a tree whose
recorded sizes disagree with what the mount answers fails the run, and that no mount, process
or scratch dir is left behind."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from bench_testlib import BUILD_ROOT, BenchTestCase  # noqa: E402

FUSE_PARALLEL_DIROPS = 1 << 18
SMALL = ["--dirops", "--files", "300", "--dirs", "3", "--reps", "1"]


class BenchDiropsSmokeTest(BenchTestCase):
    PREFIX = "shardfs-bench-dirops-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json("dirops", SMALL + ["--shardfs-b", tl.SHARDFS, "--build-dir-b",
                                              BUILD_ROOT])

    def test_completes_with_expected_json(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertIn("B speedup", self.proc.stdout)
        r = self.report
        self.assertIsNotNone(r, "no JSON written")
        self.assertEqual(r["schema"], "shardfs-bench-dirops/1")
        self.assertEqual(sorted(r["layouts"]), ["flat", "tree"])
        for layout, fig in r["layouts"].items():
            for build in ("A", "B"):
                self.assertEqual(len(fig[build]["samples"]), 1, (layout, build))
                self.assertGreater(fig[build]["median"], 0)
            self.assertGreater(fig["speedup_b"], 0)

    def test_init_probe(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        for build in ("A", "B"):
            b = self.report["builds"][build]
            flags = int(b["init_flags"], 16)
            self.assertGreater(b["init_minor"], 0, b)
            self.assertNotEqual(flags, 0, b)
            self.assertEqual(b["parallel_dirops"], bool(flags & FUSE_PARALLEL_DIROPS))
            self.assertFalse(b["parallel_dirops"],
                             "the mount asked for FUSE_PARALLEL_DIROPS: see tools/bench/README.md")

    def test_wrong_sizes_fail_and_nothing_left(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertNothingLeft()
        done = os.path.join(self.workdir, "data-flat", "done.json")
        with open(done) as f:
            rec = json.load(f)
        rec["bytes"] += 1  # What the cached tree says it holds, no longer what it holds.
        with open(done, "w") as f:
            json.dump(rec, f)
        p = self.bench(SMALL + ["--layouts", "flat", "--shardfs-b", tl.SHARDFS,
                                "--build-dir-b", "unused"])
        self.assertEqual(p.returncode, 1, p.stderr[-2000:])
        self.assertIn("the readers saw", p.stderr)
        self.assertNothingLeft()


if __name__ == "__main__":
    tl.main()
