#!/usr/bin/env python3
"""`shardfs pack` options: samples never split by --max-files or
--shard-size (read back with Python's tarfile, independent of the index),
--name, --exclude, --from-list and --follow-symlinks.
"""

import os
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402


class PackOptionsTest(tl.ScratchTestCase):
    PREFIX = "shardfs-pack-options-"

    # -- Samples and shard limits --------------------------------------------

    def check_samples(self, out, max_members=None, max_bytes=None):
        """Each sample (dir + name up to the first dot) lies in one shard, its
        members consecutive; shards keep the limits unless they hold a single
        sample. Read with tarfile, independent of the index."""
        where = {}
        for i, n in enumerate(tl.shards_of(out)):
            path = os.path.join(out, n)
            with tarfile.open(path) as tf:
                members = tf.getmembers()
            keys = []
            for m in members:
                if m.isdir():
                    keys.append(None)
                    continue
                d, b = os.path.split(m.name)
                keys.append((d, b.split(".", 1)[0]))
            samples = [k for k in keys if k is not None]
            for k in set(samples):
                self.assertNotIn(k, where, "sample %r split over shards %s and %d" % (
                    k, where.get(k), i))
                where[k] = i
                pos = [j for j, kk in enumerate(keys) if kk == k]
                self.assertEqual(pos, list(range(pos[0], pos[-1] + 1)),
                                 "sample %r not consecutive in %s" % (k, n))
            one_sample = len(set(samples)) <= 1
            if max_members is not None and not one_sample:
                self.assertLessEqual(len(members), max_members, n)
            if max_bytes is not None and not one_sample:
                self.assertLessEqual(os.path.getsize(path), max_bytes, n)
        return where

    def test_samples_never_split_max_files(self):
        src = tl.make_pack_samples(self.scratch("samples"))
        out = os.path.join(self.scratch("maxfiles"), "out")
        tl.pack(src, out, "--max-files", "4")
        where = self.check_samples(out, max_members=4)
        self.assertGreater(len(set(where.values())), 10)
        self.assertEqual(tl.run_shardfs("verify", os.path.join(out, "index"), src).returncode, 0)

    def test_samples_never_split_shard_size(self):
        src = tl.make_pack_samples(self.scratch("samples"))
        out = os.path.join(self.scratch("shardsize"), "out")
        tl.pack(src, out, "--shard-size", "16K", "--name", "part_%03d.tar")
        self.assertTrue(all(n.startswith("part_") for n in tl.shards_of(out)))
        where = self.check_samples(out, max_bytes=16 * 1024)
        # Over the limit: single samples only (checked above), among them the
        # 40000-byte one.
        big = [i for i, n in enumerate(tl.shards_of(out))
               if os.path.getsize(os.path.join(out, n)) > 16 * 1024]
        self.assertIn(where[("val", "big")], big)
        self.assertLess(len(big), len(tl.shards_of(out)) // 3)

    # -- Options ---------------------------------------------------------------

    def test_exclude_from_list_and_follow_symlinks(self):
        src = os.path.join(self.scratch("opts"), "src")
        os.makedirs(os.path.join(src, "keep", "cache"))
        os.makedirs(os.path.join(src, "other"))
        tl._write(os.path.join(src, "keep", "a.jpg"), b"a")
        tl._write(os.path.join(src, "keep", "a.tmp"), b"t")
        tl._write(os.path.join(src, "keep", "cache", "c"), b"c")
        tl._write(os.path.join(src, "other", "o"), b"o")
        os.symlink("../other/o", os.path.join(src, "keep", "to_file"))
        os.symlink("../other", os.path.join(src, "keep", "to_dir"))
        os.symlink("/etc", os.path.join(src, "keep", "outside"))
        os.symlink("..", os.path.join(src, "keep", "loop"))

        out = os.path.join(self.scratch("opts-out"), "out")
        tl.pack(src, out, "--exclude", "*.tmp", "--exclude", "keep/cache")
        paths = [e["path"] for e in tl.ls_json(os.path.join(out, "index"))]
        self.assertNotIn(b"keep/a.tmp", paths)
        self.assertNotIn(b"keep/cache", paths)
        self.assertIn(b"keep/a.jpg", paths)

        lst = os.path.join(self.tmp, "list.txt")
        with open(lst, "w") as f:
            f.write("keep/a.jpg\nother\nother/o\n")
        tl.pack(src, out, "--from-list", lst, "--force")
        self.assertEqual([e["path"] for e in tl.ls_json(os.path.join(out, "index"))],
                         [b"keep", b"other", b"keep/a.jpg", b"other/o"])
        with open(lst, "w") as f:
            f.write("keep/a.jpg\nnot/there\n")
        p = tl.pack(src, out, "--from-list", lst, "--force", check=1)
        self.assertIn(b"not/there: not found", p.stderr)

        p = tl.pack(src, out, "--follow-symlinks", "--force")
        self.assertIn(b"keep/outside: symlink kept", p.stderr)
        self.assertIn(b"keep/loop: symlink kept: following it would loop", p.stderr)
        e = {x["path"]: x for x in tl.ls_json(os.path.join(out, "index"))}
        self.assertEqual(e[b"keep/to_file"]["type"], "file")
        self.assertEqual(e[b"keep/to_file"]["inode"], e[b"other/o"]["inode"], "one file")
        self.assertEqual(e[b"keep/to_dir"]["type"], "dir")
        self.assertEqual(e[b"keep/to_dir/o"]["type"], "file")
        self.assertEqual(e[b"keep/outside"]["type"], "symlink")
        self.assertEqual(e[b"keep/loop"]["type"], "symlink")


if __name__ == "__main__":
    tl.main()
