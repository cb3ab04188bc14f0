#!/usr/bin/env python3
"""`shardfs pack --from-index`: an index rematerialised as new shards.

The source is a tree packed by GNU tar (owner and group set, a hard link
pair, a symlink, an empty directory, small and big files, a small and a big
sparse file stored as GNU sparse members) in two shards, indexed by `index
build`. The packed index must list the same tree (ls -R --json: types,
modes, owners, mtimes, sizes, targets, which names share a file), and every
file's bytes, read straight from the new shards at the offsets the new index
gives, must equal the source file's. A byte flipped in a source shard (inside
a file's data, where the fingerprint does not look) or a shard grown since
indexing fails the command with a message naming the shard, and leaves no
index and no shard in the output. An output that would overwrite a source
shard is refused, with --force too."""

import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

MIB = 1 << 20
KEYS = ("type", "size", "mode", "uid", "gid", "mtime_ns", "nlink", "target")


def write_sparse(path, size, regions):
    with open(path, "wb") as f:
        f.truncate(size)
        for off, data in regions:
            f.seek(off)
            f.write(data)


def make_source(parent):
    """parent/src, and its two tar shards in parent/shards."""
    src = os.path.join(parent, "src")
    os.makedirs(os.path.join(src, "a", "deep", "er"))
    os.makedirs(os.path.join(src, "b", "empty"))
    os.makedirs(os.path.join(src, "c"))
    for i in range(30):
        tl._write(os.path.join(src, "a", "s%03d.jpg" % i), os.urandom(100 + 331 * i))
        tl._write(os.path.join(src, "a", "s%03d.cls" % i), b"%d" % (i % 7))
    tl._write(os.path.join(src, "a", "deep", "er", "x.bin"), os.urandom(3 * MIB + 17))
    tl._write(os.path.join(src, "a", "run.sh"), b"#!/bin/sh\n", mode=0o755)
    tl._write(os.path.join(src, "b", "empty.txt"), b"")
    tl._write(os.path.join(src, "b", "first.dat"), os.urandom(5000))
    os.link(os.path.join(src, "b", "first.dat"), os.path.join(src, "c", "second.dat"))
    os.symlink("../b/first.dat", os.path.join(src, "c", "link"))
    write_sparse(os.path.join(src, "c", "small.sparse"), 300 * 1024,
                 [(4096, os.urandom(5000)), (200 * 1024, os.urandom(100))])
    write_sparse(os.path.join(src, "c", "big.sparse"), 9 * MIB,
                 [(0, os.urandom(70000)), (4 * MIB, os.urandom(1000)), (9 * MIB - 10, b"x" * 10)])
    # Whole seconds: what every tar format keeps.
    for root, dirs, files in os.walk(src):
        for n in dirs + files:
            os.utime(os.path.join(root, n), (tl.BASE_TIME_S, tl.BASE_TIME_S + len(n)),
                     follow_symlinks=False)
    shards = os.path.join(parent, "shards")
    os.mkdir(shards)
    owner = ["--owner=1234", "--group=5678", "--numeric-owner", "--sparse"]
    return src, [tl.tar_create(os.path.join(shards, "part-0.tar"), src, ["a"], owner),
                 tl.tar_create(os.path.join(shards, "part-1.tar"), src, ["b", "c"], owner)]


def tree_of(idx):
    """{path: selected ls -R --json fields}, and the names of each file."""
    entries = tl.index_entries(idx)
    tree = {p: {k: o.get(k) for k in KEYS} for p, o in entries.items()}
    groups = {}
    for p, o in entries.items():
        if o["type"] == "file":
            groups.setdefault(o["inode"], []).append(p)
    return tree, sorted(sorted(g) for g in groups.values()), entries


class PackFromIndexTest(tl.ScratchTestCase):
    PREFIX = "shardfs-pack-from-index-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src, cls.shards = make_source(cls.tmp)
        cls.idx = os.path.join(cls.tmp, "shards", "index")
        tl.build_index(cls.shards, cls.idx)

    def pack_from(self, idx, out, *extra, check=0):
        p = tl.run_shardfs("pack", "--from-index", idx, "--out", out, "--quiet", *extra)
        if check is not None and p.returncode != check:
            raise AssertionError("pack --from-index exited %d, expected %d\nstderr: %s" % (
                p.returncode, check, p.stderr.decode(errors="replace")[-4000:]))
        return p

    def assert_same_tree(self, src_idx, out_idx, src_root):
        want, want_links, _ = tree_of(src_idx)
        got, got_links, entries = tree_of(out_idx)
        self.assertEqual(sorted(want), sorted(got))
        for p in want:
            self.assertEqual(want[p], got[p], p)
        self.assertEqual(want_links, got_links)
        self.assertIn([b"b/first.dat", b"c/second.dat"], got_links)
        self.assertEqual(got[b"b/empty"]["type"], "dir")
        self.assertEqual(got[b"c/link"]["target"], b"../b/first.dat")
        self.assertEqual(got[b"a/run.sh"]["mode"], 0o755)
        self.assertEqual(got[b"a/run.sh"]["uid"], 1234)
        # Every file's bytes, read from the new shard where the new index
        # says, against the source file.
        for p, o in entries.items():
            if o["type"] != "file":
                continue
            with open(os.path.join(os.fsencode(src_root), p), "rb") as f:
                data = f.read()
            with open(os.fsencode(o["shard"]), "rb") as f:
                f.seek(o["offset"])
                self.assertEqual(f.read(o["size"]), data, p)

    def test_round_trip(self):
        src_entries = tl.index_entries(self.idx)
        for p in (b"c/small.sparse", b"c/big.sparse"):  # Read through their extents.
            self.assertTrue(src_entries[p].get("sparse"), p)
        out = self.scratch("out")
        self.pack_from(self.idx, out, "--shard-size", "256K", "-j", "2")
        self.assertGreater(len(tl.shards_of(out)), 3)
        self.assert_same_tree(self.idx, os.path.join(out, "index"), self.src)
        # The output is an index of its own: pack it again from there.
        again = self.scratch("again")
        self.pack_from(os.path.join(out, "index"), again)
        self.assert_same_tree(self.idx, os.path.join(again, "index"), self.src)

    def copy_source(self):
        d = self.scratch("copy")
        for s in self.shards:
            shutil.copy(s, d)
        idx = os.path.join(d, "index")
        tl.build_index([os.path.join(d, os.path.basename(s)) for s in self.shards], idx)
        return d, idx

    def assert_failed_cleanly(self, p, shard, out):
        err = p.stderr.decode(errors="replace")
        self.assertIn(shard, err)
        self.assertIn("no index written", err)
        self.assertFalse(os.path.exists(os.path.join(out, "index")))
        self.assertEqual([n for n in os.listdir(out) if "tar" in n], [])

    def test_flipped_byte_fails(self):
        d, idx = self.copy_source()
        entries = tl.index_entries(idx)
        big = entries[b"a/deep/er/x.bin"]
        shard = os.path.join(d, "part-0.tar")
        self.assertEqual(os.path.realpath(big["shard"]), os.path.realpath(shard))
        # Far from both ends of the shard: the fingerprint does not cover it.
        at = big["offset"] + MIB
        with open(shard, "r+b") as f:
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0xFF]))
        out = self.scratch("out")
        p = self.pack_from(idx, out, check=1)
        self.assert_failed_cleanly(p, "part-0.tar", out)
        self.assertIn("a/deep/er/x.bin", p.stderr.decode(errors="replace"))

    def test_flipped_byte_in_small_file_fails(self):
        d, idx = self.copy_source()
        f5000 = tl.index_entries(idx)[b"b/first.dat"]
        shard = os.path.join(d, "part-1.tar")
        with open(shard, "r+b") as f:
            f.seek(f5000["offset"] + 10)
            b = f.read(1)
            f.seek(f5000["offset"] + 10)
            f.write(bytes([b[0] ^ 0xFF]))
        out = self.scratch("out")
        p = self.pack_from(idx, out, check=1)
        self.assert_failed_cleanly(p, "part-1.tar", out)

    def test_grown_shard_fails(self):
        d, idx = self.copy_source()
        with open(os.path.join(d, "part-1.tar"), "ab") as f:
            f.write(b"\0" * 512)
        out = self.scratch("out")
        p = self.pack_from(idx, out, check=1)
        self.assert_failed_cleanly(p, "part-1.tar", out)

    def test_refuses_to_overwrite_source(self):
        d, idx = self.copy_source()
        # An index elsewhere of the same shards: only the shard names clash.
        other = os.path.join(self.scratch("other"), "index")
        tl.build_index([os.path.join(d, os.path.basename(s)) for s in self.shards], other)
        shutil.rmtree(idx)
        before = sorted(os.listdir(d))
        for extra in ([], ["--force"]):
            p = self.pack_from(other, d, "--name", "part-%d.tar", *extra, check=1)
            self.assertIn(b"part-", p.stderr)
            self.assertEqual(sorted(os.listdir(d)), before)
        tl.build_index([os.path.join(d, os.path.basename(s)) for s in self.shards], idx)
        # The source index itself is never the output index.
        p = self.pack_from(idx, d, "--force", check=1)
        self.assertIn(b"source index", p.stderr)
        self.assertTrue(os.path.isdir(idx))

    def test_usage(self):
        out = self.scratch("out")
        tl.run_shardfs("pack", "--from-index", self.idx, self.src, "--out", out, check=2)
        tl.run_shardfs("pack", "--from-index", self.idx, "--exclude", "x", "--out", out, check=2)
        tl.run_shardfs("pack", self.src, "--view", "v", "--out", out, check=2)


if __name__ == "__main__":
    tl.main()
