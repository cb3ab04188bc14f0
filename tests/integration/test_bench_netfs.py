#!/usr/bin/env python3
"""Smoke test of `shardfs_bench.py --netfs` (shards and index on a network
filesystem).

Runs the bench at a tiny size (240 real JPEGs in 3 classes, 2 shards, one 0.2 ms round trip,
one whole epoch per run, batch 32) into a temporary work dir: sshd + sshfs + the delay proxy
of netfs_testlib, loose tree, shards and index on sshfs; torchvision's ImageFolder under
Debian's /usr/bin/python3 over the loose tree on sshfs, a default shardfs mount of the index on
sshfs and the loose tree on local disk, cold and warm. Checks that the JSON has every row and
figure (samples/s of the three paths, their ratios, index builds, mount times, the chunk
cache's stats, the server's metadata calls of a counted epoch, pack against tar -cf and the
pack's verify), that every path read the tree's samples (bytes, sum of CRC-32 and per-class
counts computed here with zlib), that every target has a verdict, and that the run leaves no
mount, no process (sshd, sshfs, the mount, the loader) and no scratch. Needs root: it fails,
never skips, without it."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from bench_testlib import BenchTestCase, tree_checksum  # noqa: E402

FILES, CLASSES, SHARDS, RTT = 240, 3, 2, 0.2
PATHS = ["loose_netfs", "shardfs", "loose_local"]
TARGETS = 8


class NetfsBenchCase(BenchTestCase):
    """A run of the bench on the sshfs rig (ARGS), once for the class, in a work dir of the
    test's own."""
    NAME, ARGS = None, None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if os.geteuid() != 0:
            raise RuntimeError("the netfs bench test needs root: sshd, sshfs, drop_caches")
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json(cls.NAME, cls.ARGS)


class BenchNetfsTest(NetfsBenchCase):
    PREFIX = "shardfs-bench-netfs-"
    NAME = "netfs"
    ARGS = ["--netfs", "--files", str(FILES), "--classes", str(CLASSES), "--netfs-shards",
            str(SHARDS), "--netfs-rtts", str(RTT), "--netfs-samples", "0", "--loader-batch", "32"]

    def test_completes_with_every_row(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        r = self.report
        self.assertIsNotNone(r, "no JSON written")
        self.assertEqual(r["schema"], "shardfs-bench-netfs/1")
        self.assertEqual(r["dataset"]["samples"], FILES)
        self.assertEqual(r["build"]["shards"], SHARDS)
        self.assertEqual({(x["rtt_ms"], x["temp"]) for x in r["rows"]},
                         {(RTT, "cold"), (RTT, "warm")})
        for row in r["rows"]:
            key = (row["rtt_ms"], row["temp"])
            self.assertEqual(row["status"], "ok", key)
            self.assertEqual(row["samples"], FILES, key)
            for p in PATHS:
                self.assertGreater(row[p]["samples_per_s"], 0, (key, p))
            self.assertGreater(row["ratio_netfs"], 0, key)
            self.assertGreater(row["ratio_local"], 0, key)
        [per] = r["per_rtt"]
        self.assertEqual(per["rtt_ms"], RTT)
        for k in ("index_build_netfs_seconds", "index_build_local_seconds",
                  "index_build_ratio", "mount_cold_ms", "mount_warm_ms"):
            self.assertGreater(per[k], 0, k)
        # The default mount read through the node-local chunk cache, in the run's scratch.
        self.assertGreater(per["stats"]["bytes_fetched"], 0, per["stats"])
        self.assertTrue(r["build"]["cache_dir"].startswith(self.workdir), r["build"])
        md = r["metadata"]
        self.assertEqual(md["samples"], FILES)
        self.assertTrue(md["same_samples"])
        self.assertGreater(md["loose_netfs"]["calls"], FILES)  # An open per file at least.
        self.assertLess(md["shardfs"]["calls"], md["loose_netfs"]["calls"])
        pk = r["pack"]
        self.assertEqual(pk["rtt_ms"], RTT)
        self.assertTrue(pk["verify_ok"], pk)
        self.assertGreater(pk["pack_files_per_s"], 0)
        self.assertGreater(pk["tar_files_per_s"], 0)
        self.assertGreater(pk["raw_bytes_per_s"], 0)
        self.assertEqual(len(r["targets"]), TARGETS)
        for t in r["targets"]:
            self.assertIn(t["status"], ("met", "not met"), t)
        for text in ("shardfs/loose-sshfs", "index build sshfs", "server metadata calls",
                     "pack from sshfs", "targets (network storage)"):
            self.assertIn(text, self.proc.stdout)

    def test_every_path_read_the_tree(self):
        r = self.report
        self.assertEqual(r["content"], "ok")
        want = tree_checksum(os.path.join(r["dataset"]["path"], "train"))
        self.assertEqual(want["samples"], FILES)
        for row in r["rows"]:
            self.assertTrue(row["same_samples"], row)
        for p in ("loose_netfs", "shardfs"):
            got = dict(r["metadata"][p]["checksum"])
            got.pop("pixel_sum")
            self.assertEqual(got, want, p)

    def test_nothing_left(self):
        self.assertNothingLeft()
        # The rig's sshd, sshfs and their temporary folder lived in the run's scratch.
        self.assertEqual(os.listdir(self.workdir), [d for d in os.listdir(self.workdir)
                                                    if d.startswith("dataset-jpeg-")])


class BenchNetfsPackOnlyTest(NetfsBenchCase):
    """--netfs-only pack: the rig's raw bandwidth, pack against tar -cf and the verify, and
    nothing of the loader's part (no shards packed locally, no loader, no counted epoch)."""
    PREFIX = "shardfs-bench-netfs-pack-"
    NAME = "netfs-pack"
    ARGS = ["--netfs", "--netfs-only", "pack", "--files", "120", "--classes", str(CLASSES),
            "--netfs-rtts", str(RTT)]

    def test_pack_part_alone(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        r = self.report
        self.assertEqual(r["schema"], "shardfs-bench-netfs-pack/1")
        self.assertEqual(r["dataset"]["samples"], 120)
        pk = r["pack"]
        self.assertEqual((pk["rtt_ms"], pk["files"]), (RTT, 120))
        self.assertTrue(pk["verify_ok"], pk)
        self.assertEqual(pk["bytes"], r["dataset"]["bytes"])
        for k in ("raw_bytes_per_s", "pack_files_per_s", "tar_files_per_s", "pack_bytes_per_s",
                  "tar_bytes_per_s", "ratio"):
            self.assertGreater(pk[k], 0, k)
        [t] = r["targets"]
        self.assertIn(t["status"], ("met", "not met"), t)
        self.assertIn("pack from sshfs", self.proc.stdout)
        for absent in ("samples/s", "index build", "metadata calls"):
            self.assertNotIn(absent, self.proc.stdout + self.proc.stderr)
        self.assertNothingLeft()


if __name__ == "__main__":
    tl.main()
