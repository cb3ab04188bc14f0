#!/usr/bin/env python3
"""Smoke test of the bench's --python-peers mode (tools/bench/bench_peers.py) at 120 small
samples in about a dozen tar shards, one round, 2 ranks x 2 workers: it completes with the JSON
it documents; the shardfs rows (SampleDataset random access, SampleStream) of both modes (raw
bytes, decoded) are measured, every item checked by the bench, cold rows exactly when the
caches can be dropped; every rank of SampleStream yields ceil(120 / 2) samples; and no
process or scratch dir is left behind. webdataset and wids need not be here: their rows then
say "not installed" and the run still succeeds; where they import (as this interpreter finds
them), their rows must be measured instead. A speed is never asserted."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from bench_testlib import BenchTestCase  # noqa: E402

SAMPLES, WORLD = 120, 2
SMALL = ["--python-peers", "--samples", str(SAMPLES), "--kib-min", "4", "--kib-max", "8",
         "--shard-size", "96KiB", "--reps", "1", "--world", str(WORLD), "--workers", "2",
         "--batch", "4", "--shuffle-buffer", "16", "--classes", "7"]


def imports(module):
    """Whether `module` imports under this interpreter and environment (what the bench's
    workers get)."""
    return subprocess.run([sys.executable, "-c", "import " + module],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


class BenchPeersSmokeTest(BenchTestCase):
    PREFIX = "shardfs-bench-peers-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json("peers", SMALL)
        cls.peers = {"wids": imports("wids"), "webdataset": imports("webdataset")}

    def setUp(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertIsNotNone(self.report)

    def test_report_shape(self):
        r = self.report
        self.assertEqual(r["schema"], "shardfs-bench-peers/1")
        self.assertEqual(r["dataset"]["samples"], SAMPLES)
        self.assertEqual(sum(r["dataset"]["per_shard"]), SAMPLES)
        self.assertGreaterEqual(len(r["dataset"]["shards"]), 4)
        self.assertEqual(sorted(r["rows"]), ["random", "stream"])
        for part in ("random", "stream"):
            self.assertEqual(sorted(r["rows"][part]), ["decode", "raw"])
        self.assertIn("Random access", self.proc.stdout)
        self.assertIn("Stream", self.proc.stdout)

    def check_shardfs_row(self, row):
        self.assertEqual(row["status"], "ok", row)
        self.assertIsNone(row["problem"], row)
        self.assertEqual(len(row["warm"]), 1)
        self.assertGreater(row["warm_samples_per_s"]["median"], 0)
        cold = self.report["environment"]["cold_runs"]
        self.assertEqual(len(row["cold"]), 1 if cold else 0, row)

    def test_shardfs_rows(self):
        for part in ("random", "stream"):
            for mode in ("raw", "decode"):
                with self.subTest(part=part, mode=mode):
                    self.check_shardfs_row(self.report["rows"][part][mode]["shardfs"])

    def test_stream_ranks_equal(self):
        cold = self.report["environment"]["cold_runs"]
        for mode in ("raw", "decode"):
            per_rank = self.report["rows"]["stream"][mode]["shardfs"]["per_rank"]
            self.assertEqual(per_rank["warm"], [[SAMPLES // WORLD] * WORLD])
            self.assertEqual(per_rank["cold"], [[SAMPLES // WORLD] * WORLD] if cold else [])

    def test_peer_rows(self):
        for part, peer in (("random", "wids"), ("stream", "webdataset")):
            for mode in ("raw", "decode"):
                row = self.report["rows"][part][mode][peer]
                ratio = self.report["rows"][part][mode]["ratio"]["warm"]
                with self.subTest(peer=peer, mode=mode, installed=self.peers[peer]):
                    if not self.peers[peer]:
                        self.assertTrue(row["status"].startswith("not installed"), row)
                        self.assertEqual(row["warm"], [])
                        self.assertIsNone(ratio)
                        continue
                    self.assertEqual(row["status"], "ok", row)
                    self.assertIsNone(row["problem"], row)
                    self.assertGreater(ratio, 0)
                    if part == "stream":  # Whole shards per rank: every sample once.
                        self.assertEqual(sum(row["per_rank"]["warm"][0]), SAMPLES)
        if not all(self.peers.values()):
            self.assertIn("not installed", self.proc.stdout)
        if not self.peers["wids"]:
            self.assertIsNone(self.report["target"]["value"])
            self.assertIn("not measured", self.proc.stdout)

    def test_nothing_left(self):
        self.assertNothingLeft()


if __name__ == "__main__":
    tl.main()
