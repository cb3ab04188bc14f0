#!/usr/bin/env python3
"""`shardfs pack`: samples, self-contained shards, and files pack did not write.

The references are the loose tree (os.walk, os.lstat, sha256), WebDataset's
own sample key rule applied to each shard's member order as Python's tarfile
reads it, and what GNU tar extracts from one shard alone; never the code's
own output.
"""

import collections
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

# WebDataset's base_plus_ext (tariterators.py): the sample key and extension.
WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


def wds_key(name):
    m = WDS_KEY.match(name)
    return m.group(1) if m else None


pack = tl.pack


def shards_of(out):
    """The shards in `out`, as paths."""
    return [os.path.join(out, n) for n in tl.shards_of(out)]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def loose_samples(src):
    """{key: sorted file paths} of the loose tree: every regular file (each
    name of a hard-linked one) whose relative path has a WebDataset key."""
    out = collections.defaultdict(list)
    for d, dirs, files in os.walk(src):
        for n in files:
            full = os.path.join(d, n)
            if not os.path.isfile(full) or os.path.islink(full):
                continue
            rel = os.path.relpath(full, src)
            k = wds_key(rel)
            if k is not None:
                out[k].append(rel)
    return {k: sorted(v) for k, v in out.items()}


def write(path, size_or_data):
    data = os.urandom(size_or_data) if isinstance(size_or_data, int) else size_or_data
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tl._write(path, data)


class PackSamplesTest(unittest.TestCase):

    def setUp(self):
        tl.require_shardfs()
        self.tmp = tempfile.mkdtemp(prefix="shardfs-pack-samples-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- Helpers ---------------------------------------------------------------

    def members(self, shard):
        with tarfile.open(shard) as tf:
            return tf.getmembers()

    def check_grouping(self, src, out, types=("reg",)):
        """WebDataset's reading of each shard, one shard at a time: the
        members of a key are adjacent and in one shard, and the samples are
        exactly the loose tree's. `types`: which members count as files
        ("reg"; "lnk" adds tar hard links, which WebDataset itself skips)."""
        where = {}
        got = collections.defaultdict(list)
        for i, shard in enumerate(shards_of(out)):
            run = []  # Keys in member order, one per run of equal keys.
            for m in self.members(shard):
                if not (("reg" in types and m.isreg()) or ("lnk" in types and m.islnk())):
                    continue
                k = wds_key(m.name)
                if k is None:
                    continue
                got[k].append(m.name)
                if not run or run[-1] != k:
                    self.assertNotIn(k, where, "sample %r split: in shard %s and again in %s" % (
                        k, where.get(k), os.path.basename(shard)))
                    where[k] = os.path.basename(shard)
                    run.append(k)
        self.assertEqual({k: sorted(v) for k, v in got.items()}, loose_samples(src))
        return where

    def check_each_shard_extracts_alone(self, src, out):
        """`tar -xf ONE.tar` into an empty directory, for every shard: exit 0,
        nothing on stderr, and every regular file it yields is the source's."""
        files = 0
        for shard in shards_of(out):
            dest = tempfile.mkdtemp(prefix="one-", dir=self.tmp)
            p = subprocess.run(["tar", "--numeric-owner", "-xpf", shard, "-C", dest],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.assertEqual((p.returncode, p.stderr), (0, b""), os.path.basename(shard))
            for d, _, names in os.walk(dest):
                for n in names:
                    full = os.path.join(d, n)
                    rel = os.path.relpath(full, dest)
                    if os.path.islink(full):
                        continue
                    self.assertEqual(sha256(full), sha256(os.path.join(src, rel)), rel)
                    files += 1
            shutil.rmtree(dest)
        return files

    def verify(self, out, src):
        p = tl.run_shardfs("verify", "--full", os.path.join(out, "index"), src)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p.stdout, b"")

    # -- 1. A sample is never split, whatever lies between its members --------

    def make_split_tree(self):
        src = os.path.join(self.tmp, "src")
        x = os.path.join(src, "x")
        # A directory whose name sorts inside the sample s: s.a < s.b/ < s.z.
        write(os.path.join(x, "s.a"), 900)
        write(os.path.join(x, "s.b", "t.txt"), 700)
        write(os.path.join(x, "s.b", "deeper", "u.jpg"), 800)
        write(os.path.join(x, "s.b", "deeper", "u.json"), 50)
        write(os.path.join(x, "s.z"), 900)
        # Hidden files share WebDataset's key "x/" with a hidden directory
        # in between (".a.txt" < ".cache/" < ".d.txt").
        write(os.path.join(x, ".a.txt"), 600)
        write(os.path.join(x, ".cache", "f.bin"), 600)
        write(os.path.join(x, ".d.txt"), 600)
        # Ordinary samples, and keys that sort differently by name and by
        # key ("n-1.jpg" < "n.jpg" by name; "n" < "n-1" by key).
        for i in range(12):
            for ext, size in (("jpg", 700 + 50 * i), ("json", 40), ("cls", 3)):
                write(os.path.join(src, "train", "n%04d.%s" % (i, ext)), size)
        write(os.path.join(src, "train", "n.jpg"), 500)
        write(os.path.join(src, "train", "n.txt"), 500)
        write(os.path.join(src, "train", "n-1.jpg"), 500)
        write(os.path.join(src, "train", "n-1.txt"), 500)
        # Another directory named like a sample member, with a file sample
        # after it in name order: k.jpg < k.sub/ < k.txt.
        write(os.path.join(src, "train", "k.jpg"), 1000)
        write(os.path.join(src, "train", "k.sub", "k.jpg"), 1000)
        write(os.path.join(src, "train", "k.txt"), 1000)
        return src

    def test_sample_with_a_directory_between_its_members(self):
        src = self.make_split_tree()
        for size in ("2K", "3K", "5K", "64K"):
            out = os.path.join(self.tmp, "out-" + size)
            pack(src, out, "--shard-size", size)
            where = self.check_grouping(src, out)
            self.assertIn("x/s", where)
            self.assertIn("x/", where)
            self.verify(out, src)
            self.check_each_shard_extracts_alone(src, out)

    def test_directories_come_before_their_contents(self):
        # One shard: tar order. A directory entry precedes its children; the
        # sample's files precede the directory that shares their prefix.
        src = self.make_split_tree()
        out = os.path.join(self.tmp, "out")
        pack(src, out)
        self.assertEqual(len(shards_of(out)), 1)
        names = [m.name for m in self.members(shards_of(out)[0])]  # tarfile drops a dir's '/'
        pos = {n: i for i, n in enumerate(names)}
        for n in names:
            parent = os.path.dirname(n)
            if parent:
                self.assertLess(pos[parent], pos[n], n)
        self.assertLess(pos["x/s.z"], pos["x/s.b"])
        self.assertLess(pos["x/.d.txt"], pos["x/.cache"])
        self.assertLess(pos["train/k.txt"], pos["train/k.sub"])
        # Where no directory shares a prefix with files, the order is name
        # order (the index's inode order).
        train = [n for n in names if n.startswith("train/n")]
        self.assertEqual(train, sorted(train))

    def test_names_webdataset_cannot_group_warn_once_per_kind(self):
        src = os.path.join(self.tmp, "src")
        for i in range(20):
            write(os.path.join(src, "d", "README%d" % i), 5)
            write(os.path.join(src, "d", ".hidden%d" % i), 5)
        write(os.path.join(src, "d", "p.JPG"), 5)
        write(os.path.join(src, "d", "p.jpg"), 5)
        write(os.path.join(src, "d", "ok.jpg"), 5)
        p = pack(src, os.path.join(self.tmp, "out"))
        lines = p.stderr.decode().splitlines()
        no_dot = [l for l in lines if "no '.'" in l]
        hidden = [l for l in lines if "starting with '.'" in l]
        case = [l for l in lines if "differ only in case" in l]
        self.assertEqual(len(no_dot), 1, lines)
        self.assertEqual(len(hidden), 1, lines)
        self.assertEqual(len(case), 1, lines)
        self.assertIn("20 ", no_dot[0])
        self.assertIn("20 ", hidden[0])
        self.assertIn("d/p.", case[0])
        self.assertLessEqual(len(lines), 4, lines)

    # -- 2. Every shard is self-contained -------------------------------------

    def make_link_tree(self):
        src = os.path.join(self.tmp, "src")
        a = os.path.join(src, "a", "img.bin")
        write(a, 3000)
        # Same shard as a/img.bin: stays a tar hard link.
        os.link(a, os.path.join(src, "a", "img.copy"))
        # Later directories, later shards at 8K: stored as copies.
        for d in ("b", "c", "d"):
            write(os.path.join(src, d, "pad.bin"), 6000)
            os.link(a, os.path.join(src, d, "z.bin"))
        os.link(a, os.path.join(src, "d", "zz.bin"))  # A link to d/z.bin's copy.
        # A link group whose first name is in a sample and not in the first
        # shard.
        g = os.path.join(src, "e", "s.jpg")
        write(g, 4000)
        write(os.path.join(src, "e", "s.json"), 100)
        os.mkdir(os.path.join(src, "f"))
        os.link(g, os.path.join(src, "f", "t.jpg"))
        return src

    def test_hard_link_to_an_earlier_shard_is_a_copy(self):
        src = self.make_link_tree()
        out = os.path.join(self.tmp, "out")
        pack(src, out, "--shard-size", "8K")
        shards = shards_of(out)
        self.assertGreater(len(shards), 4)
        first = {}
        links = []
        for shard in shards:
            in_shard = {}
            for m in self.members(shard):
                if m.islnk():
                    # A link names a regular member of its own shard.
                    self.assertIn(m.linkname, in_shard, "%s in %s" % (m.name, shard))
                    self.assertTrue(in_shard[m.linkname].isreg())
                    links.append(m.name)
                in_shard[m.name] = m
                first.setdefault(m.name, shard)
        self.assertIn("a/img.copy", links, "a link within one shard stays a link")
        self.assertGreater(self.check_each_shard_extracts_alone(src, out), 6)
        self.check_grouping(src, out, types=("reg", "lnk"))
        # The index and the mount still show one file with all its names.
        ref = tl.walk_reference(src)
        entries = {e["path"]: e for e in tl.json_lines(
            tl.run_shardfs("ls", "-R", "--json", os.path.join(out, "index"), check=0).stdout)}
        by_inode = collections.defaultdict(set)
        for p, e in entries.items():
            if e["type"] == "file":
                by_inode[e["inode"]].add(p)
                self.assertEqual(e["nlink"], ref[p].nlink, p)
        groups = sorted(sorted(g) for g in by_inode.values() if len(g) > 1)
        self.assertEqual(groups, [
            [b"a/img.bin", b"a/img.copy", b"b/z.bin", b"c/z.bin", b"d/z.bin", b"d/zz.bin"],
            [b"e/s.jpg", b"f/t.jpg"]])
        self.verify(out, src)
        mnt = tempfile.mkdtemp(prefix="mnt-", dir=self.tmp)
        with tl.Mount(os.path.join(out, "index"), mnt):
            p = tl.run_shardfs("verify", "--mounted", mnt, src, "--full")
            got = tl.walk_reference(mnt)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(got[b"d/zz.bin"].nlink, 6)
        self.assertEqual(got[b"d/zz.bin"].sha256, ref[b"a/img.bin"].sha256)

    # -- 3. Files pack did not write ------------------------------------------

    def test_foreign_shard_named_file_is_never_deleted_without_force(self):
        src = os.path.join(self.tmp, "src")
        write(os.path.join(src, "a.jpg"), 100)
        out = os.path.join(self.tmp, "out")
        os.mkdir(out)
        tl._write(os.path.join(out, "train-000042.tar"), b"someone else's shard")
        tl._write(os.path.join(out, "notes.txt"), b"notes")
        before = sorted(os.listdir(out))
        p = pack(src, out, check=1)
        err = p.stderr.decode()
        self.assertIn("train-000042.tar", err)
        self.assertIn("--force", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertEqual(sorted(os.listdir(out)), before, "nothing written")
        with open(os.path.join(out, "train-000042.tar"), "rb") as f:
            self.assertEqual(f.read(), b"someone else's shard")
        # A leftover NAME.tmp is not ours either.
        os.unlink(os.path.join(out, "train-000042.tar"))
        tl._write(os.path.join(out, "train-000000.tar.tmp"), b"tmp")
        p = pack(src, out, check=1)
        self.assertIn("train-000000.tar.tmp", p.stderr.decode())
        self.assertTrue(os.path.exists(os.path.join(out, "train-000000.tar.tmp")))
        # --force replaces only an earlier output: with notes.txt there it
        # refuses, naming it, and changes nothing ...
        tl._write(os.path.join(out, "train-000042.tar"), b"someone else's shard")
        before = sorted(os.listdir(out))
        p = pack(src, out, "--force", check=1)
        self.assertIn("notes.txt: not written by shardfs pack", p.stderr.decode())
        self.assertEqual(sorted(os.listdir(out)), before)
        # ... and a file named like a shard is not pack's either, with
        # nothing else beside it: refused, named, kept.
        os.unlink(os.path.join(out, "notes.txt"))
        before = sorted(os.listdir(out))
        p = pack(src, out, "--force", check=1)
        err = p.stderr.decode()
        self.assertIn("not written by shardfs pack", err)
        self.assertIn("train-000042.tar", err)
        self.assertEqual(sorted(os.listdir(out)), before)
        with open(os.path.join(out, "train-000042.tar"), "rb") as f:
            self.assertEqual(f.read(), b"someone else's shard")
        # Once the user has moved them away, the pack goes ahead.
        for name in before:
            os.unlink(os.path.join(out, name))
        pack(src, out, "--force")
        self.assertEqual(sorted(os.listdir(out)), ["index", "train-000000.tar"])
        self.verify(out, src)


if __name__ == "__main__":
    tl.main()
