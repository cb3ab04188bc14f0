#!/usr/bin/env python3
"""Smoke test of `shardfs_bench.py --loader` (the real loader).

Runs the bench at a tiny size (96 real JPEGs in 2 classes, one whole epoch per run, batch 32,
so three batches over 1 and 2 workers) into a temporary work dir: an unmodified torchvision ImageFolder + torch
DataLoader under Debian's /usr/bin/python3, over the loose tree and over a shardfs mount, cold
and warm. Checks that the JSON has every row (mode x workers x temp) with figures, that the
loose tree and the mount read the same samples, and that those are the tree's files (bytes,
sum of CRC-32 and per-class counts computed here from the tree with zlib, not by the bench);
that --required-rate prints a verdict ("yes" at 1 sample/s, "no" with the workers needed at a
rate no machine reaches, and which of storage or decode is the bottleneck); that nothing is
left mounted or running. Cold runs need root: the test fails, never skips, without it."""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from bench_testlib import BenchTestCase, tree_checksum  # noqa: E402

FILES, CLASSES, WORKERS = 96, 2, [1, 2]
MODES, TEMPS = ["decode", "raw"], ["cold", "warm"]


class BenchLoaderTest(BenchTestCase):
    PREFIX = "shardfs-bench-loader-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if os.geteuid() != 0:
            raise RuntimeError("the loader bench test needs root: its cold runs drop caches")
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json("loader", ["--loader-workers", ",".join(map(str, WORKERS)),
                                      "--required-rate", "1"])

    @classmethod
    def bench_argv(cls, args):
        return super().bench_argv(["--loader", "--files", str(FILES), "--classes", str(CLASSES),
                                   "--shard-size", "1MiB", "--loader-batch", "32"] + args)

    def test_completes_with_every_row(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        r = self.report
        self.assertIsNotNone(r, "no JSON written")
        self.assertEqual(r["schema"], "shardfs-bench-loader/1")
        self.assertTrue(r["environment"]["cold_runs"], r["environment"]["skipped"])
        self.assertEqual(r["dataset"]["samples"], FILES)
        self.assertGreater(r["build"]["shards"], 1)
        # loose, mount and the Python package (shardfs.torch) on every row.
        self.assertEqual(len(r["runs"]), len(MODES) * len(WORKERS) * 3 * len(TEMPS))
        want = {(m, w, t) for m in MODES for w in WORKERS for t in TEMPS}
        self.assertEqual({(x["mode"], x["workers"], x["temp"]) for x in r["rows"]}, want)
        for row in r["rows"]:
            key = (row["mode"], row["workers"], row["temp"])
            self.assertEqual(row["status"], "ok", key)
            self.assertEqual(row["samples"], FILES, key)
            self.assertGreater(row["ratio"], 0, key)
            self.assertGreater(row["ratio_package"], 0, key)
            for path in ("loose", "mount", "package"):
                fig = row[path]
                self.assertGreater(fig["samples_per_s"], 0, (key, path))
                # The package's loader gets bytes already read: its share is ~0.
                lowest = 0 if path == "package" else 1e-12
                self.assertTrue(lowest <= fig["io_share"] <= 1, (key, path, fig["io_share"]))
                if row["mode"] == "decode":
                    self.assertGreater(fig["decode_share"], 0, (key, path))
        self.assertEqual(len(r["targets"]), 2 * len(WORKERS) * len(TEMPS))  # mount, package
        for t in r["targets"]:
            self.assertIn(t["status"], ("met", "not met"), t)
        self.assertIn("targets (loader)", self.proc.stdout)
        self.assertIn("mount/loose", self.proc.stdout)

    def test_mount_and_loose_read_the_tree(self):
        r = self.report
        self.assertEqual(r["content"], "ok")
        want = tree_checksum(os.path.join(r["dataset"]["path"], "train"))
        self.assertEqual(want["samples"], FILES)
        pixel = None
        for run in r["runs"]:
            key = (run["mode"], run["workers"], run["path"], run["temp"])
            got = dict(run["checksum"])
            pix = got.pop("pixel_sum")
            self.assertEqual(got, want, key)
            if run["mode"] == "decode":  # The same decoded tensors on every path.
                self.assertGreater(pix, 0, key)
                pixel = pix if pixel is None else pixel
                self.assertEqual(pix, pixel, key)
        for row in r["rows"]:
            self.assertTrue(row["same_samples"], row)
            self.assertTrue(row["same_samples_package"], row)

    def test_required_rate_verdicts(self):
        req = self.report["required"]
        self.assertEqual(req["rate"], 1)
        for mode in MODES:
            m = req["modes"][mode]
            self.assertIs(m["keeps_pace"], True, m)
            self.assertEqual(m["workers"], 1, m)
        self.assertIn("data path keeps pace: yes, with 1 worker (", self.proc.stdout)
        self.assertIn("bottleneck: neither", self.proc.stdout)
        # A rate no machine reaches: a "no" with the workers it would take, for both paths,
        # on the cached dataset and shards. One batch a run is enough for a rate.
        out = os.path.join(self.tmp, "no.json")
        p = self.bench(["--loader-workers", "1", "--required-rate", "1e9", "--reuse-pack",
                        "--loader-samples", "32", "--json", out])
        self.assertEqual(p.returncode, 0, p.stderr[-4000:])
        self.assertIn("(cached)", p.stdout)
        self.assertEqual(p.stdout.count("data path keeps pace: no: best "), 2, p.stdout)
        self.assertIn("workers would be needed at", p.stdout)
        self.assertIn("bottleneck: storage", p.stdout)
        with open(out) as f:
            req = json.load(f)["required"]
        for mode in MODES:
            self.assertIs(req["modes"][mode]["keeps_pace"], False)
            self.assertGreater(req["modes"][mode]["workers"], 1)
        self.assertNothingLeft()

    def test_raw_loader_alone_in_a_memory_cgroup(self):
        # --loader-modes raw: only the raw loader runs; --memory-limit: the mounts and the
        # loaders in a memory cgroup of their own, removed afterwards.
        out = os.path.join(self.tmp, "cgroup.json")
        p = self.bench(["--loader-workers", "1", "--loader-modes", "raw", "--memory-limit", "2G",
                        "--reuse-pack", "--json", out])
        self.assertEqual(p.returncode, 0, p.stderr[-4000:])
        with open(out) as f:
            r = json.load(f)
        self.assertEqual(r["content"], "ok")
        self.assertEqual(r["params"]["modes"], ["raw"])
        self.assertEqual(r["params"]["memory_limit"], 2 << 30)
        self.assertEqual({x["mode"] for x in r["runs"]}, {"raw"})
        self.assertEqual([(x["mode"], x["temp"]) for x in r["rows"]],
                         [("raw", "cold"), ("raw", "warm")])
        self.assertIn("memory cgroup limited to", p.stdout)
        self.assertIn("limit 2,147,483,648 bytes", p.stderr)
        left = glob.glob("/sys/fs/cgroup/shardfs-bench-*") + \
            glob.glob("/sys/fs/cgroup/memory/shardfs-bench-*")
        self.assertEqual(left, [])
        self.assertNothingLeft()

    def test_no_mount_or_daemon_left(self):
        self.assertNothingLeft()
        self.assertEqual(len(glob.glob(os.path.join(self.workdir, "dataset-jpeg-*", "tree"))), 1)


if __name__ == "__main__":
    tl.main()
