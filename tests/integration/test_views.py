#!/usr/bin/env python3
"""Named views and versions, end to end against the CLI contract:
`view create` with include/exclude globs and lists, rename maps and --from;
version numbers, tags, `view ls`/`view log` (text and JSON), `view rm`;
`ls`/`stat`/`index info --view`; `index add`; errors and their exit codes;
and the mounted tree of every version against the tree the contract's rules
give when applied here, in Python, to the source tree.

The reference model (`apply_view`, in shardfs_testlib.py) is written from
the contract alone; it never reads the code's own output."""

import datetime
import hashlib
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from shardfs_testlib import (apply_view, counts, diff_trees, ls_tree, tree_of_dir,  # noqa: E402
                             view_create, without_content, write_lines)

SUMMARY = re.compile(rb"^(\S+)@(\d+): (\d+) files, (\d+) dirs, (\d+) bytes "
                     rb"\(from (\S+): -(\d+) \+(\d+) ~(\d+)\)$")


def parse_summary(out):
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if len(lines) != 1:
        raise AssertionError("view create printed %d lines, expected 1: %r" % (len(lines), out))
    m = SUMMARY.match(lines[0])
    if not m:
        raise AssertionError("view create summary %r does not read "
                             "'NAME@N: F files, D dirs, B bytes (from SRC: -r +a ~m)'" % lines[0])
    g = m.groups()
    return {"name": g[0].decode(), "version": int(g[1]), "files": int(g[2]), "dirs": int(g[3]),
            "bytes": int(g[4]), "from": g[5].decode(), "removed": int(g[6]),
            "added": int(g[7]), "renamed": int(g[8])}


def make_dataset(root, seed=7):
    """root/src: a small image-folder dataset with sidecars, a README, empty
    directories, symlinks and nested docs, as 4 tar shards split by top-level
    entry. Returns (src, shard paths)."""
    rnd = random.Random(seed)
    src = os.path.join(root, "src")
    for cls in ("cat", "dog", "eel"):
        os.makedirs(os.path.join(src, "train", cls))
        for i in range(12):
            stem = os.path.join(src, "train", cls, "%s_%03d" % (cls, i))
            tl._write(stem + ".jpg", rnd.randbytes(rnd.randrange(200, 6000)))
            tl._write(stem + ".json", json.dumps({"cls": cls, "i": i}).encode())
    tl._write(os.path.join(src, "train", "README.txt"), b"train split\n")
    os.makedirs(os.path.join(src, "train", "empty_in_source"))
    os.makedirs(os.path.join(src, "val", "cat"))
    os.makedirs(os.path.join(src, "val", "dog"))
    for i in range(5):
        tl._write(os.path.join(src, "val", "cat", "v%d.jpg" % i), rnd.randbytes(900 + i))
        tl._write(os.path.join(src, "val", "dog", "v%d.jpg" % i), rnd.randbytes(1900 + i))
    os.makedirs(os.path.join(src, "meta", "deep", "er"))
    tl._write(os.path.join(src, "meta", "labels.txt"), b"cat\ndog\neel\n")
    tl._write(os.path.join(src, "meta", "deep", "er", "x.bin"), rnd.randbytes(70000))
    os.symlink("../train/README.txt", os.path.join(src, "meta", "readme_link"))
    os.symlink("nowhere/at/all", os.path.join(src, "meta", "dangling"))
    tl._write(os.path.join(src, "meta", "name with space.txt"), b"spaces\n")
    os.makedirs(os.path.join(src, "zz_empty_top"))
    shard_dir = os.path.join(root, "shards")
    os.mkdir(shard_dir)
    return src, tl.tar_into_shards(src, shard_dir, 4)


class ViewsCase(tl.ScratchTestCase):
    """One index of make_dataset for the class; each test names its own views."""
    PREFIX = "shardfs-views-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.src, cls.shards = make_dataset(cls.tmp)
        cls.idx = os.path.join(cls.tmp, "data.idx")
        tl.build_index(cls.shards, cls.idx)
        cls.tree = tree_of_dir(cls.src)

    def check_mounted(self, spec, want, idx=None, extra_opts=""):
        """Mounts `spec` (None: no view option) and compares the whole tree,
        contents by sha256, with `want`."""
        mnt = self.scratch("mnt")
        opts = ("view=" + spec if spec is not None else "") + extra_opts
        with tl.Mount(idx or self.idx, mnt, options=opts or None):
            got = tree_of_dir(mnt)
        self.assertEqual(got, want, "mounted %s differs from the expected tree:\n%s" % (
            spec, diff_trees(want, got)))

    def check_listed(self, spec, want, idx=None):
        got, inodes = ls_tree(idx or self.idx, spec)
        want = without_content(want)
        self.assertEqual(got, want, "ls -R --view %s differs from the expected tree:\n%s" % (
            spec, diff_trees(want, got)))
        return inodes


class ViewCreateTest(ViewsCase):

    def test_default_is_the_whole_tree(self):
        self.check_mounted(None, self.tree)
        self.check_mounted("default", self.tree)
        self.check_mounted("default@1", self.tree)
        self.check_listed("default@1", self.tree)
        p = tl.run_shardfs("view", "ls", "--json", self.idx, check=0)
        views = {v["name"]: v for v in json.loads(p.stdout)["views"]}
        self.assertIn("default", views)
        self.assertEqual(views["default"]["latest"], 1)
        self.assertEqual(views["default"]["versions"], 1)

    def test_exclude_list_and_versions(self):
        bad = self.scratch("lists")
        lst = write_lines(os.path.join(bad, "bad.txt"), [
            "train/cat/cat_003.jpg", "./train/dog/dog_007.json", "", "/val/dog",
            "train/eel/eel_000.jpg", "train/eel/eel_000.json"])
        out = view_create(self.idx, "clean", "--exclude-list", lst, "-m", "drop bad").stdout
        want1 = apply_view(self.tree, exclude_list=[
            "train/cat/cat_003.jpg", "train/dog/dog_007.json", "val/dog",
            "train/eel/eel_000.jpg", "train/eel/eel_000.json"])
        self.assertNotIn(b"val/dog", want1)
        s = parse_summary(out)
        self.assertEqual((s["name"], s["version"]), ("clean", 1))
        c = counts(want1)
        self.assertEqual((s["files"], s["dirs"], s["bytes"]), (c["files"], c["dirs"], c["bytes"]),
                         out)
        self.assertEqual(s["from"], "default@1", out)
        self.assertEqual((s["added"], s["renamed"]), (0, 0), out)
        self.assertGreater(s["removed"], 0, out)
        self.check_mounted("clean@1", want1)
        inodes1 = self.check_listed("clean@1", want1)
        _, base_inodes = ls_tree(self.idx, "default@1")
        for p, ino in inodes1.items():
            self.assertEqual(ino, base_inodes[p], "%r: a view keeps the file's inode" % p)

        # A second version from the first: numbered 2, the first unchanged.
        out = view_create(self.idx, "clean", "--from", "clean@1", "--exclude", "*.json").stdout
        want2 = apply_view(want1, excludes=["*.json"])
        s = parse_summary(out)
        self.assertEqual((s["version"], s["from"]), (2, "clean@1"), out)
        self.check_mounted("clean@2", want2)
        self.check_mounted("clean", want2)  # Bare name: the latest.
        self.check_mounted("clean@1", want1)
        # A third with no --from starts again from default.
        out = view_create(self.idx, "clean", "--exclude", "meta").stdout
        s = parse_summary(out)
        self.assertEqual((s["version"], s["from"]), (3, "default@1"), out)
        self.check_listed("clean@3", apply_view(self.tree, excludes=["meta"]))
        self.check_listed("clean@2", want2)

    def test_globs(self):
        # Without '/': any component's name, a directory's subtree with it.
        want = apply_view(self.tree, excludes=["*.json", "d?g"])
        self.assertNotIn(b"train/dog", want)
        self.assertIn(b"train/empty_in_source", want)
        view_create(self.idx, "g1", "--exclude", "*.json", "--exclude", "d?g")
        self.check_mounted("g1@1", want)
        # With '/': the whole path; '*' does not cross '/'.
        want = apply_view(self.tree, excludes=["train/*/*_00[0-4].jpg", "*/README.txt"])
        self.assertIn(b"train/cat/cat_005.jpg", want)
        self.assertNotIn(b"train/cat/cat_004.jpg", want)
        view_create(self.idx, "g2", "--exclude", "train/*/*_00[0-4].jpg",
                    "--exclude", "*/README.txt")
        self.check_mounted("g2@1", want)
        # '*' with '/' does not reach two levels down: nothing excluded here.
        view_create(self.idx, "g3", "--exclude", "train/*.jpg")
        self.check_listed("g3@1", self.tree)

    def test_includes(self):
        # Includes keep matches and their ancestors; empty source directories
        # not included go; a directory matched itself keeps its subtree.
        incs = ["cat", "meta/deep"]
        want = apply_view(self.tree, includes=incs)
        self.assertNotIn(b"train/empty_in_source", want)
        self.assertNotIn(b"zz_empty_top", want)
        self.assertIn(b"val/cat/v0.jpg", want)
        self.assertIn(b"meta/deep/er/x.bin", want)
        self.assertNotIn(b"meta/labels.txt", want)
        view_create(self.idx, "inc1", "--include", "cat", "--include", "meta/deep")
        self.check_mounted("inc1", want)
        # Include list plus glob, then excludes; a directory the filters empty goes.
        lists = self.scratch("lists")
        il = write_lines(os.path.join(lists, "keep.txt"), ["train/eel", "./zz_empty_top",
                                                            "meta/readme_link"])
        want = apply_view(self.tree, includes=["*.txt"],
                          include_list=["train/eel", "zz_empty_top", "meta/readme_link"],
                          excludes=["eel_*"])
        self.assertNotIn(b"train/eel", want)  # Emptied by the filters.
        self.assertIn(b"zz_empty_top", want)  # Listed itself.
        self.assertIn(b"meta/readme_link", want)
        self.assertIn(b"train/README.txt", want)
        view_create(self.idx, "inc2", "--include", "*.txt", "--include-list", il,
                    "--exclude", "eel_*")
        self.check_mounted("inc2", want)

    def test_rename_map(self):
        lists = self.scratch("lists")
        rm = os.path.join(lists, "renames.tsv")
        pairs = [("train/cat/cat_000.jpg", "renamed/new/parents/first.jpg"),
                 ("./val/dog", "val/hound"),
                 ("meta/name with space.txt", "/meta/no_space.txt")]
        with open(rm, "wb") as f:
            for a, b in pairs:
                f.write(("%s\t%s\n" % (a, b)).encode())
            f.write(b"\n")
        view_create(self.idx, "ren", "--exclude", "*.json", "--rename-map", rm)
        want = apply_view(self.tree, excludes=["*.json"], renames=pairs)
        self.assertIn(b"renamed/new/parents/first.jpg", want)
        self.assertIn(b"val/hound/v3.jpg", want)
        self.check_mounted("ren@1", want)
        inodes = self.check_listed("ren@1", want)
        _, base = ls_tree(self.idx, "default@1")
        self.assertEqual(inodes[b"renamed/new/parents/first.jpg"], base[b"train/cat/cat_000.jpg"])
        self.assertEqual(inodes[b"val/hound/v3.jpg"], base[b"val/dog/v3.jpg"])
        # stat and ls through the view use the view's names.
        p = tl.run_shardfs("stat", "--json", "--view", "ren", self.idx,
                           "renamed/new/parents/first.jpg", check=0)
        o = tl.json_lines(p.stdout)[0]
        self.assertEqual(o["size"], self.tree[b"train/cat/cat_000.jpg"][1])
        p = tl.run_shardfs("stat", "--view", "ren", self.idx, "train/cat/cat_000.jpg")
        self.assertEqual(p.returncode, 1, p.stderr)
        p = tl.run_shardfs("ls", "--view", "ren@1", self.idx, "val", check=0)
        self.assertEqual(sorted(ln.split()[-1] for ln in p.stdout.splitlines() if ln.strip()),
                         [b"cat", b"hound"])  # ls -l lines: the name last.

    def test_index_info_view(self):
        view_create(self.idx, "info", "--exclude", "val")
        want = counts(apply_view(self.tree, excludes=["val"]))
        info = json.loads(tl.run_shardfs("index", "info", "--json", "--view", "info@1",
                                         self.idx, check=0).stdout.splitlines()[0])
        for k in ("files", "dirs", "symlinks", "bytes"):
            self.assertEqual(info[k], want[k], "index info --view info@1: %s" % k)
        base = json.loads(tl.run_shardfs("index", "info", "--json", self.idx,
                                         check=0).stdout.splitlines()[0])
        full = counts(self.tree)
        for k in ("files", "dirs", "symlinks", "bytes"):
            self.assertEqual(base[k], full[k], "index info (default): %s" % k)
        text = tl.run_shardfs("index", "info", "--view", "info", self.idx, check=0).stdout
        self.assertIn(b"info@1", text)


class TagsLogRmTest(ViewsCase):

    def test_tags_ls_log_rm(self):
        view_create(self.idx, "t", "--exclude", "*.json", "-m", "first version")
        view_create(self.idx, "t", "--exclude", "val", "-m", "second: no val")
        view_create(self.idx, "t", "--exclude", "train", "-m", "third")
        w1 = apply_view(self.tree, excludes=["*.json"])
        w2 = apply_view(self.tree, excludes=["val"])
        tl.run_shardfs("view", "tag", self.idx, "t@1", "stable", check=0)
        tl.run_shardfs("view", "tag", self.idx, "t@2", "exp-2.b", check=0)
        self.check_mounted("t@stable", w1)
        self.check_listed("t@exp-2.b", w2)
        # A tag moves only with --force; a numeric tag is refused.
        p = tl.run_shardfs("view", "tag", self.idx, "t@2", "stable")
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.check_listed("t@stable", w1)
        p = tl.run_shardfs("view", "tag", self.idx, "t@2", "7")
        self.assertNotEqual(p.returncode, 0, "a numeric tag must be refused")
        p = tl.run_shardfs("view", "tag", self.idx, "t@9", "nine")
        self.assertEqual(p.returncode, 1, p.stderr)

        # view ls
        ls = json.loads(tl.run_shardfs("view", "ls", "--json", self.idx, check=0).stdout)
        views = {v["name"]: v for v in ls["views"]}
        self.assertEqual({k: views["t"].get(k) for k in ("name", "latest", "versions", "tags")},
                         {"name": "t", "latest": 3, "versions": 3,
                          "tags": {"stable": 1, "exp-2.b": 2}})
        self.assertEqual(views["default"]["latest"], 1)
        text = tl.run_shardfs("view", "ls", self.idx, check=0).stdout.decode()
        names = [ln.split()[0] for ln in text.splitlines() if ln.strip()]
        self.assertIn("t", names, text)
        self.assertIn("default", names, text)
        tline = [ln for ln in text.splitlines() if ln.split() and ln.split()[0] == "t"][0]
        self.assertIn("stable", tline)

        # view log: newest first, counts, source, tags, message.
        log = json.loads(tl.run_shardfs("view", "log", "--json", self.idx, "t", check=0).stdout)
        self.assertEqual(log["name"], "t")
        self.assertEqual([v["version"] for v in log["versions"]], [3, 2, 1])
        v3, v2, v1 = log["versions"]
        self.assertEqual(v1["message"], "first version")
        self.assertEqual(v2["message"], "second: no val")
        self.assertEqual(v1["from"], "default@1")
        self.assertEqual(v1["tags"], ["stable"])
        self.assertEqual(v3["tags"], [])
        c1 = counts(w1)
        for k in ("files", "dirs", "symlinks", "bytes"):
            self.assertEqual(v1[k], c1[k], "view log --json t: version 1 %s" % k)
        for v in log["versions"]:
            created = datetime.datetime.fromisoformat(v["created"].replace("Z", "+00:00"))
            now = datetime.datetime.now(datetime.timezone.utc)
            if created.tzinfo is None:
                created = created.replace(tzinfo=datetime.timezone.utc)
            self.assertLess(abs((now - created).total_seconds()), 3600, v["created"])
        text = tl.run_shardfs("view", "log", self.idx, "t", check=0).stdout.decode()
        lines = [ln for ln in text.splitlines() if ln.strip()]
        self.assertEqual([ln.split()[0] for ln in lines], ["t@3", "t@2", "t@1"], text)
        self.assertIn("%d files" % c1["files"], lines[2])
        self.assertIn("%d bytes" % c1["bytes"], lines[2])
        self.assertIn("from default@1", lines[2])
        self.assertIn("stable", lines[2])
        self.assertTrue(lines[2].rstrip().endswith("first version"), lines[2])
        dlog = json.loads(tl.run_shardfs("view", "log", "--json", self.idx, "default",
                                         check=0).stdout)
        self.assertEqual([v["version"] for v in dlog["versions"]], [1])
        self.assertEqual(dlog["versions"][0]["files"], counts(self.tree)["files"])

        # view rm of one version: its tag goes, the others stay mountable.
        tl.run_shardfs("view", "rm", self.idx, "t@1", check=0)
        p = tl.run_shardfs("ls", "--view", "t@1", self.idx)
        self.assertEqual(p.returncode, 1)
        p = tl.run_shardfs("ls", "--view", "t@stable", self.idx)
        self.assertEqual(p.returncode, 1)
        self.check_mounted("t@2", w2)
        ls = json.loads(tl.run_shardfs("view", "ls", "--json", self.idx, check=0).stdout)
        views = {v["name"]: v for v in ls["views"]}
        self.assertEqual(views["t"]["versions"], 2)
        self.assertEqual(views["t"]["latest"], 3)
        self.assertEqual(views["t"]["tags"], {"exp-2.b": 2})
        # The whole view.
        tl.run_shardfs("view", "rm", self.idx, "t", check=0)
        ls = json.loads(tl.run_shardfs("view", "ls", "--json", self.idx, check=0).stdout)
        self.assertNotIn("t", {v["name"] for v in ls["views"]})
        p = tl.run_shardfs("ls", "--view", "t@2", self.idx)
        self.assertEqual(p.returncode, 1)
        # default cannot be removed.
        for spec in ("default", "default@1"):
            p = tl.run_shardfs("view", "rm", self.idx, spec)
            self.assertNotEqual(p.returncode, 0, "view rm %s must be refused" % spec)
        self.check_mounted("default@1", self.tree)

    def test_rm_keeps_running_mount(self):
        view_create(self.idx, "live", "--exclude", "train")
        want = apply_view(self.tree, excludes=["train"])
        mnt = self.scratch("mnt")
        with tl.Mount(self.idx, mnt, options="view=live@1"):
            tl.run_shardfs("view", "rm", self.idx, "live", check=0)
            got = tree_of_dir(mnt)
        self.assertEqual(got, want, diff_trees(want, got))


class ErrorsTest(ViewsCase):

    def assert_no_view(self, name):
        ls = json.loads(tl.run_shardfs("view", "ls", "--json", self.idx, check=0).stdout)
        self.assertNotIn(name, {v["name"] for v in ls["views"]})

    def test_missing_listed_path_names_file_and_line(self):
        lists = self.scratch("lists")
        for opt in ("--exclude-list", "--include-list"):
            lst = write_lines(os.path.join(lists, "l%s.txt" % opt), [
                "train/cat/cat_001.jpg", "", "train/cat/no_such.jpg"])
            p = view_create(self.idx, "miss", opt, lst, check=None)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(("%s:3" % lst).encode(), p.stderr)
            self.assert_no_view("miss")
        lst = write_lines(os.path.join(lists, "ok.txt"), ["train/cat/cat_001.jpg",
                                                          "train/cat/no_such.jpg"])
        view_create(self.idx, "miss_ok", "--exclude-list", lst, "--ignore-missing")
        self.check_listed("miss_ok", apply_view(self.tree, exclude_list=["train/cat/cat_001.jpg"]))
        p = view_create(self.idx, "nolist", "--exclude-list", os.path.join(lists, "absent"),
                        check=None)
        self.assertNotEqual(p.returncode, 0)
        self.assert_no_view("nolist")

    def test_unknown_view(self):
        for argv in (("ls", "--view", "nosuch", self.idx),
                     ("ls", "--view", "default@7", self.idx),
                     ("stat", "--view", "nosuch", self.idx, "meta/labels.txt"),
                     ("index", "info", "--view", "nosuch@1", self.idx),
                     ("view", "log", self.idx, "nosuch"),
                     ("view", "create", self.idx, "x", "--from", "nosuch")):
            p = tl.run_shardfs(*argv)
            self.assertEqual(p.returncode, 1, "%r: %s" % (argv, p.stderr))
            self.assertIn(b"nosuch" if b"nosuch" in b" ".join(map(os.fsencode, argv))
                          else b"default@7", p.stderr)
        self.assert_no_view("x")
        mnt = self.scratch("mnt")
        p = tl.run_shardfs("mount", "-o", "view=nosuch", self.idx, mnt, timeout=30)
        try:
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(b"nosuch", p.stderr)
            self.assertFalse(os.path.ismount(mnt))
        finally:
            tl.unmount(mnt)

    def test_bad_names(self):
        for name in ("", "a@b", "-dash", ".hidden", "sl/ash", "sp ace", "x" * 129, "caf\u00e9"):
            p = view_create(self.idx, name, "--exclude", "val", check=None)
            self.assertIn(p.returncode, (1, 2), "view create %r: %s" % (name, p.stderr))
            self.assertNotEqual(p.returncode, 0)
        view_create(self.idx, "x" * 128, "--exclude", "val")
        view_create(self.idx, "A.b_c-9", "--exclude", "val")
        p = tl.run_shardfs("view", "tag", self.idx, "A.b_c-9@1", "bad tag")
        self.assertNotEqual(p.returncode, 0)

    def test_rename_errors(self):
        lists = self.scratch("lists")
        onto = os.path.join(lists, "onto.tsv")
        with open(onto, "wb") as f:
            f.write(b"train/cat/cat_001.jpg\ttrain/cat/cat_002.jpg\n")
        p = view_create(self.idx, "ren_bad", "--rename-map", onto, check=None)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(b"cat_002.jpg", p.stderr)
        gone = os.path.join(lists, "gone.tsv")
        with open(gone, "wb") as f:
            f.write(b"val/cat/v0.jpg\tval/v0.jpg\n")
        p = view_create(self.idx, "ren_bad", "--exclude", "val", "--rename-map", gone, check=None)
        self.assertEqual(p.returncode, 1, p.stderr)  # OLD must exist after the filters.
        self.assertIn(b"val/cat/v0.jpg", p.stderr)
        self.assert_no_view("ren_bad")


class IndexAddTest(ViewsCase):

    def test_index_add(self):
        idx = os.path.join(self.scratch("idx"), "add.idx")
        tl.build_index(self.shards, idx)
        view_create(idx, "early", "--exclude", "val")
        early = apply_view(self.tree, excludes=["val"])
        # The new shard replaces one file, adds one to an existing folder and
        # a new folder.
        add_src = self.scratch("addsrc")
        rnd = random.Random(3)
        os.makedirs(os.path.join(add_src, "train", "cat"))
        os.makedirs(os.path.join(add_src, "train", "fox"))
        tl._write(os.path.join(add_src, "train", "cat", "cat_004.jpg"), rnd.randbytes(5555))
        tl._write(os.path.join(add_src, "train", "cat", "cat_100.jpg"), rnd.randbytes(1234))
        tl._write(os.path.join(add_src, "train", "fox", "fox_000.jpg"), rnd.randbytes(4321))
        new_shard = tl.tar_create(os.path.join(self.scratch("sh"), "shard-new.tar"), add_src,
                                  ["train/cat/cat_004.jpg", "train/cat/cat_100.jpg",
                                   "train/fox"])
        _, base_inodes = ls_tree(idx, "default@1")
        tl.run_shardfs("index", "add", idx, new_shard, check=0)
        added = tree_of_dir(add_src)
        want2 = dict(self.tree)
        want2.update({p: n for p, n in added.items() if p})
        info, shards = tl.index_info(idx)
        self.assertEqual(len(shards), len(self.shards) + 1)
        self.assertEqual(info["files"], counts(want2)["files"])
        self.check_mounted(None, want2, idx=idx)
        self.check_mounted("default@2", want2, idx=idx)
        self.check_mounted("default@1", self.tree, idx=idx)
        self.check_mounted("early@1", early, idx=idx)
        _, inodes2 = ls_tree(idx, "default@2")
        self.assertNotEqual(inodes2[b"train/cat/cat_004.jpg"], base_inodes[b"train/cat/cat_004.jpg"],
                            "a replaced file gets a new inode")
        self.assertEqual(inodes2[b"train/cat/cat_005.jpg"], base_inodes[b"train/cat/cat_005.jpg"])
        p = tl.run_shardfs("stat", "--json", idx, "train/cat/cat_004.jpg", check=0)
        self.assertEqual(tl.json_lines(p.stdout)[0]["size"], 5555)
        p = tl.run_shardfs("stat", "--json", "--view", "default@1", idx, "train/cat/cat_004.jpg",
                           check=0)
        self.assertEqual(tl.json_lines(p.stdout)[0]["size"], self.tree[b"train/cat/cat_004.jpg"][1])
        log = json.loads(tl.run_shardfs("view", "log", "--json", idx, "default", check=0).stdout)
        self.assertEqual([v["version"] for v in log["versions"]], [2, 1])
        # A view made now starts from default@2.
        out = view_create(idx, "late", "--exclude", "val").stdout
        self.assertEqual(parse_summary(out)["from"], "default@2")
        self.check_mounted("late", apply_view(want2, excludes=["val"]), idx=idx)
        # A second add: a later shard wins again, default@3.
        add2 = self.scratch("addsrc2")
        os.makedirs(os.path.join(add2, "train", "fox"))
        tl._write(os.path.join(add2, "train", "fox", "fox_000.jpg"), b"second fox\n")
        shard3 = tl.tar_create(os.path.join(self.scratch("sh"), "shard-new2.tar"), add2,
                               ["train/fox/fox_000.jpg"])
        tl.run_shardfs("index", "add", idx, shard3, check=0)
        want3 = dict(want2)
        want3[b"train/fox/fox_000.jpg"] = (
            "file", 11, hashlib.sha256(b"second fox\n").hexdigest(), None)
        self.check_mounted("default", want3, idx=idx)
        self.check_listed("default@2", want2, idx=idx)
        self.check_listed("default@1", self.tree, idx=idx)


class HostileTreeViewTest(tl.ScratchTestCase):
    """Views over the hostile tree: odd names, hard links (one name of a
    linked file excluded), long paths, symlinks."""
    PREFIX = "shardfs-views-hostile-"

    def test_hostile(self):
        tl.require_fuse()
        src = os.path.join(self.tmp, "src")
        os.mkdir(src)
        tl.make_hostile_tree(src)
        shard_dir = self.scratch("shards")
        shards = tl.tar_into_shards(src, shard_dir, 5)
        idx = os.path.join(self.tmp, "h.idx")
        tl.build_index(shards, idx)
        tree = tree_of_dir(src)
        excl = ["two_a", "three_b", "many/f1*", "*.json", "lengths/long"]
        view_create(idx, "h", *[a for g in excl for a in ("--exclude", g)])
        want = apply_view(tree, excludes=excl)
        self.assertIn(b"links/two_b", want)
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt, options="view=h@1"):
            got = tree_of_dir(mnt)
        self.assertEqual(got, want, diff_trees(want, got))
        lists = self.scratch("lists")
        lst = os.path.join(lists, "names.txt")
        with open(lst, "wb") as f:
            f.write("names/caf\u00e9.txt\n".encode() + b"names/\xff\xfe.bin\n" +
                    b"names/star*\n" + b"./names/dir with space\n")
        view_create(idx, "h", "--from", "h@1", "--exclude-list", lst)
        want2 = apply_view(want, exclude_list=["names/caf\u00e9.txt", b"names/\xff\xfe.bin",
                                               "names/star*", "names/dir with space"])
        self.assertIn(b"names/glob*?[", want2)
        with tl.Mount(idx, mnt, options="view=h@2"):
            got = tree_of_dir(mnt)
        self.assertEqual(got, want2, diff_trees(want2, got))


if __name__ == "__main__":
    tl.main()
