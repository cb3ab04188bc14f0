#!/usr/bin/env python3
"""Partitioned indexes: `shardfs index manifest` over indexes built on parts
of a shard list reads as one tree, the tree GNU tar extracts from all the
shards in order (index/manifest.h, "The union"). Also: what the union
refuses, rank mounts of equal runs of samples, stale and damaged
manifests, and the commands that take a manifest where they take an index."""
import os
import random
import shutil
import subprocess
import sys
import unittest

import shardfs_testlib as tl
from test_tar_semantics import T0, archive, d, f, indexed, link, sym, tar_extract


def write(path, data):
    with open(path, "wb") as fh:
        fh.write(data)
    return path


class ManifestTest(tl.ScratchTestCase):
    PREFIX = "shardfs-manifest-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()

    def build_parts(self, base, shards, groups):
        """One index per group of shard indexes, then a manifest of them."""
        parts = []
        for i, g in enumerate(groups):
            p = os.path.join(base, "part-%d" % i)
            tl.build_index([shards[j] for j in g], p)
            parts.append(p)
        man = os.path.join(base, "dataset.manifest")
        r = tl.run_shardfs("index", "manifest", "--out", man, *parts)
        return man, parts, r

    def compare(self, want, got, dir_mtimes=True):
        tl.assert_same_tree(self, want, got, dir_mtimes=dir_mtimes)

    def check(self, shard_data, groups, kernel=False):
        """Shards -> GNU tar extraction (the oracle) and partitions ->
        manifest; the manifest's listing and its FUSE mount equal the
        extraction (and, for the mtimes of directories no member describes,
        a single index of all the shards). Returns (base, manifest, parts,
        shard paths)."""
        base = self.scratch("case")
        shards = [write(os.path.join(base, "s%02d.tar" % i), data)
                  for i, data in enumerate(shard_data)]
        x = os.path.join(base, "x")
        os.mkdir(x)
        tar_extract(shards, x)
        want = tl.walk_reference(x)
        del want[b""]
        man, parts, r = self.build_parts(base, shards, groups)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        single = os.path.join(base, "single")
        tl.build_index(shards, single)
        self.compare(want, indexed(man), dir_mtimes=False)
        self.compare(indexed(single), indexed(man))
        want = tl.walk_reference(x)  # Dirs' mtimes as the single index has them.
        del want[b""]
        for p, e in indexed(single).items():
            if e.type == "dir":
                want[p] = want[p]._replace(mtime_ns=e.mtime_ns)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with tl.Mount(man, mnt):
            got = tl.walk_reference(mnt)
        del got[b""]
        self.compare(want, got)
        if kernel:
            kmnt = os.path.join(base, "kmnt")
            os.mkdir(kmnt)
            with tl.KernelMount(man, kmnt, cache_dir=os.path.join(base, "images")):
                got = tl.walk_reference(kmnt)
            del got[b""]
            self.compare(want, got)
        return base, man, parts, shards

    def image_folder_shards(self, n_shards=8, classes=6, per_class=25, seed=3):
        rnd = random.Random(seed)
        files = [("train/c%02d/%03d.jpg" % (c, i), bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 3000))),
                  T0 + rnd.randint(0, 10**6))
                 for c in range(classes) for i in range(per_class)]
        rnd.shuffle(files)
        shards = [[] for _ in range(n_shards)]
        for i, fl in enumerate(files):
            shards[i % n_shards].append(f(fl[0], fl[1], mtime=fl[2]))
        return [archive(*s) for s in shards]

    # -- The union equals GNU tar's extraction of every shard in order --------

    def test_image_folder_over_four_partitions(self):
        shards = self.image_folder_shards()
        self.check(shards, [[0, 1], [2, 3], [4, 5], [6, 7]], kernel=True)

    def test_one_partition_per_shard_and_one_for_all(self):
        shards = self.image_folder_shards(n_shards=5, classes=3, per_class=10, seed=9)
        self.check(shards, [[i] for i in range(5)])
        self.check(shards, [list(range(5))])

    def test_directories_described_in_some_partitions(self):
        # An explicit directory member wins over implied copies, the last
        # explicit one over earlier ones; an implied directory takes the
        # mtime of its newest child across partitions.
        self.check([
            archive(d("a", mode=0o700, mtime=T0 + 1, uid=7), f("a/x", "1", mtime=T0 + 2),
                    f("b/y", "2", mtime=T0 + 30)),
            archive(f("a/z", "3", mtime=T0 + 3), f("b/w", "4", mtime=T0 + 50)),
            archive(d("a", mode=0o750, mtime=T0 + 4, gid=9), f("c/v", "5", mtime=T0 + 6)),
            archive(f("b/deep/er/u", "6", mtime=T0 + 70), d("c", mode=0o711, mtime=T0 + 8)),
        ], [[0], [1], [2], [3]])

    def test_later_partitions_replace_files_and_empty_directories(self):
        self.check([
            archive(f("k/same", "old", mtime=T0 + 1), sym("k/link", "old-target"),
                    d("k/empty", mode=0o700), f("k/was_file", "f"), f("k/stay", "s")),
            archive(f("k/same", "newer", mtime=T0 + 2), f("k/empty", "now a file"),
                    d("k/was_file", mode=0o751), sym("k/link", "new-target")),
            archive(f("k/same", "newest", mtime=T0 + 3)),
        ], [[0], [1], [2]])

    def test_hard_links_lose_a_name_to_a_later_partition(self):
        # Two names of one inode in partition 0; partition 1 replaces one of
        # them: the other keeps the content with one link left.
        self.check([
            archive(f("h/a", "shared"), link("h/b", "h/a"), link("h/c", "h/a"), f("h/z", "z")),
            archive(f("h/a", "replaced"), f("h/c", "replaced too")),
        ], [[0], [1]])

    def test_a_file_over_a_directory_with_entries_is_dropped(self):
        base, man, _, _ = self.check([
            archive(f("n/full/x", "x")),
            archive(f("n/full", "a file where a directory with entries is")),
        ], [[0], [1]])
        r = tl.run_shardfs("index", "manifest", "--force", "--out", man,
                           os.path.join(base, "part-0"), os.path.join(base, "part-1"), check=0)
        self.assertRegex(r.stderr.decode(), r"1 entr\(ies\) dropped.*\n.*'n/full'")

    # -- What the union refuses ----------------------------------------------

    def test_a_directory_with_entries_over_a_file_is_refused(self):
        base = self.scratch("conflict")
        shards = [write(os.path.join(base, "s0.tar"), archive(f("z", "file"))),
                  write(os.path.join(base, "s1.tar"), archive(f("z/q", "below")))]
        man, _, r = self.build_parts(base, shards, [[0], [1]])
        self.assertEqual(r.returncode, 1)
        err = r.stderr.decode()
        self.assertIn("'z' is a file in partition 0", err)
        self.assertIn("a dir in partition 1", err)
        self.assertFalse(os.path.exists(man), "a refused manifest must not be written")

    def test_a_shard_in_two_partitions_and_bad_parts_are_refused(self):
        base = self.scratch("dup")
        s = write(os.path.join(base, "s.tar"), archive(f("a", "1")))
        for name in ("p0", "p1"):
            tl.build_index([s], os.path.join(base, name))
        man = os.path.join(base, "m")
        r = tl.run_shardfs("index", "manifest", "--out", man, os.path.join(base, "p0"),
                           os.path.join(base, "p1"), check=1)
        self.assertIn("is in partition 0", r.stderr.decode())
        junk = write(os.path.join(base, "junk"), b"not an index")
        r = tl.run_shardfs("index", "manifest", "--out", man, junk, check=1)
        self.assertIn(junk, r.stderr.decode())
        # --force replaces a manifest, never another file.
        tl.run_shardfs("index", "manifest", "--out", man, os.path.join(base, "p0"), check=0)
        tl.run_shardfs("index", "manifest", "--out", man, os.path.join(base, "p0"), check=1)
        tl.run_shardfs("index", "manifest", "--force", "--out", man, os.path.join(base, "p0"),
                       check=0)
        r = tl.run_shardfs("index", "manifest", "--force", "--out", junk,
                           os.path.join(base, "p0"), check=1)
        self.assertIn("not a shardfs manifest", r.stderr.decode())
        with open(junk, "rb") as fh:
            self.assertEqual(fh.read(), b"not an index")
        # A manifest is not a partition.
        r = tl.run_shardfs("index", "manifest", "--out", os.path.join(base, "m2"), man, check=1)
        self.assertIn("a manifest", r.stderr.decode())
        # index add takes an index, not a manifest: refused by name, the manifest unchanged.
        with open(man, "rb") as fh:
            before = fh.read()
        extra = write(os.path.join(base, "extra.tar"), archive(f("b", "2")))
        r = tl.run_shardfs("index", "add", man, extra, check=1)
        self.assertIn(f"index add {man}: a manifest", r.stderr.decode())
        with open(man, "rb") as fh:
            self.assertEqual(fh.read(), before)

    # -- Views ---------------------------------------------------------------

    def test_a_view_of_a_manifest_is_the_view_of_the_single_index(self):
        shards = self.image_folder_shards(n_shards=6, classes=4, per_class=12, seed=21)
        base, man, parts, paths = self.check(shards, [[0, 1], [2, 3], [4, 5]])
        single = os.path.join(base, "single")
        listed = write(os.path.join(base, "drop.txt"), b"train/c02/000.jpg\ntrain/c03/005.jpg\n")
        for idx in (man, single):
            tl.view_create(idx, "v", "--exclude", "c01", "--exclude-list", listed)
        self.assertEqual(tl.ls_tree(man, "v")[0], tl.ls_tree(single, "v")[0])
        self.assertEqual(tl.ls_tree(man, "v@1")[0], tl.ls_tree(single, "v@1")[0])
        self.assertNotIn(b"train/c01", tl.ls_tree(man, "v")[0])
        mnt = self.scratch("view")
        with tl.Mount(man, mnt, options="view=v"):
            got = tl.tree_of_dir(mnt)
        self.assertEqual(tl.without_content(got), tl.ls_tree(single, "v")[0])
        r = tl.run_shardfs("view", "ls", man, check=0)
        self.assertIn("v@1", r.stdout.decode())
        # A listed path that is in no partition is an error; a rename map is refused.
        missing = write(os.path.join(base, "missing.txt"), b"train/nope.jpg\n")
        r = tl.run_shardfs("view", "create", "--exclude-list", missing, man, "w", check=1)
        self.assertIn("missing.txt:1", r.stderr.decode())
        ren = write(os.path.join(base, "ren.txt"), b"train/c00\ttrain/zz\n")
        r = tl.run_shardfs("view", "create", "--rename-map", ren, man, "w", check=1)
        self.assertIn("--rename-map is not supported on a manifest", r.stderr.decode())

    # -- Stale and damaged manifests ------------------------------------------

    def test_a_rebuilt_partition_or_a_damaged_manifest_is_refused(self):
        shards = self.image_folder_shards(n_shards=4, classes=2, per_class=6, seed=5)
        base, man, parts, paths = self.check(shards, [[0, 1], [2, 3]])
        with open(man, "rb") as fh:
            good = fh.read()
        for name, bad in (("flip", good[:40] + bytes([good[40] ^ 1]) + good[41:]),
                          ("cut", good[:len(good) // 2])):
            damaged = write(os.path.join(base, name + ".manifest"), bad)
            r = tl.run_shardfs("ls", damaged, check=1)
            self.assertIn("manifest %s" % damaged, r.stderr.decode())
        shutil.rmtree(parts[1])
        tl.build_index(paths[2:], parts[1])
        r = tl.run_shardfs("ls", man, check=1)
        self.assertIn("changed since the manifest was made", r.stderr.decode())
        self.assertIn("part-1", r.stderr.decode())

    # -- Ranks -----------------------------------------------------------------

    def test_rank_mounts_split_the_unions_samples(self):
        # Equal runs of the union's samples (index/rank_partition.h), one
        # image each here: every rank n // world, no image on two ranks, the
        # rest trimmed; test_rank_split checks the runs against the rule.
        shards = self.image_folder_shards(n_shards=8, classes=4, per_class=30, seed=11)
        base, man, parts, _ = self.check(shards, [[i] for i in range(8)])
        everything = {p for p, e in indexed(man).items() if e.type == "file"}
        world = 7
        seen = set()
        for rank in range(world):
            mnt = self.scratch("rank%d" % rank)
            with tl.Mount(man, mnt, options="rank=%d,world=%d,seed=5" % (rank, world)):
                files = {p for p, e in tl.walk_reference(mnt).items() if e.type == "file"}
            self.assertEqual(len(files), len(everything) // world, "rank %d" % rank)
            self.assertFalse(files & seen, "rank %d: a file on two ranks" % rank)
            seen |= files
        self.assertTrue(seen <= everything)
        self.assertEqual(len(everything - seen), len(everything) % world, "trimmed")

if __name__ == "__main__":
    tl.main()
