#!/usr/bin/env python3
"""`--force` replaces only what shardfs wrote.

`index build --force` replaces a shardfs index or an empty directory, never
a directory of shards or anything else, and never an output that holds an
input; the index path names the old or the new index at every moment. An
index holding files shardfs did not write (a user's notes, a subdirectory)
is refused, the files named and left as they were, by `index build --force`
and `view export --format index --force` alike; `index manifest --force`
replaces a manifest only.
`pack --force` replaces only an earlier pack output, known by a pack's own
records (its index's maker, an interrupted pack's record), never by a name:
shards a user keeps beside their `index build` index, or a file named like a
shard, are refused and kept. It keeps the old output whole until
the new one is complete: a pack failing half-way (the test-only
SHARDFS_TEST_FAIL_AFTER_SHARDS hook, as a full disk) leaves the old output
as it was, and verify still passes on it. A user's file inside its index
(or inside an index.tmp-* directory) stops it too.
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402


def snapshot(root):
    """{relative path: bytes (files), link target (symlinks) or None (dirs)}."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = None
            else:
                with open(p, "rb") as f:
                    out[rel] = f.read()
    return out


class IndexAlwaysThere:
    """Watches `path/CURRENT` from a thread while the body runs: counts the
    times it was missing (an index path between two renames)."""

    def __init__(self, path):
        self.current = os.path.join(path, "CURRENT")
        self.missing = 0
        self.checks = 0
        self._stop = False

    def _watch(self):
        while not self._stop:
            self.checks += 1
            if not os.path.exists(self.current):
                self.missing += 1

    def __enter__(self):
        self._thread = threading.Thread(target=self._watch)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop = True
        self._thread.join()
        return False


class ForceSafetyTest(tl.ScratchTestCase):
    PREFIX = "shardfs-force-safety-"

    def make_shards(self, name):
        """name/shards: two tar shards and a README; returns (dir, shards)."""
        root = self.scratch(name)
        src = os.path.join(root, "src")
        os.makedirs(os.path.join(src, "a"))
        os.makedirs(os.path.join(src, "b"))
        for i in range(20):
            tl._write(os.path.join(src, "a", "f%02d.txt" % i), b"a%d" % i)
            tl._write(os.path.join(src, "b", "g%02d.txt" % i), os.urandom(300))
        shards = os.path.join(root, "shards")
        os.makedirs(shards)
        tars = [tl.tar_create(os.path.join(shards, "s-%d.tar" % i), src, [d])
                for i, d in enumerate(["a", "b"])]
        tl._write(os.path.join(shards, "README"), b"my shards, keep them\n")
        return shards, tars

    def assert_refused(self, p, *words):
        self.assertEqual(p.returncode, 1, p.stderr)
        err = p.stderr.decode()
        for w in words:
            self.assertIn(w, err)

    # -- index build --force ------------------------------------------------

    def test_index_force_refuses_the_shard_directory(self):
        shards, tars = self.make_shards("shard-dir")
        before = snapshot(shards)
        p = tl.build_index(tars, shards, "--force", check=None)
        self.assert_refused(p, shards, "holds no shardfs index")
        self.assertEqual(snapshot(shards), before, "the shards or the README changed")
        # The directory itself as the input, and with a trailing '/'.
        p = tl.build_index([shards], shards + "/", "--force", check=None)
        self.assert_refused(p, "holds no shardfs index")
        self.assertEqual(snapshot(shards), before)
        self.assertEqual(sorted(os.listdir(os.path.dirname(shards))), ["shards", "src"])

    def test_index_force_refuses_what_is_not_an_index(self):
        shards, tars = self.make_shards("unrelated")
        home = self.scratch("home")
        os.makedirs(os.path.join(home, "docs"))
        tl._write(os.path.join(home, "docs", "thesis.tex"), b"\\begin{document}")
        tl._write(os.path.join(home, ".bashrc"), b"alias ll='ls -l'")
        os.symlink("docs", os.path.join(home, "d"))
        plain = os.path.join(self.scratch("plain"), "file.idx")
        tl._write(plain, b"not an index")
        lone_db = os.path.join(self.scratch("db"), "cache")  # A directory with a CURRENT.
        os.makedirs(lone_db)
        tl._write(os.path.join(lone_db, "CURRENT"), b"MANIFEST-000001\n")
        for out in (home, plain, lone_db):
            before = snapshot(os.path.dirname(out))
            p = tl.build_index(tars, out, "--force", check=None)
            self.assert_refused(p, out, "--force replaces only a shardfs index")
            self.assertEqual(snapshot(os.path.dirname(out)), before, out)

    def test_index_force_refuses_an_index_holding_an_input(self):
        shards, tars = self.make_shards("holds-input")
        idx = os.path.join(self.scratch("holds-idx"), "idx")
        tl.build_index(tars, idx)
        inside = os.path.join(idx, "s-0.tar")
        with open(tars[0], "rb") as f, open(inside, "wb") as g:
            g.write(f.read())
        lst = os.path.join(idx, "list.txt")
        tl._write(lst, tars[1].encode() + b"\n")
        before = snapshot(idx)
        # Files shardfs did not write in an index: refused before anything
        # else is looked at, both named.
        p = tl.build_index([inside], idx, "--force", check=None)
        self.assert_refused(p, idx, "list.txt and s-0.tar, which shardfs did not write")
        p = tl.build_index([], idx, "--force", "--from-list", lst, check=None)
        self.assert_refused(p, "list.txt and s-0.tar")
        # Named through a symlink to the index, the input is still inside it.
        link = idx + "-link"
        os.symlink(idx, link)
        p = tl.build_index([os.path.join(link, "s-0.tar")], idx, "--force", check=None)
        self.assert_refused(p, "s-0.tar")
        self.assertEqual(snapshot(idx), before)
        # An input inside an index is refused as such, too: a shard named like
        # one of RocksDB's files.
        named_like_a_table = os.path.join(idx, "000099.sst")
        os.rename(inside, named_like_a_table)
        os.unlink(lst)
        before = snapshot(idx)
        p = tl.build_index([named_like_a_table], idx, "--force", check=None)
        self.assert_refused(p, "--out %s holds the input %s" % (idx, named_like_a_table))
        p = tl.build_index([os.path.join(link, "000099.sst")], idx, "--force", check=None)
        self.assert_refused(p, "holds the input")
        self.assertEqual(snapshot(idx), before)

    def test_index_force_replaces_an_index_in_one_step(self):
        shards, tars = self.make_shards("replace")
        parent = self.scratch("replace-idx")
        idx = os.path.join(parent, "idx")
        tl.build_index(tars[:1], idx)
        # Rebuilds over it while a thread checks that the path always holds
        # an index; a few seconds, or until one is caught missing.
        builds = 0
        with IndexAlwaysThere(idx) as w:
            end = time.monotonic() + 4
            while time.monotonic() < end and w.missing == 0:
                tl.build_index(tars[builds % 2:], idx, "--force")
                builds += 1
        self.assertEqual(w.missing, 0, "%s/CURRENT missing %d times in %d checks, %d builds" % (
            idx, w.missing, w.checks, builds))
        self.assertGreater(builds, 3)
        self.assertGreater(w.checks, builds)
        info, _ = tl.index_info(idx)
        self.assertEqual(info["shards"], 2 - (builds - 1) % 2)
        self.assertEqual(os.listdir(parent), ["idx"], "nothing left beside the index")
        # An empty directory is replaced too.
        empty = os.path.join(parent, "empty")
        os.mkdir(empty)
        tl.build_index(tars, empty, "--force")
        self.assertEqual(tl.index_info(empty)[0]["shards"], 2)
        self.assertEqual(sorted(os.listdir(parent)), ["empty", "idx"])

    def add_users_files(self, idx):
        """A user's notes and a subdirectory of theirs inside the index."""
        tl._write(os.path.join(idx, "notes.txt"), b"which shards went into this\n")
        os.makedirs(os.path.join(idx, "sub", "deeper"))
        tl._write(os.path.join(idx, "sub", "deeper", "keep.txt"), os.urandom(100))
        os.symlink("notes.txt", os.path.join(idx, "link"))

    def test_index_force_refuses_an_index_holding_a_users_files(self):
        shards, tars = self.make_shards("users")
        parent = self.scratch("users-idx")
        idx = os.path.join(parent, "idx")
        tl.build_index(tars[:1], idx)
        self.add_users_files(idx)
        before = snapshot(idx)
        # In memory and spilling (a bounded build), through the CLI's two
        # ways of naming the path.
        for extra in ([], ["--memory", "1M"], ["--jobs", "1"]):
            for out in (idx, idx + "/"):
                p = tl.build_index(tars, out, "--force", *extra, check=None)
                self.assert_refused(p, out, "notes.txt", "sub/", "link",
                                    "which shardfs did not write")
                self.assertEqual(snapshot(idx), before, "the user's files or the index changed")
                self.assertEqual(os.listdir(parent), ["idx"], "nothing left beside the index")
        # The old index still reads.
        self.assertEqual(tl.index_info(idx)[0]["shards"], 1)
        self.assertEqual({p.split(b"/")[0] for p in tl.index_entries(idx)}, {b"a"})
        # Moved out, the index is replaced, and nothing is left but the new one.
        os.unlink(os.path.join(idx, "notes.txt"))
        os.unlink(os.path.join(idx, "link"))
        os.rename(os.path.join(idx, "sub"), os.path.join(parent, "sub"))
        tl.build_index(tars, idx, "--force")
        self.assertEqual(tl.index_info(idx)[0]["shards"], 2)
        self.assertEqual(sorted(os.listdir(parent)), ["idx", "sub"])

    def test_view_export_force_refuses_an_index_holding_a_users_files(self):
        shards, tars = self.make_shards("export")
        parent = self.scratch("export-idx")
        src = os.path.join(parent, "src.idx")
        tl.build_index(tars, src)
        out = os.path.join(parent, "out.idx")
        export = ("view", "export", src, "default", "--format", "index", "--out", out)
        tl.run_shardfs(*export, check=0)
        self.add_users_files(out)
        before = snapshot(out)
        p = tl.run_shardfs(*export, "--force", check=None)
        self.assert_refused(p, out, "notes.txt", "sub/", "which shardfs did not write")
        self.assertEqual(snapshot(out), before)
        self.assertEqual(sorted(os.listdir(parent)), ["out.idx", "src.idx"])
        self.assertEqual(tl.index_info(out)[0]["shards"], 2)
        # A manifest's --force replaces a manifest only: not an index, not a
        # directory of the user's.
        for target in (out, os.path.join(out, "sub")):
            p = tl.run_shardfs("index", "manifest", "--force", "--out", target, src, check=None)
            self.assert_refused(p, target, "not a shardfs manifest")
            self.assertEqual(snapshot(out), before)

    # -- pack --force -------------------------------------------------------

    def make_src(self, name):
        src = os.path.join(self.scratch(name), "src")
        for d in range(3):
            os.makedirs(os.path.join(src, "d%d" % d))
            for i in range(30):
                tl._write(os.path.join(src, "d%d" % d, "s%03d.jpg" % i), os.urandom(2000))
                tl._write(os.path.join(src, "d%d" % d, "s%03d.cls" % i), b"%d" % (i % 5))
        return src

    def verify(self, out, src):
        v = tl.run_shardfs("verify", os.path.join(out, "index"), src)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_pack_force_failing_half_way_keeps_the_old_output(self):
        src = self.make_src("fail")
        parent = self.scratch("fail-out")
        out = os.path.join(parent, "out")
        tl.pack(src, out, "--shard-size", "64K")
        self.verify(out, src)
        before = snapshot(out)
        shards = tl.shards_of(out)
        self.assertGreater(len(shards), 4)
        # Smaller shards, so the new output would differ; it fails after two
        # of them.
        p = tl.pack(src, out, "--shard-size", "16K", "--force", check=1,
                    prefix=["env", "SHARDFS_TEST_FAIL_AFTER_SHARDS=2"])
        self.assertIn(b"SHARDFS_TEST_FAIL_AFTER_SHARDS=2", p.stderr)
        self.assertEqual(snapshot(out), before, "the old output changed")
        self.assertEqual(os.listdir(parent), ["out"], "nothing left beside the output")
        info, _ = tl.index_info(os.path.join(out, "index"))
        self.assertEqual(info["shards"], len(shards))
        self.verify(out, src)
        # Without the hook, --force replaces it; the old output is gone
        # whole, and the output path held an index throughout.
        with IndexAlwaysThere(os.path.join(out, "index")) as w:
            tl.pack(src, out, "--shard-size", "16K", "--force")
        self.assertEqual(w.missing, 0, "%s/index missing during pack --force" % out)
        self.verify(out, src)
        self.assertEqual(sorted(os.listdir(out)), sorted(["index"] + tl.shards_of(out)))
        self.assertGreater(len(tl.shards_of(out)), len(shards))
        self.assertEqual(os.listdir(parent), ["out"])

    def test_pack_force_removes_only_an_earlier_pack(self):
        src = self.make_src("only")
        out = os.path.join(self.scratch("only-out"), "out")
        tl.pack(src, out, "--name", "old-%d.tar", "--shard-size", "64K")
        old = tl.shards_of(out)
        # A file pack did not write: refused, with --force, nothing touched.
        tl._write(os.path.join(out, "notes.txt"), b"my notes")
        before = snapshot(out)
        p = tl.pack(src, out, "--force", check=1)
        self.assertIn(b"notes.txt", p.stderr)
        self.assertIn(b"not written by shardfs pack", p.stderr)
        self.assertEqual(snapshot(out), before)
        os.unlink(os.path.join(out, "notes.txt"))
        # An earlier pack under another --name: its index lists its shards,
        # so they go, with the index.
        tl.pack(src, out, "--force")
        new = tl.shards_of(out)
        self.assertTrue(all(n.startswith("train-") for n in new), new)
        self.assertEqual(sorted(os.listdir(out)), sorted(["index"] + new))
        self.assertTrue(old and not set(old) & set(new))
        self.verify(out, src)

    def test_pack_force_keeps_shards_an_index_build_indexed(self):
        """Shards a user keeps with their `index build` index beside them:
        no pack wrote them, whatever they are named, so --force removes
        nothing (it once took the index's shards for its own)."""
        src = self.make_src("beside")
        parent = self.scratch("beside-out")
        out = os.path.join(parent, "out")
        os.makedirs(out)
        # Named as pack names its own, so that no name tells them apart.
        tars = [tl.tar_create(os.path.join(out, "train-%06d.tar" % i), src, ["d%d" % i])
                for i in range(3)]
        tl.build_index(tars, os.path.join(out, "index"))
        before = snapshot(out)
        for extra in ((), ("--name", "other-%d.tar")):
            p = tl.pack(src, out, "--force", *extra, check=1)
            self.assert_refused(p, "train-000000.tar: not written by shardfs pack",
                                "index was made by shardfs index build, not by shardfs pack",
                                "remove the old output by hand, or choose another --out")
            self.assertEqual(snapshot(out), before, "the user's shards or index changed")
            self.assertEqual(os.listdir(parent), ["out"], "nothing left beside the output")
        # The index alone is refused too, naming it.
        for t in tars:
            os.rename(t, os.path.join(parent, os.path.basename(t)))
        before = snapshot(out)
        p = tl.pack(src, out, "--force", check=1)
        self.assert_refused(p, "out/index was made by shardfs index build")
        self.assertEqual(snapshot(out), before)

    def test_pack_force_keeps_a_users_file_named_like_a_shard(self):
        """Beside a pack's own output, a file no pack's record lists is not
        a pack's, though named like a shard; without it, --force replaces
        the earlier output whole, as ever."""
        src = self.make_src("named")
        parent = self.scratch("named-out")
        out = os.path.join(parent, "out")
        tl.pack(src, out, "--shard-size", "64K")
        old = tl.shards_of(out)
        mine = ["train-%06d.tar" % len(old), "train-000999.tar.tmp"]
        for n in mine:
            tl._write(os.path.join(out, n), b"the user's, named like a shard: " + n.encode())
        before = snapshot(out)
        p = tl.pack(src, out, "--force", "--shard-size", "16K", check=1)
        self.assert_refused(p, "out/%s: not written by shardfs pack (nor %s)" % tuple(mine))
        self.assertEqual(snapshot(out), before)
        self.assertEqual(os.listdir(parent), ["out"])
        self.verify(out, src)
        # Moved away, the earlier pack's own output is replaced.
        for n in mine:
            os.rename(os.path.join(out, n), os.path.join(parent, n))
        tl.pack(src, out, "--force", "--shard-size", "16K")
        new = tl.shards_of(out)
        self.assertGreater(len(new), len(old))
        self.assertEqual(sorted(os.listdir(out)), sorted(["index"] + new))
        self.assertEqual(sorted(os.listdir(parent)), sorted(["out"] + mine))
        self.verify(out, src)
        # A shard `index add` put into a pack's index is no pack's either.
        added = tl.tar_create(os.path.join(out, "added.tar"), src, ["d0"])
        tl.run_shardfs("index", "add", "--quiet", os.path.join(out, "index"), added, check=0)
        before = snapshot(out)
        p = tl.pack(src, out, "--force", check=1)
        self.assert_refused(p, "out/added.tar: not written by shardfs pack",
                            "index was made by shardfs pack, then changed by shardfs index add")
        self.assertEqual(snapshot(out), before)

    def test_pack_force_keeps_a_users_files_inside_the_index(self):
        src = self.make_src("inside")
        parent = self.scratch("inside-out")
        out = os.path.join(parent, "out")
        tl.pack(src, out, "--shard-size", "64K")
        index = os.path.join(out, "index")
        self.add_users_files(index)
        before = snapshot(out)
        p = tl.pack(src, out, "--force", check=1)
        for name in (b"index/notes.txt", b"not written by shardfs pack"):
            self.assertIn(name, p.stderr)
        self.assertEqual(snapshot(out), before, "the user's files or the output changed")
        self.assertEqual(os.listdir(parent), ["out"])
        self.verify(out, src)
        # The same in what looks like an interrupted publish's directory.
        for name in ("notes.txt", "link"):
            os.unlink(os.path.join(index, name))
        os.rename(os.path.join(index, "sub"), os.path.join(parent, "sub"))
        leftover = os.path.join(out, "index.tmp-somehost-1-0badf00d")
        os.makedirs(os.path.join(leftover, "mine"))
        tl._write(os.path.join(leftover, "mine", "data"), b"mine")
        tl._write(os.path.join(leftover, "000009.sst"), b"a table, say")
        before = snapshot(out)
        p = tl.pack(src, out, "--force", check=1)
        self.assertIn(b"index.tmp-somehost-1-0badf00d/mine/", p.stderr)
        self.assertEqual(snapshot(out), before)
        # Its own files only, and it is replaced.
        os.rename(os.path.join(leftover, "mine"), os.path.join(parent, "mine"))
        tl.pack(src, out, "--force")
        self.assertEqual(sorted(os.listdir(out)), sorted(["index"] + tl.shards_of(out)))
        self.assertEqual(sorted(os.listdir(parent)), ["mine", "out", "sub"])
        self.verify(out, src)

    def test_pack_force_refuses_a_directory_of_other_files(self):
        src = self.make_src("home")
        home = os.path.dirname(src)  # Holds the source tree, and more.
        tl._write(os.path.join(home, ".profile"), b"PATH=$PATH:~/bin")
        home_before = snapshot(home)
        p = tl.pack(src, home, "--force", check=1)
        self.assertIn(b"contains the source", p.stderr)
        p = tl.pack(src, home, check=1)
        self.assertIn(b"contains the source", p.stderr)
        self.assertEqual(snapshot(home), home_before)
        # Files of their own in a directory beside the source.
        docs = self.scratch("docs")
        os.makedirs(os.path.join(docs, "sub"))
        tl._write(os.path.join(docs, "sub", "a.txt"), b"a")
        tl._write(os.path.join(docs, "train-000000.tar"), b"not ours, named like ours")
        before = snapshot(docs)
        p = tl.pack(src, docs, "--force", check=1)
        self.assertIn(b"sub", p.stderr)
        self.assertEqual(snapshot(docs), before)
        # The output inside the source is refused, as before.
        p = tl.pack(src, os.path.join(src, "d0"), "--force", check=1)
        self.assertIn(b"inside the source", p.stderr)
        self.assertEqual(snapshot(home), home_before)


if __name__ == "__main__":
    tl.main()
