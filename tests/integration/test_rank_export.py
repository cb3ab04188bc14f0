#!/usr/bin/env python3
"""`shardfs view export --format index [--rank K --world N]`: a view, or one
rank's share of it, as an index of its own. Each export, mounted, must show
exactly what a mount of the source index with the same view and rank shows
(names, types, modes, owners, mtimes, content, file link counts), hold the
same number of samples as every other rank's, name only shards of the
source, and the shares of all ranks must be the view but for the trimmed
samples."""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402


class RankExportTest(tl.ScratchTestCase):
    PREFIX = "shardfs-rank-export-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        src = os.path.join(cls.tmp, "src")
        rnd = random.Random(9)
        for c in range(6):
            os.makedirs(os.path.join(src, "class%d" % c, "sub"))
        for i in range(90):
            p = os.path.join(src, "class%d" % (i % 6), "sub" if i % 5 == 0 else "",
                             "s%04d.bin" % i)
            with open(p, "wb") as f:
                f.write(rnd.randbytes(rnd.randrange(0, 20000)))
            os.utime(p, ns=(1_500_000_000 * 10**9 + i, 1_500_000_000 * 10**9 + i))
        os.link(os.path.join(src, "class0", "s0006.bin"), os.path.join(src, "class0", "again"))
        os.symlink("s0006.bin", os.path.join(src, "class0", "link"))
        cls.shards = tl.tar_into_shards(src, cls.tmp, 3)
        cls.idx = os.path.join(cls.tmp, "idx")
        tl.build_index(cls.shards, cls.idx, check=0)
        renames = tl.write_lines(os.path.join(cls.tmp, "renames"),
                                 ["class2\trenamed/deeper", "class3/sub\tclass0/moved"])
        tl.view_create(cls.idx, "cut", "--exclude", "class1", "--exclude", "*7.bin",
                       "--rename-map", renames, check=0)
        cls.mnt = os.path.join(cls.tmp, "mnt")
        os.mkdir(cls.mnt)

    def walk(self, idx, options=None):
        with tl.Mount(idx, self.mnt, options=options):
            return tl.walk_reference(self.mnt)

    def same(self, want, got, what):
        self.assertEqual(sorted(got), sorted(want), what)
        for p, w in want.items():
            g = got[p]
            label = "%s %r" % (what, p)
            self.assertEqual((g.type, g.mode, g.uid, g.gid, g.mtime_ns, g.target, g.sha256),
                             (w.type, w.mode, w.uid, w.gid, w.mtime_ns, w.target, w.sha256), label)
            if w.type != "dir":
                self.assertEqual((g.size, g.nlink), (w.size, w.nlink), label)

    def export(self, out, *args, check=0):
        return tl.run_shardfs("view", "export", self.idx, "cut", "--format", "index",
                              "--out", out, *args, check=check)

    def shards_of(self, idx):
        _, shards = tl.index_info(idx)
        return [s["shard"] for s in shards]

    def test_each_rank_exported_is_that_rank_mounted(self):
        whole = self.walk(self.idx, "view=cut")
        rank_of, q, n = tl.rank_split(self.idx, len(self.shards), 3, view="cut")
        self.assertEqual(set(rank_of), {p for p, e in whole.items() if e.type == "file"})
        files = set()
        for k in range(3):
            out = os.path.join(self.tmp, "rank%d.idx" % k)
            self.export(out, "--rank", str(k), "--world", "3")
            want = self.walk(self.idx, "view=cut,rank=%d,world=3" % k)
            got = self.walk(out)
            self.same(want, got, "rank %d" % k)
            mine = {p for p, e in got.items() if e.type == "file"}
            self.assertFalse(files & mine, "a file in two ranks' exports")
            self.assertEqual(len(tl.samples_of(mine)), q, "rank %d: samples" % k)
            files |= mine
            # Only shards of the source, each as the source indexed it.
            self.assertTrue(set(self.shards_of(out)) <= set(self.shards))
        trimmed = {p for p, k in rank_of.items() if k is None}
        self.assertEqual(len(tl.samples_of(trimmed)), n - 3 * q)
        self.assertFalse(files & trimmed, "a trimmed file exported")
        self.assertEqual(files | trimmed, set(rank_of), "the exports and the trimmed: the view")

    def test_a_whole_view_exported(self):
        out = os.path.join(self.tmp, "cut.idx")
        self.export(out)
        self.same(self.walk(self.idx, "view=cut"), self.walk(out), "view cut")
        info, _ = tl.index_info(out)
        self.assertIn("view export", json.dumps(info))
        # An existing index is replaced with --force only.
        self.export(out, check=1)
        self.export(out, "--force")

    def test_usage_errors(self):
        out = os.path.join(self.tmp, "never")
        for args in (["--rank", "1"], ["--world", "2"], ["--rank", "2", "--world", "2"]):
            self.export(out, *args, check=2)
        tl.run_shardfs("view", "export", self.idx, "cut", "--format", "index", check=2)
        tl.run_shardfs("view", "export", self.idx, "cut", "--format", "keys", "--world", "2",
                       check=2)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    tl.main()
