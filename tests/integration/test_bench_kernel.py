#!/usr/bin/env python3
"""Smoke test of `shardfs_bench.py --kernel --plot` (the kernel mount's benchmark).

Runs the bench at a tiny size (300 samples in 10 classes, one rep, 1 MiB shards) with the
systems loose and shardfs plus --kernel, which adds shardfs-kernel (`shardfs mount --kernel`:
an EROFS image of the index's view, served by the kernel, no daemon), and --plot. Checks that
shardfs-kernel has every figure shardfs has (walks, reads in tree order and shuffled, warm and
cold, mount times) with positive values and the loose tree's checksum (computed here with
libxxhash, not by bench_reader); that the image build was timed (mounts with an empty image
cache) and its size reported, with one inode per entry of the tree counted here; that neither
the image nor the shards were in the page cache when a cold run started; that the PNG exists
and is a PNG; that nothing is left mounted or running. Without root the kernel mount cannot
run: shardfs-kernel must then be reported skipped, with the reason."""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from bench_testlib import BenchTestCase  # noqa: E402
from test_bench_smoke import xxh3_sum  # noqa: E402

FILES, CLASSES = 300, 10
PHASES = ["walk", "lstat", "read_tree1", "read_rand4"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tree_entries(tree):
    """Files, directories and the root below `tree`: the inodes an image of it holds."""
    n = 1
    for _, dirs, names in os.walk(tree):
        n += len(dirs) + len(names)
    return n


class BenchKernelSmokeTest(BenchTestCase):
    PREFIX = "shardfs-bench-kernel-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.png_path = os.path.join(cls.tmp, "kernel.png")
        cls.run_bench_json("kernel", [
            "--files", str(FILES), "--classes", str(CLASSES), "--reps", "1", "--shard-size",
            "1MiB", "--systems", "loose,shardfs", "--kernel", "--plot", cls.png_path],
            timeout=180)

    def test_completes_in_a_minute(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertIsNotNone(self.report, "no JSON written")
        self.assertEqual(sorted(self.report["systems"]), ["loose", "shardfs", "shardfs-kernel"])
        self.assertEqual(self.report["params"]["systems"], ["loose", "shardfs", "shardfs-kernel"])

    def test_kernel_rows(self):
        s = self.report["systems"]["shardfs-kernel"]
        if os.geteuid() != 0:
            self.assertEqual(s["status"], "skipped")
            self.assertIn("root", s["reason"])
            return
        self.assertEqual(s["status"], "ok", s["reason"])
        want, nfiles = xxh3_sum(self.report["dataset"]["path"])
        self.assertEqual(s["checksum"], want)
        fuse = self.report["systems"]["shardfs"]["figures"]
        keys = ["%s_%s" % (p, t) for p in PHASES for t in ("warm", "cold")]
        keys += ["mount_warm", "mount_cold", "mount_build"]
        for k in keys:
            f = s["figures"][k]
            self.assertEqual(f["status"], "ok", (k, f["note"]))
            # A fresh mount before each cold run: one cold mount per phase.
            self.assertEqual(len(f["samples_seconds"]), 4 if k == "mount_cold" else 1, k)
            self.assertGreater(f["median"], 0, k)
            if k != "mount_build":
                self.assertIn(k, fuse)  # Every row the FUSE mount gets.
            if k.startswith("read"):
                self.assertEqual(f["files"], nfiles, k)
                self.assertGreater(f["ratio_vs_loose"], 0, k)
        for k in ("walk_warm", "walk_cold", "lstat_warm", "lstat_cold"):
            self.assertGreater(s["figures"][k]["ratio_vs_loose"], 0, k)
        self.assertIsNone(s["peak_rss_bytes"])  # No daemon.
        self.assertIn("mount time, build (empty cache)", self.proc.stdout)
        self.assertIn("shardfs mount --kernel", self.proc.stdout)

    def test_image_size_and_build_time(self):
        if os.geteuid() != 0:
            self.skipTest("shardfs-kernel is skipped without root (test_kernel_rows checks it)")
        info = self.report["systems"]["shardfs-kernel"]["info"]
        entries = tree_entries(self.report["dataset"]["path"])
        self.assertEqual(info["image_inodes"], entries)
        self.assertGreater(info["image_bytes"], 0)
        self.assertGreaterEqual(info["image_bytes"], info["image_logged_bytes"])
        self.assertAlmostEqual(info["image_bytes_per_entry"], info["image_bytes"] / entries)
        # The first mount and the one "mount_build" sample each built the image.
        self.assertEqual(len(info["image_build_seconds_samples"]), 2)
        self.assertGreaterEqual(info["image_build_seconds"], 0)
        self.assertGreater(info["first_mount_ms"], 0)
        self.assertIn("kernel image (EROFS, metadata only):", self.proc.stdout)

    def test_cold_runs_start_uncached(self):
        if os.geteuid() != 0:
            self.skipTest("no cold runs without root")
        info = self.report["systems"]["shardfs-kernel"]["info"]
        # The warm runs had the shards in the page cache; each drop before a cold run emptied
        # it of the image and the shards.
        self.assertGreater(info["page_cache_after_warm_bytes"], 0)
        self.assertEqual(info["page_cache_after_drop_bytes"], 0)

    def test_plot_is_a_png(self):
        with open(self.png_path, "rb") as f:
            head = f.read(24)
        self.assertEqual(head[:8], PNG_MAGIC)
        self.assertEqual(head[12:16], b"IHDR")
        width, height = struct.unpack(">II", head[16:24])
        self.assertGreater(width, 600)
        self.assertGreater(height, 300)
        self.assertGreater(os.path.getsize(self.png_path), 10_000)

    def test_no_mount_or_daemon_left(self):
        self.assertNothingLeft()


if __name__ == "__main__":
    tl.main()
