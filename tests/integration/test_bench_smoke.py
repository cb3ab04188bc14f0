#!/usr/bin/env python3
"""Smoke test of the benchmark (tools/bench/shardfs_bench.py + bench_reader).

Runs the bench at a tiny size (2,000 samples, one rep, every system that exists
here, a 2 s archivemount budget) into a temporary work dir and checks that it
completes, that each system's checksum equals the loose tree's (or that its
status says why not), that the loose tree's checksum is right (computed here
with libxxhash through ctypes, not by bench_reader), that the JSON has the
expected keys, and that no mount or daemon is left behind. Then, on the same
cached dataset: a shard corrupted behind the index's back must make shardfs
FAILED and untimed, and Ctrl-C in the middle of a run must leave nothing
mounted. BenchViewsSmokeTest runs the --views mode at 2,000 files,
BenchRemoteSmokeTest the --remote mode at 300 samples."""

import ctypes
import ctypes.util
import glob
import json
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from bench_testlib import BenchTestCase, mounts_under  # noqa: E402

ALL_SYSTEMS = ["loose", "squashfuse", "kernel", "archivemount", "raw", "shardfs"]
READ_FIGURES = ["read_tree1_warm", "read_rand4_warm"]
SMALL = ["--files", "2000", "--classes", "20", "--reps", "1"]


def xxh3_sum(tree):
    """Sum mod 2^64 of XXH3-64 of every file below tree: the reader's checksum, computed here."""
    name = ctypes.util.find_library("xxhash")
    if not name:
        raise RuntimeError("libxxhash not found (needed to check bench_reader independently)")
    lib = ctypes.CDLL(name)
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    total, files = 0, 0
    for d, _, names in os.walk(tree):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                data = f.read()
            total = (total + lib.XXH3_64bits(data, len(data))) % (1 << 64)
            files += 1
    return "%016x" % total, files


def require_peers():
    """Fails loudly (never skips) if a peer filesystem the bench compares is
    missing: scripts/install-deps.sh installs them with the test packages."""
    missing = [name for name, alts in (("squashfuse", ("squashfuse_ll", "squashfuse")),
                                       ("archivemount", ("archivemount",)))
               if not any(shutil.which(a) for a in alts)]
    if missing:
        raise RuntimeError("%s not installed (scripts/install-deps.sh test installs them)"
                           % ", ".join(missing))


class BenchSmokeTest(BenchTestCase):
    PREFIX = "shardfs-bench-smoke-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        require_peers()
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json("main", SMALL + ["--archivemount-budget", "2"])

    def test_completes_with_expected_json(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertIn("targets (shardfs)", self.proc.stdout)
        r = self.report
        self.assertIsNotNone(r, "no JSON written")
        for k in ("schema", "params", "environment", "dataset", "build", "reference",
                  "systems", "targets"):
            self.assertIn(k, r)
        self.assertEqual(r["dataset"]["samples"], 2000)
        self.assertEqual(r["dataset"]["dirs"], 21)
        for k in ("pack_method", "pack_seconds", "index_build_seconds", "index_bytes", "shards"):
            self.assertIn(k, r["build"])
        self.assertGreater(r["build"]["index_bytes"], 0)
        self.assertEqual(sorted(r["systems"]), sorted(ALL_SYSTEMS))
        for name, s in r["systems"].items():
            for k in ("status", "reason", "checksum", "figures", "peak_rss_bytes"):
                self.assertIn(k, s, name)
            for fname, f in s["figures"].items():
                for k in ("unit", "status", "samples_seconds", "median", "min", "max"):
                    self.assertIn(k, f, "%s %s" % (name, fname))
        self.assertEqual(len(r["targets"]), 11)
        for t in r["targets"]:
            self.assertIn(t["status"], ("met", "not met", "n/a"), t)
        # The target table and the shardfs figures are there.
        sh = r["systems"]["shardfs"]["figures"]
        for k in ["mount_warm", "walk_warm", "lstat_warm"] + READ_FIGURES:
            self.assertEqual(sh[k]["status"], "ok", k)
            self.assertEqual(len(sh[k]["samples_seconds"]), 1, k)
        self.assertIsNotNone(sh["read_tree1_warm"]["ratio_vs_loose"])
        self.assertGreater(r["systems"]["shardfs"]["peak_rss_bytes"], 0)

    def test_cold_runs_and_skips_are_reported(self):
        r = self.report
        env = r["environment"]
        if os.geteuid() == 0:
            self.assertTrue(env["cold_runs"])
            for k in ("mount_cold", "lstat_cold", "read_tree1_cold", "read_rand4_cold"):
                self.assertEqual(r["systems"]["shardfs"]["figures"][k]["status"], "ok", k)
            for t in r["targets"]:
                self.assertNotEqual(t["status"], "n/a", t)
        else:
            self.assertFalse(env["cold_runs"])
            self.assertTrue(any("cold" in s for s in env["skipped"]), env["skipped"])
            self.assertEqual(r["systems"]["kernel"]["status"], "skipped")

    def test_checksums(self):
        r = self.report
        want, nfiles = xxh3_sum(os.path.join(r["dataset"]["path"]))
        self.assertEqual(nfiles, r["dataset"]["files"])
        self.assertEqual(r["systems"]["loose"]["checksum"], want)
        self.assertEqual(r["reference"]["read"]["checksum"], want)
        for name, s in r["systems"].items():
            if s["status"] == "ok":
                if name != "raw":
                    self.assertEqual(s["checksum"], want, name)
                for k in READ_FIGURES:
                    f = s["figures"].get(k)
                    if f and f["status"] == "ok":
                        self.assertEqual(f["files"], nfiles, (name, k))
            else:
                self.assertIn(s["status"], ("FAILED", "timeout", "skipped"), name)
                self.assertTrue(s["reason"], "%s is %s without a reason" % (name, s["status"]))
        # These are correct implementations: anything else is a bench bug.
        must_pass = ["loose", "raw", "shardfs", "squashfuse"]
        if os.geteuid() == 0:
            must_pass.append("kernel")
        for name in must_pass:
            self.assertEqual(r["systems"][name]["status"], "ok",
                             "%s: %s" % (name, r["systems"][name]["reason"]))
        self.assertIn(r["systems"]["archivemount"]["status"], ("ok", "timeout"))

    def test_no_mount_or_daemon_left(self):
        self.assertNothingLeft()
        # The run's scratch (mountpoints) is removed; the dataset cache stays.
        self.assertEqual(glob.glob(os.path.join(self.workdir, "run-*")), [])
        self.assertEqual(len(glob.glob(os.path.join(self.workdir, "dataset-*", "tree"))), 1)

    def test_wrong_bytes_are_failed_not_timed(self):
        packs = glob.glob(os.path.join(self.workdir, "dataset-*", "pack-*", "pack.json"))
        self.assertEqual(len(packs), 1)
        with open(packs[0]) as f:
            pack = json.load(f)
        # A byte in the middle of one member, far from the shard's ends (which the
        # shard fingerprint covers), size and mtime kept: the index cannot tell.
        shard = pack["shards"][0]
        size = os.path.getsize(shard)
        self.assertGreater(size, 1 << 20)
        tree = self.report["dataset"]["path"]
        rel = None
        for d, _, names in os.walk(tree):
            for n in sorted(names):
                if n.endswith(".jpg"):
                    rel = os.path.relpath(os.path.join(d, n), tree)
                    p = tl.run_shardfs("stat", "--json", pack["index"], rel, check=0)
                    obj = tl.json_lines(p.stdout)[0]
                    mid = obj["offset"] + obj["size"] // 2
                    if obj["size"] > 0 and (1 << 17) < mid < size - (1 << 17):
                        break
                    rel = None
            if rel:
                break
        self.assertIsNotNone(rel)
        st = os.stat(shard)
        with open(shard, "r+b") as f:
            f.seek(mid)
            orig = f.read(1)
            f.seek(mid)
            f.write(bytes([orig[0] ^ 0xFF]))
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
        try:
            out = os.path.join(self.tmp, "corrupt.json")
            p = self.bench(SMALL + ["--systems", "shardfs", "--reuse-pack", "--json", out])
            self.assertEqual(p.returncode, 0, p.stderr[-4000:])
            with open(out) as f:
                r = json.load(f)
        finally:
            with open(shard, "r+b") as f:
                f.seek(mid)
                f.write(orig)
            os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
        s = r["systems"]["shardfs"]
        self.assertEqual(s["status"], "FAILED", s)
        self.assertIn("checksum", s["reason"])
        self.assertNotEqual(s["checksum"], r["systems"]["loose"]["checksum"])
        for k in READ_FIGURES + ["read_tree1_cold", "read_rand4_cold"]:
            f = s["figures"].get(k)
            self.assertTrue(f is None or f["samples_seconds"] == [], (k, f))
        self.assertIn("FAILED", p.stdout)
        self.assertNothingLeft()

    def test_interrupt_unmounts(self):
        argv = self.bench_argv(["--systems", "shardfs", "--reuse-pack", "--hold", "60"] + SMALL)
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            mounted = tl.wait_until(lambda: mounts_under(self.tmp) or p.poll() is not None,
                                    timeout=90)
            self.assertTrue(mounted and p.poll() is None,
                            "the bench never mounted (rc %s)" % p.poll())
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 130, err[-3000:])
        self.assertIn("interrupted", err)
        self.assertNothingLeft()


VIEW_STEPS = ["create_exclude", "create_rename", "diff", "mount_base", "mount_view",
              "many_versions", "mount_view_many", "mount_latest_many", "mount_base_many",
              "create_exclude_many", "build_extra", "index_add"]
VIEW_PHASES = ["walk", "lstat", "read_tree1", "read_rand4"]


class BenchViewsSmokeTest(BenchTestCase):
    """`--views` (the views targets) at a tiny size: every step runs, the view's walks and
    reads match the references the bench computes, the diff matches its lists, nothing is left
    mounted."""

    PREFIX = "shardfs-bench-views-smoke-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json("views", [
            "--views", "--files", "2000", "--classes", "20", "--reps", "1", "--versions", "5",
            "--mount-reps", "2", "--shard-size", "1MiB"])

    def test_completes_with_every_step(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertIn("targets (views)", self.proc.stdout)
        r = self.report
        self.assertIsNotNone(r, "no JSON written")
        self.assertEqual(r["schema"], "shardfs-bench-views/1")
        self.assertEqual(r["dataset"]["files"], 2000)
        self.assertGreater(r["dataset"]["shards"], 1)
        self.assertGreater(r["dataset"]["extra_files"], 0)
        self.assertEqual(r["params"]["view_paths"], 200)
        for name in VIEW_STEPS:
            st = r["steps"][name]
            self.assertEqual(st["status"], "ok", "%s: %s" % (name, st["note"]))
            self.assertGreater(len(st["samples_seconds"]), 0, name)
        self.assertEqual(len(r["steps"]["mount_view"]["samples_seconds"]), 2)
        self.assertEqual(r["steps"]["diff"]["check"], "ok")
        self.assertGreater(r["steps"]["create_exclude"]["index_bytes_added"][0], 0)
        for t in r["targets"]:
            self.assertIn(t["status"], ("met", "not met"), t)

    def test_view_and_base_read_the_same_files(self):
        r = self.report
        base, view = r["systems"]["base"], r["systems"]["view"]
        self.assertEqual(base["status"], "ok", base["reason"])
        self.assertEqual(view["status"], "ok", view["reason"])
        self.assertEqual(base["checksum"], view["checksum"])
        for k in VIEW_PHASES:
            for temp in ("warm", "cold") if os.geteuid() == 0 else ("warm",):
                key = "%s_%s" % (k, temp)
                self.assertEqual(view["figures"][key]["status"], "ok", key)
                if k != "walk":  # Same list: the view's 1800 files.
                    self.assertEqual(view["figures"][key]["files"], 1800, key)
                    self.assertEqual(base["figures"][key]["files"], 1800, key)
        self.assertEqual(view["figures"]["walk_warm"]["files"], 1800)
        self.assertEqual(base["figures"]["walk_warm"]["files"], 2000)

    def test_no_mount_or_daemon_left(self):
        self.assertNothingLeft()


REMOTE_WALKS = ["find", "ls", "lstat"]
REMOTE_TARGETS = 8  # 3 metadata walks, cold ratio, shuffled ratio, bytes fetched, 2 warm rows.


class BenchRemoteSmokeTest(BenchTestCase):
    """`--remote` (the remote-shard targets) at a tiny size against nginx and the proxy it starts:
    every row is in the report and the JSON, metadata walks sent 0 requests, every read gave the
    loose tree's files, nothing is left mounted or running, within a minute."""

    PREFIX = "shardfs-bench-remote-smoke-"
    FILES = 300

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json("remote", [
            "--remote", "--files", str(cls.FILES), "--classes", "10", "--reps", "1",
            "--shard-size", "1MiB", "--chunk-size", "64K"], timeout=180)

    def test_completes_with_every_row(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertIn("targets (remote shards)", self.proc.stdout)
        r = self.report
        self.assertIsNotNone(r, "no JSON written")
        self.assertEqual(r["schema"], "shardfs-bench-remote/1")
        self.assertEqual(r["dataset"]["samples"], self.FILES)
        self.assertGreater(r["dataset"]["shards"], 1)
        self.assertEqual(sorted(r["rows"]["walks"]), sorted(REMOTE_WALKS))
        self.assertEqual(len(r["targets"]), REMOTE_TARGETS)
        for t in r["targets"]:
            self.assertIn(t["status"], ("met", "not met"), t)
        for k in ("cold_epochs", "warm_epochs", "disk_fill"):
            self.assertEqual(len(r["rows"][k]), 1, k)
        for phase in ("read_tree1", "read_rand4"):
            q = r["quarter_cache"][phase]
            self.assertIsNotNone(q["hit_rate"], phase)
            self.assertGreater(q["requests"], 0, phase)
        for k in ("cold", "warm"):
            self.assertIn("amplification", r["stats_text"][k], k)
        self.assertIn("shardfs stats` after the cold", self.proc.stdout)

    def test_metadata_walks_send_no_request(self):
        files = self.report["dataset"]["files"]
        for name in REMOTE_WALKS:
            w = self.report["rows"]["walks"][name]
            self.assertEqual(w["proxy_requests"], 0, name)
            self.assertEqual(w["stats_requests"], 0, name)
            if name != "ls":
                self.assertEqual(w["files"], files, name)
        for t in self.report["targets"][:3]:
            self.assertEqual((t["value"], t["status"]), (0, "met"), t)

    def test_every_read_gave_the_tree(self):
        r = self.report
        files, nbytes = r["dataset"]["files"], r["dataset"]["bytes"]
        want = {"local": ["read_tree1_warm", "read_tree1_cold"],
                "http": ["read_tree1_cold", "read_rand4_cold", "read_tree1_warm"],
                "loose_http": ["read_rand4_cold"]}
        for name, keys in want.items():
            figs = r["systems"][name]["figures"]
            for k in keys:
                self.assertEqual(figs[k]["status"], "ok", (name, k, figs[k]["note"]))
                self.assertEqual((figs[k]["files"], figs[k]["bytes"]), (files, nbytes), (name, k))
                self.assertEqual(len(figs[k]["samples_seconds"]), 1, (name, k))
        # The loose-over-HTTP reader sent one GET per file through the proxy.
        self.assertEqual(r["systems"]["loose_http"]["info"]["proxy_requests"], [files])
        self.assertGreater(r["rows"]["cold_epochs"][0]["proxy_requests"], 0)

    def test_no_mount_or_daemon_left(self):
        self.assertNothingLeft()



class BenchArchivesSmokeTest(BenchTestCase):
    """`--archives zip,gz` at a tiny size: every system's row, the zip and gzip
    ratios, every shuffled read gave the loose tree's bytes (the bench checks the checksum),
    and nothing is left mounted or running."""

    PREFIX = "shardfs-bench-archives-smoke-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json("archives", [
            "--archives", "zip,gz", "--zip-files", "300", "--gz-bytes", "4M", "--gz-spacing",
            "1M", "--reads", "150", "--latency-reads", "40"])

    def test_completes_with_every_row(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertIn("stored zip / tar pack, warm", self.proc.stdout)
        self.assertIn("shardfs first pass / indexed_gzip", self.proc.stdout)
        z = self.report["zip"]
        self.assertEqual(z["files"], 300)
        for name in ("loose", "shardfs-tar", "shardfs-zip-stored", "shardfs-zip-deflated",
                     "fuse-zip-stored", "archivemount-stored"):
            self.assertIn("warm", z["reads"][name], name)
        g = self.report["gz"]
        self.assertGreater(g["files"], 0)
        for temp in ("first", "warm"):
            self.assertGreater(g["reads"]["shardfs"][temp], 0, temp)
        self.assertGreater(g["indexed_gzip"]["files_per_s"], 0)
        self.assertGreater(g["latency_us"]["p99"], 0)
        self.assertGreater(g["latency_no_prefill_us"]["p99"], 0)
        self.assertIn("without directory prefill (prefill_dirs=0)", self.proc.stdout)
        # The daemon's own count of the latency phase's decodes: one a read at
        # most, most of them short of a whole interval (small files, 1 MiB
        # spacing).
        dec = g["latency_decodes"]
        self.assertGreater(dec["stream_intervals_prefix"], 0, dec)
        self.assertGreater(dec["decoded_bytes"], 0, dec)
        # --gz-spacing reached the build: 4 MB of tar at 1 MiB gives at least 3 windows.
        self.assertGreater(g["build"]["index_bytes"], 3 * 32768)

    def test_no_mount_or_daemon_left(self):
        self.assertNothingLeft()


class BenchPackzSmokeTest(BenchTestCase):
    """`--archives packz` (pack --compress) at 200 samples: the report has every
    pack's row and the ratios, every shuffled read gave the loose tree's bytes (the bench checks
    the checksum), and nothing is left mounted or running."""

    PREFIX = "shardfs-bench-packz-smoke-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.workdir = os.path.join(cls.tmp, "work")
        cls.run_bench_json("packz", ["--archives", "packz", "--packz-samples", "200",
                                     "--reads", "300"])

    def test_completes_with_every_row(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        self.assertIn("zstd groups vs single-frame zstd -3", self.proc.stdout)
        p = self.report["packz"]
        self.assertEqual(p["files"], 600)
        self.assertEqual(sorted(p["packs"]), ["gzip", "plain", "zstd"])
        for name, v in p["packs"].items():
            self.assertGreater(v["shard_bytes"], 0, name)
            self.assertIn("warm", p["reads"][name], name)
        # Compressible data: the groups compress, and not much worse than one stream.
        self.assertLess(p["packs"]["zstd"]["shard_bytes"], p["packs"]["plain"]["shard_bytes"])
        self.assertLess(p["zstd_vs_single"], 1.2)
        self.assertLess(p["gzip_vs_single"], 1.2)

    def test_no_mount_or_daemon_left(self):
        self.assertNothingLeft()


if __name__ == "__main__":
    tl.main()
