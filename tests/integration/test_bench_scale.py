#!/usr/bin/env python3
"""Smoke test of the growth table (`tools/bench/shardfs_bench.py --scale`).

Runs it at 2,000 and 20,000 files (20 class directories, 1 MiB shards, few lookups, reads and
mounts) into a temporary cache root and checks that it completes, that the JSON has every row
with a value at both sizes and a growth factor, that the shards it wrote are tars Python's
tarfile reads back with the expected members and content, and that nothing is left mounted or
running. As root (CI) the cold runs and the slab rows must be there too."""

import json
import os
import sys
import tarfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_testlib import BenchTestCase  # noqa: E402

SIZES = [2000, 20000]
ROWS = ["index_build_s", "index_build_cpu_rate", "index_build_rss_mb", "index_build_rate",
        "index_headers_s", "index_headers_rate", "inmem_s", "inmem_cpu_rate", "inmem_rss_mb",
        "m256_s", "m256_cpu_rate", "m256_rss_mb", "index_bytes_per_entry", "mount_cold_ms",
        "mount_warm_ms", "lookup_p50_us", "lookup_p99_us", "lookup_default_p50_us",
        "lookup_default_p99_us", "lookup_warm_p50_us", "lookup_warm_p99_us", "parts_s",
        "parts_bytes_ratio", "manifest_mount_warm_ms", "manifest_mount_cold_ms",
        "manifest_lookup_p50_us", "manifest_lookup_p99_us", "walked", "walk_world", "walk_s",
        "walk_rate", "read_rate", "rss_mb", "hwm_mb", "slab_mb", "slab_per_entry",
        "slab_inodes_held", "slab_peak_inodes_held", "slab_per_inode_peak", "slab_fuse_inode",
        "slab_dentry", "slab_inode_cache"]


class BenchScaleSmokeTest(BenchTestCase):
    PREFIX = "shardfs-scale-smoke-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.run_bench_json("scale", [
            "--scale", ",".join(map(str, SIZES)), "--cache-root", cls.tmp, "--classes", "20",
            "--shard-size", "1MiB", "--lookups", "300", "--reads", "1000",
            "--mount-reps-cold", "1", "--mount-reps-warm", "2", "--build-memory", "inmem,256M",
            "--partition-at", ",".join(map(str, SIZES)), "--partitions", "2",
            # A phase that hangs fails the run naming itself, within the test's time.
            "--phase-timeout", "90"])

    def test_completes_with_every_row(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertIn("shardfs scale", self.proc.stdout)
        r = self.report
        self.assertIsNotNone(r, "no JSON written")
        self.assertEqual(r["schema"], "shardfs-bench-scale/1")
        self.assertEqual(r["sizes"], SIZES)
        self.assertEqual([row["metric"] for row in r["rows"]], ROWS)
        root = os.geteuid() == 0
        self.assertEqual(r["environment"]["cold_runs"], root)
        for row in r["rows"]:
            if not root and (row["metric"].startswith("slab") or row["metric"] == "mount_cold_ms"):
                continue  # Without root: no drop_caches, no /proc/slabinfo. CI runs as root.
            self.assertEqual(len(row["values"]), len(SIZES), row)
            for v in row["values"]:
                self.assertIsNotNone(v, row["metric"])
            self.assertEqual(len(row["growth"]), len(SIZES) - 1, row)
            if all(v > 0 for v in row["values"]):  # Slab deltas may be 0 or below: no factor.
                self.assertIsNotNone(row["growth"][0], row["metric"])
        for n in SIZES:
            res = r["results"][str(n)]
            self.assertEqual(res["files"], n)
            self.assertEqual(res["walk"]["files"], n)
            self.assertEqual(res["read"]["files"], min(1000, n))
            self.assertEqual(res["lookup"]["calls"], 300)
            self.assertEqual(res["lookup"]["mount_options"], "prefill_dirs=0")
            self.assertEqual(res["lookup_default"]["calls"], 300)
            self.assertGreater(res["index_build"]["index_disk_bytes"], 0)
            self.assertGreater(res["daemon"]["rss_bytes"], 0)
            self.assertEqual(len(res["mount"]["warm_seconds"]), 2)
            lat = res["lookup"]["latency_us"]
            self.assertLessEqual(lat["p50"], lat["p99"])
            self.assertLessEqual(lat["p99"], lat["max"])
            if root:
                self.assertEqual(len(res["mount"]["cold_seconds"]), 1)
                self.assertGreater(res["slab"]["fuse_inode"]["object_size"], 0)
        for flag in r["flags"]:
            self.assertIsInstance(flag, str)

    def test_shards_are_tars_with_the_expected_members(self):
        self.assertIsNotNone(self.report, "no JSON written")
        n = SIZES[0]
        wdir = os.path.join(self.tmp, "shardfs-scale-%d-1" % n)
        with open(os.path.join(wdir, "dataset.json")) as f:
            meta = json.load(f)
        files, content, dirs = 0, 0, set()
        for shard in meta["shards"]:
            with tarfile.open(shard) as tf:  # Checks every header's checksum on the way.
                for m in tf:
                    if m.isdir():
                        dirs.add(m.name.rstrip("/"))
                        continue
                    self.assertTrue(m.isfile(), m.name)
                    data = tf.extractfile(m).read()
                    self.assertEqual(len(data), m.size)
                    self.assertTrue(data.startswith(m.name.encode() + b"\n"), m.name)
                    self.assertTrue(200 <= m.size <= 4096, (m.name, m.size))
                    files += 1
                    content += m.size
        self.assertEqual(files, n)
        self.assertEqual(content, meta["content_bytes"])
        self.assertEqual(len(dirs), 21)  # train/ and 20 classes.
        self.assertGreater(len(meta["shards"]), 1)  # 1 MiB shards: the split is exercised.

    def test_nothing_left_behind(self):
        self.assertNothingLeft()
        self.assertEqual([d for d in os.listdir(self.tmp) if d.startswith("shardfs-scale-run-")],
                         [], "the run's scratch dir was not removed")


if __name__ == "__main__":
    unittest.main()
