#!/usr/bin/env python3
"""Errors that cannot escape: the real `shardfs` CLI on a damaged index, on
shards that are not regular files, and in a process whose working directory
is gone. Every case must end with exit status 1 and a message on stderr that
names what is wrong: never an abort (std::terminate, SIGABRT), never a hang
(each run has a timeout, so a regression fails instead of blocking), never a
mount or an index left behind.

The damaged index is a real one (`shardfs index build`) whose meta value
max_inode is then overwritten with `index_surgery` (a test-only helper built
in tests/unit/; Python has no RocksDB binding here)."""

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

# Far beyond any index: the mount used to size a bitmap by it and abort.
HUGE_MAX_INODE = "18000000000000000000"
# Long enough for a slow machine, short enough that a blocked open shows.
TIMEOUT_S = 30


def index_surgery():
    build_root = os.environ.get("SHARDFS_BUILD_ROOT", "")
    path = os.path.join(build_root, "tests", "unit", "index_surgery")
    if not build_root or not os.access(path, os.X_OK):
        raise RuntimeError("index_surgery not built at %r (meson test sets SHARDFS_BUILD_ROOT)"
                           % path)
    return path


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)


class BadIndexTest(unittest.TestCase):

    def setUp(self):
        tl.require_shardfs()
        self.tmp = tempfile.mkdtemp(prefix="shardfs-bad-index-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------

    def make_shard(self, name="good.tar"):
        src = os.path.join(self.tmp, "src-" + name)
        os.makedirs(os.path.join(src, "dir"))
        write_file(os.path.join(src, "dir", "a.txt"), b"alpha\n")
        write_file(os.path.join(src, "b.bin"), os.urandom(3000))
        return tl.tar_create(os.path.join(self.tmp, name), src, ["b.bin", "dir"])

    def damaged_index(self):
        idx = os.path.join(self.tmp, "damaged.idx")
        tl.build_index([self.make_shard()], idx)
        p = subprocess.run([index_surgery(), idx, "max_inode", HUGE_MAX_INODE],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT_S)
        self.assertEqual(p.returncode, 0, p.stderr)
        return idx

    def run_cli(self, *args, **kw):
        return tl.run_shardfs(*args, timeout=TIMEOUT_S, **kw)

    def assertFailsCleanly(self, p, *words):
        """Exit status 1 (not a signal, not a usage error), a message naming
        `words`, and no trace of std::terminate."""
        err = p.stderr.decode(errors="replace")
        if p.returncode < 0:
            self.fail("killed by %s; stderr:\n%s" % (signal.Signals(-p.returncode).name, err))
        self.assertEqual(p.returncode, 1, err)
        self.assertTrue(err.strip(), "no message on stderr")
        self.assertNotIn("terminate called", err)
        for w in words:
            self.assertIn(w, err)
        return err

    def assertNothingLeftBeside(self, out, before):
        """Nothing new in the directory of `out`: no index, no temporary."""
        parent = os.path.dirname(out)
        self.assertFalse(os.path.lexists(out), "%s was created" % out)
        self.assertEqual(sorted(os.listdir(parent)), before, "files left in %s" % parent)

    # -- a damaged index ---------------------------------------------------------

    def test_index_info_refuses_a_huge_max_inode(self):
        idx = self.damaged_index()
        for extra in ([], ["--json"]):
            with self.subTest(extra=extra):
                p = self.run_cli("index", "info", *extra, idx)
                self.assertFailsCleanly(p, idx, "max_inode", HUGE_MAX_INODE)
                self.assertEqual(p.stdout, b"", "printed counts of a damaged index")

    def test_ls_and_stat_refuse_a_huge_max_inode(self):
        idx = self.damaged_index()
        for args in (["ls", idx], ["ls", "-R", "--json", idx], ["stat", idx, "dir/a.txt"]):
            with self.subTest(args=args):
                p = self.run_cli(*args)
                self.assertFailsCleanly(p, idx, "max_inode", HUGE_MAX_INODE)

    def test_mount_refuses_a_huge_max_inode_and_mounts_nothing(self):
        tl.require_fuse()
        idx = self.damaged_index()
        mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(mnt)
        # Foreground and daemonised: the daemon's child reports through the
        # parent, which must exit 1 too.
        for extra in (["-f"], []):
            with self.subTest(extra=extra):
                try:
                    p = self.run_cli("mount", *extra, idx, mnt)
                    mounted = os.path.ismount(mnt)
                finally:
                    problem = tl.unmount(mnt)
                self.assertIsNone(problem)
                self.assertFalse(mounted, "a damaged index was mounted")
                self.assertFailsCleanly(p, "max_inode", HUGE_MAX_INODE)

    # -- shards that are not regular files --------------------------------------

    def build_refused(self, *inputs, words=(), extra=()):
        out = os.path.join(self.tmp, "out.idx")
        before = sorted(os.listdir(self.tmp))
        start = time.monotonic()
        try:
            p = self.run_cli("index", "build", "--quiet", "--out", out, *extra, *inputs)
        except subprocess.TimeoutExpired:
            self.fail("index build %r still running after %d s (blocked opening a shard?)"
                      % (inputs, TIMEOUT_S))
        self.assertLess(time.monotonic() - start, TIMEOUT_S)
        err = self.assertFailsCleanly(p, *words)
        self.assertNothingLeftBeside(out, before)
        return err

    def test_index_build_refuses_a_fifo_without_blocking(self):
        good = self.make_shard()
        fifo = os.path.join(self.tmp, "pipe.tar")
        os.mkfifo(fifo)
        self.build_refused(fifo, words=(fifo, "FIFO"))
        # Among regular shards, in either order, and with several scan threads.
        self.build_refused(good, fifo, words=(fifo, "FIFO"), extra=("-j", "4"))
        self.build_refused(fifo, good, words=(fifo, "FIFO"), extra=("-j", "1"))
        # Named by a list file.
        listing = os.path.join(self.tmp, "shards.txt")
        write_file(listing, (good + "\n" + fifo + "\n").encode())
        before = sorted(os.listdir(self.tmp))
        out = os.path.join(self.tmp, "out.idx")
        p = self.run_cli("index", "build", "--quiet", "--out", out, "--from-list", listing)
        self.assertFailsCleanly(p, fifo, "FIFO")
        self.assertNothingLeftBeside(out, before)

    def test_index_build_refuses_a_fifo_behind_a_symlink(self):
        fifo = os.path.join(self.tmp, "pipe")
        os.mkfifo(fifo)
        link = os.path.join(self.tmp, "link.tar")
        os.symlink(fifo, link)
        self.build_refused(link, words=(link, "FIFO"))

    def test_index_build_refuses_a_character_device(self):
        self.assertTrue(stat.S_ISCHR(os.stat("/dev/null").st_mode))
        self.build_refused("/dev/null", words=("/dev/null", "character device"))

    def test_a_fifo_in_a_shard_directory_is_not_opened(self):
        # A directory input contributes its regular *.tar files; a FIFO there
        # must not block the build.
        shards = os.path.join(self.tmp, "shards")
        os.mkdir(shards)
        shutil.move(self.make_shard(), os.path.join(shards, "a.tar"))
        os.mkfifo(os.path.join(shards, "b.tar"))
        idx = os.path.join(self.tmp, "dir.idx")
        p = self.run_cli("index", "build", "--quiet", "--out", idx, shards)
        self.assertEqual(p.returncode, 0, p.stderr)
        info, shard_lines = tl.index_info(idx)
        self.assertEqual([os.path.basename(s["shard"]) for s in shard_lines], ["a.tar"])

    # -- exceptions --------------------------------------------------------------

    def test_a_vanished_working_directory_is_an_error_not_an_abort(self):
        # getcwd fails in a directory that was removed: relative paths cannot
        # be made absolute. One clear line and exit 1, whether the command
        # reports it itself or main() catches what a library threw.
        gone = os.path.join(self.tmp, "gone")
        for command, args in (("index build", ["index", "build", "--out", "x.idx", "x.tar"]),
                              ("mount", ["mount", "-f", "x.idx", "mnt"])):
            with self.subTest(args=args):
                os.makedirs(gone, exist_ok=True)
                script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
                p = subprocess.run(["sh", "-c", script, "sh", gone, tl.SHARDFS, *args],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   timeout=TIMEOUT_S)
                err = self.assertFailsCleanly(p)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertTrue(err.startswith("shardfs"), err)
                self.assertIn(command, err)
                self.assertIn("No such file or directory", err)


if __name__ == "__main__":
    tl.main()
