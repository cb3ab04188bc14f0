#!/usr/bin/env python3
"""Views under concurrent change: mounts of NAME@1, of a bare
NAME and of the bare index keep their version, byte for byte, while
`view create` and `index add` run on the same index, and new mounts see the
new versions; a `view create` or `index add` killed with SIGKILL at several
points leaves every earlier version listed and mountable as it was, a
completed new version whole, `index info` clean, and the next run working.

The shards are written here with tarfile, so the expected trees come from the
member lists, never from the code's output."""

import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

BASE_FILES = 8000
ADD_FILES = 5000
KILL_AFTER_S = (0.0, 0.05, 0.2)


def write_shard(path, files):
    """A pax tar of {path str: bytes}, files only (directories implied)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = tl.BASE_TIME_S
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
    return path


def tree_of_files(files):
    """The tree a set of {path str: bytes} extracts to."""
    tree = {b"": tl.DIR}
    for name, data in files.items():
        p = os.fsencode(name)
        tree[p] = ("file", len(data), hashlib.sha256(data).hexdigest(), None)
        d = os.path.dirname(p)
        while d and d not in tree:
            tree[d] = tl.DIR
            d = os.path.dirname(d)
    return tree


def gen_files(rnd, n, prefix, first=0):
    return {"%s/d%02d/f%06d.bin" % (prefix, i % 40, i): rnd.randbytes(rnd.randrange(0, 400))
            for i in range(first, first + n)}


class ViewConcurrencyTest(tl.ScratchTestCase):
    PREFIX = "shardfs-view-conc-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.rnd = random.Random(99)
        shard_dir = os.path.join(cls.tmp, "shards")
        os.mkdir(shard_dir)
        cls.files = {}
        cls.shards = []
        for s in range(4):
            part = gen_files(cls.rnd, BASE_FILES // 4, "train", s * (BASE_FILES // 4))
            cls.files.update(part)
            cls.shards.append(write_shard(os.path.join(shard_dir, "base-%d.tar" % s), part))
        cls.tree = tree_of_files(cls.files)
        cls.shard_dir = shard_dir

    def new_index(self):
        idx = os.path.join(self.scratch("idx"), "c.idx")
        tl.build_index(self.shards, idx)
        return idx

    def exclude_list(self, n, seed):
        rnd = random.Random(seed)
        names = sorted(rnd.sample(sorted(self.files), n))
        path = os.path.join(self.scratch("lists"), "exclude.txt")
        return tl.write_lines(path, names), names

    def snapshot(self, idx):
        """{spec: ls tree} of every version of every view."""
        ls = json.loads(tl.run_shardfs("view", "ls", "--json", idx, check=0).stdout)
        out = {}
        for v in ls["views"]:
            log = json.loads(tl.run_shardfs("view", "log", "--json", idx, v["name"],
                                               check=0).stdout)
            for ver in log["versions"]:
                spec = "%s@%d" % (v["name"], ver["version"])
                out[spec] = tl.ls_tree(idx, spec)
        return out

    def check_clean(self, idx, what):
        p = tl.run_shardfs("index", "info", "--json", idx)
        self.assertEqual(p.returncode, 0, "%s: index info: %s" % (what, p.stderr))
        self.assertEqual(p.stderr, b"", "%s: index info warns" % what)
        p = tl.run_shardfs("view", "ls", "--json", idx)
        self.assertEqual(p.returncode, 0, "%s: view ls: %s" % (what, p.stderr))

    def check_mount(self, idx, spec, want):
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt, options="view=" + spec if spec else None):
            got = tl.tree_of_dir(mnt)
        self.assertEqual(got, want, "mount of %s:\n%s" % (spec, tl.diff_trees(want, got)))

    # -- Mounts keep their version ---------------------------------------------

    def test_mounts_keep_their_version(self):
        idx = self.new_index()
        lst, names = self.exclude_list(1000, 1)
        tl.view_create(idx, "v", "--exclude-list", lst)
        want_v1 = tl.apply_view(self.tree, exclude_list=names)
        m_v1, m_bare, m_idx = self.scratch("m1"), self.scratch("m2"), self.scratch("m3")
        errors, reads = [], [0]
        stop = threading.Event()

        def reader(mnt, want, seed):
            rnd = random.Random(seed)
            files = [p for p, n in want.items() if n[0] == "file"]
            try:
                while not stop.is_set() and not errors:
                    p = rnd.choice(files)
                    with open(os.path.join(os.fsencode(mnt), p), "rb") as f:
                        h = hashlib.sha256(f.read()).hexdigest()
                    if h != want[p][2]:
                        errors.append("%s: %r changed under its reader" % (mnt, p))
                    reads[0] += 1
                    # Reads all through the writes, a few hundred a second:
                    # enough to meet every new version, without taking the
                    # cores the writers run on.
                    stop.wait(0.002)
                    if rnd.random() < 0.01:
                        for name in names[:50]:
                            if os.path.lexists(os.path.join(mnt, name)) and want is want_v1:
                                errors.append("%s: excluded %s appeared" % (mnt, name))
            except Exception as e:  # noqa: BLE001 - reported by the test thread
                errors.append("%s: %r" % (mnt, e))

        with tl.Mount(idx, m_v1, options="view=v@1"), tl.Mount(idx, m_bare, options="view=v"), \
                tl.Mount(idx, m_idx):
            threads = [threading.Thread(target=reader, args=a) for a in (
                (m_v1, want_v1, 1), (m_bare, want_v1, 2), (m_idx, self.tree, 3))]
            for t in threads:
                t.start()
            try:
                # New versions of v, an index add replacing files, a view of it.
                tl.view_create(idx, "v", "--exclude", "d0?")
                tl.view_create(idx, "v", "--from", "v@1", "--exclude", "d1?")
                add = dict(gen_files(self.rnd, 500, "train", 0))  # Replaces f000000..
                add.update(gen_files(self.rnd, 300, "extra"))
                shard = write_shard(os.path.join(self.scratch("add"), "add.tar"), add)
                tl.run_shardfs("index", "add", idx, shard, check=0)
                tl.view_create(idx, "v", "--exclude", "d2?")
                time.sleep(0.5)
            finally:
                stop.set()
                for t in threads:
                    t.join(60)
            self.assertEqual(errors, [])
            self.assertGreater(reads[0], 0)
            for mnt, want in ((m_v1, want_v1), (m_bare, want_v1), (m_idx, self.tree)):
                got = tl.tree_of_dir(mnt)
                self.assertEqual(got, want, "%s after the writes:\n%s" % (
                    mnt, tl.diff_trees(want, got)))
        new_default = dict(self.tree)
        new_default.update(tree_of_files(add))
        self.check_mount(idx, "v", tl.apply_view(new_default, excludes=["d2?"]))
        self.check_mount(idx, None, new_default)
        self.check_mount(idx, "v@3", tl.apply_view(want_v1, excludes=["d1?"]))
        self.check_mount(idx, "v@1", want_v1)

    # -- Killed writers ---------------------------------------------------------

    def run_and_kill(self, argv, after_s):
        """Starts `shardfs ARGV`, SIGKILLs it (by its pid) after `after_s`
        unless it ended. Returns its exit code (-9 when killed)."""
        proc = subprocess.Popen([tl.SHARDFS] + [str(a) for a in argv],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if after_s:
                time.sleep(after_s)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        finally:
            rc = proc.wait(60)
        return rc

    def check_after_kill(self, idx, before, what, expect_new):
        """Every version in `before` is listed as it was; a new one, if any,
        is the one `expect_new` ((spec, tree)) names, whole."""
        self.check_clean(idx, what)
        after = self.snapshot(idx)
        for spec, listing in before.items():
            self.assertIn(spec, after, "%s: %s vanished" % (what, spec))
            self.assertEqual(after[spec], listing, "%s: %s changed" % (what, spec))
        new = set(after) - set(before)
        spec, tree = expect_new
        self.assertLessEqual(new, {spec}, "%s: unexpected versions %s" % (what, new))
        if new:
            got = after[spec][0]
            want = tl.without_content(tree)
            self.assertEqual(got, want, "%s: completed %s is not whole:\n%s" % (
                what, spec, tl.diff_trees(want, got)))
        return bool(new), after

    def test_killed_view_create(self):
        idx = self.new_index()
        lst, names = self.exclude_list(4000, 2)
        renames = os.path.join(self.scratch("lists"), "renames.tsv")
        kept = sorted(set(self.files) - set(names))
        pairs = [(p, p.replace("train/", "moved/", 1)) for p in kept[:1500]]
        with open(renames, "w") as f:
            for a, b in pairs:
                f.write("%s\t%s\n" % (a, b))
        want = tl.apply_view(self.tree, exclude_list=names, renames=pairs)
        tl.view_create(idx, "k", "--exclude", "d3?")
        mnt = self.scratch("mnt")
        outcomes = []
        with tl.Mount(idx, mnt, options="view=k@1"):
            before = self.snapshot(idx)
            for t in KILL_AFTER_S:
                latest = max(int(s.split("@")[1]) for s in before if s.startswith("k@"))
                spec = "k@%d" % (latest + 1)
                rc = self.run_and_kill(["view", "create", idx, "k", "--exclude-list", lst,
                                        "--rename-map", renames], t)
                made, before = self.check_after_kill(idx, before, "view create killed after %.2fs" % t,
                                             (spec, want))
                # A command that finished made its version; a killed one may have
                # been past its one atomic step (then the version is whole, as
                # check_after_kill saw) or not (then nothing changed).
                if rc == 0:
                    self.assertTrue(made, "exit 0 but no new version")
                outcomes.append(rc)
            got = tl.tree_of_dir(mnt)
        self.assertEqual(got, tl.apply_view(self.tree, excludes=["d3?"]))
        sys.stderr.write("view create, exit per kill point %r: %r\n" % (KILL_AFTER_S, outcomes))
        self.assertIn(-signal.SIGKILL, outcomes, "no kill landed while view create ran")
        # The next run works and the earlier versions still mount.
        tl.view_create(idx, "k", "--exclude-list", lst, "--rename-map", renames)
        self.check_mount(idx, "k", want)
        self.check_mount(idx, "k@1", tl.apply_view(self.tree, excludes=["d3?"]))
        self.check_mount(idx, "default@1", self.tree)

    def test_killed_index_add(self):
        idx = self.new_index()
        tl.view_create(idx, "before", "--exclude", "d0?")
        current = dict(self.tree)
        mnt = self.scratch("mnt")
        outcomes = []
        before = self.snapshot(idx)
        with tl.Mount(idx, mnt, options="view=default@1"):
            for i, t in enumerate(KILL_AFTER_S):
                add = gen_files(self.rnd, ADD_FILES, "train", i * 997)  # Replaces some.
                add.update(gen_files(self.rnd, 200, "new%d" % i))
                shard = write_shard(os.path.join(self.shard_dir, "add-%d.tar" % i), add)
                expect = dict(current)
                expect.update(tree_of_files(add))
                latest = max(int(s.split("@")[1]) for s in before if s.startswith("default@"))
                spec = "default@%d" % (latest + 1)
                rc = self.run_and_kill(["index", "add", "--quiet", idx, shard], t)
                made, before = self.check_after_kill(idx, before, "index add killed after %.2fs" % t,
                                             (spec, expect))
                # A command that finished made its version; a killed one may have
                # been past its one atomic step (then the version is whole, as
                # check_after_kill saw) or not (then nothing changed).
                if rc == 0:
                    self.assertTrue(made, "exit 0 but no new version")
                if made:
                    current = expect
                outcomes.append(rc)
                info, shards = tl.index_info(idx)
                self.assertEqual(info["files"], tl.counts(current)["files"],
                                 "index info after a %s add" % ("completed" if made else "killed"))
            got = tl.tree_of_dir(mnt)
        self.assertEqual(got, self.tree, tl.diff_trees(self.tree, got))
        sys.stderr.write("index add, exit per kill point %r: %r\n" % (KILL_AFTER_S, outcomes))
        self.assertIn(-signal.SIGKILL, outcomes, "no kill landed while index add ran")
        last = gen_files(self.rnd, 10, "final")
        shard = write_shard(os.path.join(self.shard_dir, "add-final.tar"), last)
        tl.run_shardfs("index", "add", "--quiet", idx, shard, check=0)
        current.update(tree_of_files(last))
        self.check_mount(idx, None, current)
        self.check_mount(idx, "default@1", self.tree)
        self.check_mount(idx, "before@1", tl.apply_view(self.tree, excludes=["d0?"]))


if __name__ == "__main__":
    tl.main()
