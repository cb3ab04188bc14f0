#!/usr/bin/env python3
"""`shardfs pack --compress zstd|gzip`: groups of whole samples, each
decodable alone (a zstd frame per group plus the seekable-format table; one
gzip member with a full flush between groups), and an index whose seek
points are the group boundaries, with no 32 KiB windows.

References are the source tree and what the standard tools extract from the
shards (`zstd -d`, `tar -I zstd -x`, `tar -xzf`, Python's tarfile in
WebDataset's streaming mode "r|*"), never the code's own output. Random
reads across group boundaries under 16 readers are checked byte for byte;
a corrupt byte gives EIO and a log line naming the shard and the offset,
never wrong bytes; verify --full passes, then fails on a corrupted shard;
pack --from-index reads and writes compressed shards."""

import json
import os
import random
import re
import struct
import subprocess
import sys
import tarfile
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

GROUP = "64K"
GROUP_BYTES = 64 << 10
EXT = {"zstd": ".tar.zst", "gzip": ".tar.gz"}


def make_tree(root, seed=11):
    """JSON, text and numpy-like samples in two directories, one sample
    bigger than several groups, an empty file, a symlink, a hard link."""
    rnd = random.Random(seed)
    words = ["cat", "dog", "fish", "bird", "tree", "river", "stone", "cloud"]
    for d in ("train", "val/sub"):
        os.makedirs(os.path.join(root, d))
    for i in range(160):
        d = os.path.join(root, "train" if i % 4 else "val/sub")
        key = os.path.join(d, "s%04d" % i)
        meta = {"id": i, "label": rnd.choice(words),
                "caption": " ".join(rnd.choice(words) for _ in range(rnd.randint(5, 400)))}
        tl.write_file(key + ".json", json.dumps(meta).encode())
        tl.write_file(key + ".txt", ("\n".join(
            "%d %s" % (j, rnd.choice(words)) for j in range(rnd.randint(0, 900)))).encode())
        n = rnd.randint(0, 3000)
        arr = struct.pack("<%df" % n, *[round(rnd.gauss(0, 1), 2) for _ in range(n)])
        tl.write_file(key + ".npy", b"\x93NUMPY\x01\x00" + arr)
        if i % 17 == 0:
            tl.write_file(key + ".bin", rnd.randbytes(rnd.randint(1, 50000)))
    big = "".join("line %d: %s\n" % (j, rnd.choice(words)) for j in range(40000)).encode()
    tl.write_file(os.path.join(root, "train", "big.txt"), big)  # several groups
    tl.write_file(os.path.join(root, "train", "empty.json"), b"")
    os.symlink("s0001.json", os.path.join(root, "train", "alias.json"))
    os.link(os.path.join(root, "train", "s0002.txt"), os.path.join(root, "train", "hard.txt"))
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (1600000000, 1600000000 + len(name)),
                     follow_symlinks=False)
    os.utime(root, (1600000000, 1600000000))


def tree(root):
    ref = tl.walk_reference(root)
    del ref[b""]
    return ref


class PackCompressTest(tl.ScratchTestCase):
    PREFIX = "shardfs-packz-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        os.mkdir(cls.src)
        make_tree(cls.src)
        cls.want = tree(cls.src)
        cls.files = tl.regular_files(cls.src)
        cls.packs = {}
        for codec in EXT:
            out = os.path.join(cls.tmp, "pack-" + codec)
            tl.pack(cls.src, out, "--compress", codec, "--group-bytes", GROUP)
            cls.packs[codec] = out

    def shards(self, out, codec):
        names = sorted(n for n in os.listdir(out) if n.endswith(EXT[codec]))
        self.assertTrue(names, "no %s shard in %s" % (EXT[codec], os.listdir(out)))
        self.assertFalse([n for n in os.listdir(out) if n.endswith(".tmp")])
        return [os.path.join(out, n) for n in names]

    def mount_tree(self, idx, options=None):
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt, options=options):
            return tree(mnt)

    def test_mount_equals_source(self):
        for codec in EXT:
            with self.subTest(codec=codec):
                got = self.mount_tree(os.path.join(self.packs[codec], "index"))
                tl.assert_same_tree(self, self.want, got)

    def test_several_shards_and_levels(self):
        for codec, level in (("zstd", "1"), ("zstd", "19"), ("gzip", "1"), ("gzip", "9")):
            with self.subTest(codec=codec, level=level):
                out = os.path.join(self.scratch("multi"), "out")
                tl.pack(self.src, out, "--compress", codec, "--compress-level", level,
                        "--group-bytes", "16K", "--shard-size", "400K")
                self.assertGreater(len(self.shards(out, codec)), 2)
                got = self.mount_tree(os.path.join(out, "index"))
                # Hard links across shards are copies in the tar, one inode in the index.
                tl.assert_same_tree(self, self.want, got)

    def extracted(self, shards, cmd):
        x = self.scratch("x")
        for s in shards:
            subprocess.run(cmd(s, x), shell=True, check=True)
        return tree(x)

    def test_stock_tools_read_the_shards(self):
        zs = self.shards(self.packs["zstd"], "zstd")
        gz = self.shards(self.packs["gzip"], "gzip")
        cases = [
            ("zstd -d", zs, lambda s, x: "zstd -q -d -c %s | tar -x -C %s" % (s, x)),
            ("tar -I zstd", zs, lambda s, x: "tar -I zstd -xf %s -C %s" % (s, x)),
            ("tar -xzf", gz, lambda s, x: "tar -xzf %s -C %s" % (s, x)),
        ]
        for name, shards, cmd in cases:
            with self.subTest(tool=name):
                tl.assert_same_tree(self, self.want, self.extracted(shards, cmd))
        # zstd -d checks the frames' checksums; the file ends with the seek table.
        with open(zs[0], "rb") as f:
            data = f.read()
        self.assertEqual(struct.unpack("<I", data[-4:])[0], 0x8F92EAB1)
        frames, desc = struct.unpack("<IB", data[-9:-4])
        self.assertEqual(desc, 0x80)
        self.assertGreater(frames, 1)
        size = struct.unpack("<I", data[-(9 + 12 * frames) - 4:-(9 + 12 * frames)])[0]
        self.assertEqual(size, 12 * frames + 9)
        magic = struct.unpack("<I", data[-(9 + 12 * frames) - 8:-(9 + 12 * frames) - 4])[0]
        self.assertEqual(magic, 0x184D2A5E)
        decoded = 0
        for k in range(frames):
            at = len(data) - 9 - 12 * frames + 12 * k
            decoded += struct.unpack("<I", data[at + 4:at + 8])[0]
        plain = subprocess.run(["zstd", "-q", "-d", "-c", zs[0]], stdout=subprocess.PIPE,
                               check=True).stdout
        self.assertEqual(decoded, len(plain))

    def test_webdataset_streaming_tarfile(self):
        """WebDataset reads shards with tarfile mode "r|*", which fails on a
        gzip file of several members."""
        got = {}
        for s in self.shards(self.packs["gzip"], "gzip"):
            with tarfile.open(s, mode="r|*") as t:
                for m in t:
                    if m.isfile():
                        got[os.path.normpath(m.name)] = t.extractfile(m).read()
                    elif m.islnk():  # The second name of the hard-linked file.
                        got[os.path.normpath(m.name)] = got[os.path.normpath(m.linkname)]
        self.assertEqual(sorted(got), sorted(self.files))
        for p, data in self.files.items():
            self.assertEqual(got[p], data, p)

    def test_index_has_no_windows(self):
        for codec in EXT:
            with self.subTest(codec=codec):
                idx = os.path.join(self.packs[codec], "index")
                info = tl.run_shardfs("index", "info", idx, check=0).stdout.decode()
                m = re.search(r"seek points:\s+(\d+) in (\d+) compressed shards, (\d+) with a "
                              r"window", info)
                self.assertIsNotNone(m, info)
                points, shards, windows = map(int, m.groups())
                self.assertEqual(windows, 0)
                tar_bytes = sum(len(d) for d in self.files.values())
                self.assertGreaterEqual(points, tar_bytes // GROUP_BYTES // 2)
                self.assertIn("compress=%s" % codec, info)
                # index build over the shards finds the same files (zstd: past
                # the seek table's skippable frame).
                built = os.path.join(self.scratch("built"), "idx")
                tl.build_index(self.shards(self.packs[codec], codec), built,
                               "--seek-spacing", "128K")
                tl.assert_same_tree(self, self.want, self.mount_tree(built))
                # gzip: its points are verified full-flush points, with no window.
                info = tl.run_shardfs("index", "info", built, check=0).stdout.decode()
                m = re.search(r"seek points:\s+(\d+) in \d+ compressed shards, (\d+) with a "
                              r"window", info)
                self.assertIsNotNone(m, info)
                self.assertGreater(int(m.group(1)), 2)
                self.assertEqual(int(m.group(2)), 0, info)

    def test_sync_flush_gzip_keeps_what_it_needs(self):
        """A foreign gzip with Z_SYNC_FLUSH points (the same 00 00 ff ff bytes
        as a full flush, but back-references may cross them): index build
        keeps a window wherever decoding without one fails, and every read
        is right."""
        d = self.scratch("sync")
        tar = os.path.join(d, "plain.tar")
        subprocess.run(["tar", "--format=gnu", "-cf", tar, "-C", self.src, "."], check=True)
        data = tl.read_file(tar)
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        out = b""
        for i in range(0, len(data), 50000):
            out += c.compress(data[i:i + 50000]) + c.flush(zlib.Z_SYNC_FLUSH)
        out += c.flush()
        shard = os.path.join(d, "sync.tar.gz")
        tl.write_file(shard, out)
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx, "--seek-spacing", "64K")
        info = tl.run_shardfs("index", "info", idx, check=0).stdout.decode()
        self.assertRegex(info, r"seek points:\s+\d+ in 1 compressed shards")
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt):
            for rel, want in sorted(self.files.items()):
                self.assertEqual(tl.read_file(os.path.join(mnt, rel)), want, rel)

    def test_random_reads_16_readers(self):
        def pick(rnd, names):  # A third of the reads in the file that spans groups.
            return "train/big.txt" if rnd.random() < 0.3 else rnd.choice(names)

        for codec in EXT:
            with self.subTest(codec=codec):
                mnt = self.scratch("mnt")
                with tl.Mount(os.path.join(self.packs[codec], "index"), mnt):
                    problems = tl.random_range_reads(mnt, self.files, 3 * GROUP_BYTES,
                                                     reads=200, pick=pick)
                self.assertEqual(problems, [])

    def corrupt_copy(self, codec, name):
        """A copy of the pack with bytes of a middle group of its shard
        flipped after indexing: (index, shard)."""
        out = os.path.join(self.scratch(name), "out")
        tl.pack(self.src, out, "--compress", codec, "--group-bytes", GROUP)
        shard = self.shards(out, codec)[0]
        size = os.path.getsize(shard)
        self.assertGreater(size, 3 * 64 << 10)  # Past the fingerprint's ends.
        with open(shard, "r+b") as fh:
            for off in range(size // 2, size // 2 + 2048, 97):
                fh.seek(off)
                b = fh.read(1)
                fh.seek(off)
                fh.write(bytes([b[0] ^ 0x5a]))
        return os.path.join(out, "index"), shard

    def test_corrupt_group_gives_eio(self):
        # zstd: the frames' checksums catch it even without verify=; gzip
        # (no checksum per group) relies on verify=first's per-file XXH3.
        for codec, options in (("zstd", None), ("gzip", "verify=first")):
            with self.subTest(codec=codec):
                idx, shard = self.corrupt_copy(codec, "corrupt-" + codec)
                mnt = self.scratch("mnt")
                with tl.Mount(idx, mnt, options=options) as m:
                    eio = tl.read_all_right_or_eio(self, mnt, self.files)
                    log = m.stderr()
                self.assertGreater(eio, 0)
                self.assertRegex(log, r"shard \S*%s\b.*byte \d+" % re.escape(
                    os.path.basename(shard)))

    def test_verify_passes_then_fails_on_corruption(self):
        for codec in EXT:
            with self.subTest(codec=codec):
                idx = os.path.join(self.packs[codec], "index")
                r = tl.run_shardfs("verify", "--full", "--quiet", idx, self.src, check=0)
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                bad_idx, shard = self.corrupt_copy(codec, "verify-" + codec)
                r = tl.run_shardfs("verify", "--full", "--quiet", bad_idx, self.src)
                self.assertNotEqual(r.returncode, 0)
                text = (r.stdout + r.stderr).decode()
                self.assertRegex(text, r"(shard differs|content differs|checksum differs)")

    def test_from_index_round_trip(self):
        # compressed -> plain -> gzip -> zstd, each compared with the source.
        prev = os.path.join(self.packs["zstd"], "index")
        for step, extra in (("plain", ()), ("gzip", ("--compress", "gzip")),
                            ("zstd", ("--compress", "zstd", "--group-bytes", "32K"))):
            with self.subTest(step=step):
                out = os.path.join(self.scratch("from-" + step), "out")
                tl.run_shardfs("pack", "--from-index", prev, "--out", out, "--quiet", *extra,
                               check=0)
                ext = ".tar" if step == "plain" else EXT[step]
                self.assertTrue([n for n in os.listdir(out) if n.endswith(ext)])
                idx = os.path.join(out, "index")
                tl.assert_same_tree(self, self.want, self.mount_tree(idx))
                r = tl.run_shardfs("verify", "--full", "--quiet", idx, self.src, check=0)
                self.assertEqual(r.returncode, 0)
                prev = idx

    def test_refusals(self):
        out = os.path.join(self.scratch("refuse"), "out")
        for args, msg in ((("--compress", "bzip2"), "--compress"),
                          (("--compress", "zstd", "--compress-level", "40"), "zstd levels"),
                          (("--compress", "gzip", "--compress-level", "10"), "gzip levels"),
                          (("--compress", "zstd", "--group-bytes", "1K"), "--group-bytes"),
                          (("--compress", "zstd", "--group-bytes", "65M"), "--group-bytes"),
                          (("--group-bytes", "64K"), "need --compress")):
            with self.subTest(args=args):
                r = tl.pack(self.src, out, *args, check=None)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(msg, r.stderr.decode())
                self.assertFalse(os.path.exists(os.path.join(out, "index")))

    def test_deterministic(self):
        for codec in EXT:
            with self.subTest(codec=codec):
                out = os.path.join(self.scratch("again"), "out")
                tl.pack(self.src, out, "--compress", codec, "--group-bytes", GROUP)
                a = self.shards(self.packs[codec], codec)
                b = self.shards(out, codec)
                self.assertEqual([os.path.basename(p) for p in a],
                                 [os.path.basename(p) for p in b])
                for x, y in zip(a, b):
                    self.assertEqual(tl.read_file(x), tl.read_file(y), x)


if __name__ == "__main__":
    tl.main()
