#!/usr/bin/env python3
"""Smoke test of the bench's --job mode (tools/bench/bench_job.py) at 120 small samples, 2 ranks
x 2 workers x 2 epochs, on local disk: it completes with the JSON it documents, a row for each
path (loose files, one shared mount, JobSampler, SampleStream) in which every rank took the same
number of steps and every sample was read right in each epoch (the bench checks and says
FAILED otherwise), and no mount, process or scratch dir is left behind. A speed is never
asserted. The network rig's rows run in test_distributed_job (the same job runner)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from bench_testlib import BenchTestCase  # noqa: E402

SMALL = ["--job", "--samples", "120", "--kib", "8", "--classes", "6", "--shards", "3",
         "--worlds", "2", "--storage", "local", "--batch", "4"]


class BenchJobSmokeTest(BenchTestCase):
    PREFIX = "shardfs-bench-job-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json("job", SMALL)

    def test_completes_with_every_row(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        r = self.report
        self.assertEqual(r["schema"], "shardfs-bench-job/1")
        self.assertEqual(r["dataset"]["samples"], 120)
        self.assertEqual(sorted(row["path"] for row in r["rows"]),
                         ["loose", "mount", "sampler", "stream"])
        for row in r["rows"]:
            self.assertIsNone(row["problem"], row)
            self.assertEqual(len(row["epochs"]), 2)
            # 60 samples a rank, 4 a step; a stream's workers each batch their own 30.
            steps = 2 * -(-30 // 4) if row["path"] == "stream" else 60 // 4
            for e in row["epochs"]:
                self.assertGreater(e["job_samples_per_s"], 0)
                self.assertEqual(e["steps"], steps, row)
            self.assertIsNone(row["server_bytes"])
        self.assertIn("x loose", self.proc.stdout)

    def test_nothing_left(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertNothingLeft()


if __name__ == "__main__":
    tl.main()
