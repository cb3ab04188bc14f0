#!/usr/bin/env python3
"""A real FUSE mount under error conditions: every write is EROFS, shards
that vanish or change give EIO (never wrong bytes) while the daemon serves on,
--check, bad mountpoints and indexes, signals, the daemonised form."""

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from shardfs_testlib import ThreeShardFixture as Fixture, read_file, write_file  # noqa: E402

KIB = 1024


class MountErrorsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        tl.require_shardfs()
        tl.require_fuse()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="shardfs-errors-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def fixture(self):
        return Fixture(self.tmp)

    def assertErrno(self, code, fn, *args):
        with self.assertRaises(OSError, msg="%s%r" % (fn.__name__, args)) as cm:
            fn(*args)
        self.assertEqual(cm.exception.errno, code, "%s%r: %s" % (fn.__name__, args,
                                                                 cm.exception))

    def assertServes(self, fx, m, rels):
        self.assertIsNone(m.proc.poll(), "the daemon died:\n" + m.stderr())
        for rel in rels:
            self.assertEqual(read_file(os.path.join(fx.mnt, rel)), fx.content[rel], rel)

    def expect_refused(self, argv, mnt, timeout=30):
        """Runs `shardfs mount ...` expecting it to fail without mounting.
        Unmounts (and fails) if it mounted after all."""
        p = subprocess.Popen([tl.SHARDFS, "mount"] + argv, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + timeout
            while p.poll() is None and not os.path.ismount(mnt):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            mounted = os.path.ismount(mnt)
        finally:
            problem = tl.unmount(mnt)
            try:
                out, err = p.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()  # Only the process we started.
                out, err = p.communicate()
        self.assertIsNone(problem)
        self.assertFalse(mounted, "mounted although it should refuse: %r" % argv)
        self.assertNotEqual(p.returncode, 0, err)
        self.assertTrue(err.strip(), "no message on stderr")
        return err.decode(errors="replace")

    # -- read-only ------------------------------------------------------------

    def test_every_write_is_erofs(self):
        fx = self.fixture()
        j = lambda rel: os.path.join(fx.mnt, rel)  # noqa: E731
        with tl.Mount(fx.idx, fx.mnt) as m:
            f, d = j("a/f0.bin"), j("a/sub")
            for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC,
                          os.O_WRONLY | os.O_APPEND, os.O_RDONLY | os.O_TRUNC):
                self.assertErrno(errno.EROFS, os.open, f, flags)
            self.assertErrno(errno.EROFS, os.open, j("a/new"), os.O_WRONLY | os.O_CREAT, 0o644)
            self.assertErrno(errno.EROFS, os.open, j("a/new"), os.O_RDONLY | os.O_CREAT, 0o644)
            self.assertErrno(errno.EROFS, os.unlink, f)
            self.assertErrno(errno.EROFS, os.rmdir, d)
            self.assertErrno(errno.EROFS, os.rename, f, j("a/renamed"))
            self.assertErrno(errno.EROFS, os.rename, f, j("b/f0.bin"))
            self.assertErrno(errno.EROFS, os.mkdir, j("a/newdir"))
            self.assertErrno(errno.EROFS, os.chmod, f, 0o600)
            self.assertErrno(errno.EROFS, os.chown, f, 1, 1)
            self.assertErrno(errno.EROFS, os.truncate, f, 0)
            self.assertErrno(errno.EROFS, os.utime, f, (1, 1))
            self.assertErrno(errno.EROFS, os.utime, f, None)
            self.assertErrno(errno.EROFS, os.symlink, "f0.bin", j("a/newlink"))
            self.assertErrno(errno.EROFS, os.link, f, j("a/newhard"))
            self.assertErrno(errno.EROFS, os.mkfifo, j("a/fifo"))
            self.assertErrno(errno.EROFS, os.setxattr, f, "user.k", b"v")
            self.assertErrno(errno.EROFS, os.removexattr, f, "user.k")
            fd = os.open(f, os.O_RDONLY)
            try:
                self.assertErrno(errno.EBADF, os.write, fd, b"x")
                self.assertErrno(errno.EINVAL, os.ftruncate, fd, 0)  # Not open for writing.
            finally:
                os.close(fd)
            self.assertEqual(sorted(os.listdir(j("a"))), sorted(os.listdir(
                os.path.join(fx.src, "a"))))
            self.assertServes(fx, m, fx.content)

    # -- shards that vanish or change ---------------------------------------------

    def test_deleted_shard_gives_eio_and_the_rest_serves(self):
        fx = self.fixture()
        os.unlink(fx.shard_of("b"))
        with tl.Mount(fx.idx, fx.mnt) as m:
            ok = [r for r in fx.content if not r.startswith("b/")]
            self.assertServes(fx, m, ok)
            for rel in ("b/f0.bin", "b/f3.bin", "b/sub/x.txt"):
                # Metadata comes from the index alone; content needs the shard.
                st = os.stat(os.path.join(fx.mnt, rel))
                self.assertEqual(st.st_size, len(fx.content[rel]))
                self.assertErrno(errno.EIO, read_file, os.path.join(fx.mnt, rel))
                self.assertErrno(errno.EIO, read_file, os.path.join(fx.mnt, rel))
            self.assertServes(fx, m, ok)
            self.assertEqual(sorted(os.listdir(os.path.join(fx.mnt, "b"))),
                             sorted(os.listdir(os.path.join(fx.src, "b"))))
            self.assertIsNone(m.proc.poll())
        self.assertIn(os.path.basename(fx.shard_of("b")), m.final_log())

    def test_shard_replaced_by_other_bytes_of_same_size_gives_eio(self):
        fx = self.fixture()
        shard = fx.shard_of("c")
        size = os.path.getsize(shard)
        os.unlink(shard)
        write_file(shard, random.Random(3).randbytes(size))
        self.assertEqual(os.path.getsize(shard), size)
        with tl.Mount(fx.idx, fx.mnt) as m:
            for rel in ("c/f0.bin", "c/f4.bin", "c/sub/x.txt"):
                self.assertErrno(errno.EIO, read_file, os.path.join(fx.mnt, rel))
            self.assertServes(fx, m, [r for r in fx.content if not r.startswith("c/")])
        self.assertIn(os.path.basename(shard), m.final_log())

    def test_shard_truncated_while_mounted_gives_eio(self):
        fx = self.fixture()
        shard = fx.shard_of("c")
        with tl.Mount(fx.idx, fx.mnt) as m:
            # The shard is open and checked; now it shrinks under the daemon.
            self.assertServes(fx, m, ["c/f0.bin"])
            os.truncate(shard, os.path.getsize(shard) // 2)
            for rel in ("c/f3.bin", "c/f4.bin"):  # Never read: not in the page cache.
                self.assertErrno(errno.EIO, read_file, os.path.join(fx.mnt, rel))
            self.assertServes(fx, m, [r for r in fx.content if not r.startswith("c/")])
        self.assertIn(os.path.basename(shard), m.final_log())

    def test_shard_deleted_or_replaced_while_mounted_serves_the_indexed_bytes(self):
        # Once checked and open, a shard is read through its descriptor: deleting
        # its name, or renaming other bytes over it, cannot change what is served.
        fx = self.fixture()
        with tl.Mount(fx.idx, fx.mnt) as m:
            self.assertServes(fx, m, ["b/f0.bin", "c/f0.bin"])
            os.unlink(fx.shard_of("b"))
            other = fx.shard_of("c") + ".new"
            write_file(other, random.Random(5).randbytes(os.path.getsize(fx.shard_of("c"))))
            os.rename(other, fx.shard_of("c"))
            self.assertServes(fx, m, [r for r in fx.content if r[0] in "bc"])
            self.assertServes(fx, m, fx.content)

    def test_shard_unreadable_before_first_use_gives_eio(self):
        # The daemon runs without the capabilities that let root read anything,
        # so a shard made unreadable after indexing cannot be opened: EIO.
        fx = self.fixture()
        os.chmod(fx.shard_of("a"), 0)
        setpriv = shutil.which("setpriv")
        self.assertIsNotNone(setpriv, "setpriv (util-linux) is needed for this test")
        log = os.path.join(self.tmp, "unreadable.log")
        with open(log, "wb") as logf:
            p = subprocess.Popen([setpriv, "--inh-caps=-dac_override,-dac_read_search",
                                  "--bounding-set=-dac_override,-dac_read_search", tl.SHARDFS,
                                  "mount", "-f", fx.idx, fx.mnt], stderr=logf)
        try:
            self.assertTrue(tl.wait_until(lambda: os.path.ismount(fx.mnt), timeout=20),
                            read_file(log).decode(errors="replace"))
            self.assertErrno(errno.EIO, read_file, os.path.join(fx.mnt, "a/f1.bin"))
            for rel in ("b/f1.bin", "c/f2.bin"):
                self.assertEqual(read_file(os.path.join(fx.mnt, rel)), fx.content[rel])
        finally:
            self.assertIsNone(tl.unmount(fx.mnt))
            self.assertEqual(p.wait(timeout=15), 0)
        self.assertIn(b"Permission denied", read_file(log))

    def make_middle_altered_shard(self):
        """One shard of three 200 KiB members; the middle one is then changed
        in place, far from the 64 KiB head and tail the fingerprint reads.
        Returns (idx, mnt, {name: original bytes}, altered middle bytes)."""
        rnd = random.Random(11)
        src = os.path.join(self.tmp, "big-src")
        os.mkdir(src)
        content = {}
        for name in ("head.bin", "mid.bin", "tail.bin"):
            content[name] = rnd.randbytes(200 * KIB)
            write_file(os.path.join(src, name), content[name])
        other_src = os.path.join(self.tmp, "other-src")
        os.mkdir(other_src)
        write_file(os.path.join(other_src, "other.bin"), b"other shard\n")
        shard = tl.tar_create(os.path.join(self.tmp, "big.tar"), src,
                              ["head.bin", "mid.bin", "tail.bin"])
        other = tl.tar_create(os.path.join(self.tmp, "other.tar"), other_src, ["other.bin"])
        idx = os.path.join(self.tmp, "big.idx")
        tl.build_index([shard, other], idx)
        e = tl.json_lines(tl.run_shardfs("stat", "--json", idx, "mid.bin", check=0).stdout)[0]
        size = os.path.getsize(shard)
        self.assertGreater(size, 256 * KIB)
        at = e["offset"] + 100 * KIB
        self.assertTrue(64 * KIB <= at and at + 16 < size - 64 * KIB)
        with open(shard, "r+b") as f:
            f.seek(at)
            f.write(b"\xAA" * 16)
        altered = bytearray(content["mid.bin"])
        altered[100 * KIB:100 * KIB + 16] = b"\xAA" * 16
        self.assertNotEqual(bytes(altered), content["mid.bin"])
        mnt = os.path.join(self.tmp, "big-mnt")
        os.mkdir(mnt)
        return idx, mnt, content, bytes(altered)

    def test_in_place_change_the_fingerprint_cannot_see(self):
        # The premise of the verify tests: without verify the shard check
        # (size + head/tail fingerprint) passes and the changed bytes show.
        idx, mnt, content, altered = self.make_middle_altered_shard()
        with tl.Mount(idx, mnt):
            self.assertEqual(read_file(os.path.join(mnt, "head.bin")), content["head.bin"])
            self.assertEqual(read_file(os.path.join(mnt, "mid.bin")), altered)

    def check_verify_catches_change(self, mode):
        idx, mnt, content, altered = self.make_middle_altered_shard()
        with tl.Mount(idx, mnt, options="verify=" + mode) as m:
            self.assertEqual(read_file(os.path.join(mnt, "head.bin")), content["head.bin"])
            mid = os.path.join(mnt, "mid.bin")
            self.assertErrno(errno.EIO, read_file, mid)
            # Nor through other paths: a small read at the start, a read of
            # just the changed range, O_DIRECT.
            for flags in (0, os.O_DIRECT):
                fd = os.open(mid, os.O_RDONLY | flags)
                try:
                    self.assertErrno(errno.EIO, os.pread, fd, 10, 0)
                    self.assertErrno(errno.EIO, os.pread, fd, 64, 100 * KIB - 8)
                finally:
                    os.close(fd)
            self.assertErrno(errno.EIO, read_file, mid)
            self.assertEqual(read_file(os.path.join(mnt, "other.bin")), b"other shard\n")
            self.assertIsNone(m.proc.poll())
        self.assertIn("big.tar", m.final_log())

    def test_verify_first_gives_eio_never_the_changed_bytes(self):
        self.check_verify_catches_change("first")

    def test_verify_always_gives_eio_never_the_changed_bytes(self):
        self.check_verify_catches_change("always")

    def test_verify_needs_checksums(self):
        fx = self.fixture()
        idx = os.path.join(self.tmp, "nosum.idx")
        tl.build_index(fx.shards, idx, "--no-checksum")
        err = self.expect_refused(["-f", "-o", "verify=first", idx, fx.mnt], fx.mnt)
        self.assertIn("checksum", err)

    # -- --check ------------------------------------------------------------

    def test_check_refuses_a_missing_shard(self):
        fx = self.fixture()
        os.unlink(fx.shard_of("a"))
        err = self.expect_refused(["-f", "--check", fx.idx, fx.mnt], fx.mnt)
        self.assertIn(os.path.basename(fx.shard_of("a")), err)
        # The daemonised form reports the same failure and leaves nothing.
        err = self.expect_refused(["--check", fx.idx, fx.mnt], fx.mnt)
        self.assertIn(os.path.basename(fx.shard_of("a")), err)
        self.assertEqual(self.daemons_of(fx.mnt), [])
        with tl.Mount(fx.idx, fx.mnt, extra_args=["--check", "--allow-missing-shards"]) as m:
            self.assertServes(fx, m, [r for r in fx.content if not r.startswith("a/")])
            self.assertErrno(errno.EIO, read_file, os.path.join(fx.mnt, "a/f1.bin"))

    def test_index_whose_shards_all_moved_is_refused(self):
        fx = self.fixture()
        moved = os.path.join(fx.d, "moved")
        os.rename(os.path.dirname(fx.shard_of("a")), moved)
        err = self.expect_refused(["-f", fx.idx, fx.mnt], fx.mnt)
        self.assertIn("none of its 3 shards", err)
        self.assertIn(os.path.basename(fx.shard_of("a")), err)
        self.assertEqual(self.daemons_of(fx.mnt), [])
        with tl.Mount(fx.idx, fx.mnt, extra_args=["--allow-missing-shards"]):
            self.assertEqual(sorted(os.listdir(fx.mnt)), ["a", "b", "c"])
            self.assertErrno(errno.EIO, read_file, os.path.join(fx.mnt, "a/f1.bin"))

    def test_check_passes_a_healthy_index(self):
        fx = self.fixture()
        with tl.Mount(fx.idx, fx.mnt, extra_args=["--check"]) as m:
            self.assertServes(fx, m, fx.content)

    # -- bad mountpoints and indexes ------------------------------------------

    def test_nonempty_mountpoint_is_refused(self):
        fx = self.fixture()
        write_file(os.path.join(fx.mnt, "already-here"), b"x")
        err = self.expect_refused(["-f", fx.idx, fx.mnt], fx.mnt)
        self.assertIn("nonempty", err)
        self.assertEqual(os.listdir(fx.mnt), ["already-here"])
        # -o nonempty mounts over it.
        with tl.Mount(fx.idx, fx.mnt, options="nonempty") as m:
            self.assertEqual(sorted(os.listdir(fx.mnt)), ["a", "b", "c"])
            self.assertServes(fx, m, ["a/f0.bin"])
        self.assertEqual(os.listdir(fx.mnt), ["already-here"])

    def test_bad_mountpoints_are_refused(self):
        fx = self.fixture()
        missing = os.path.join(self.tmp, "no-such-dir")
        self.expect_refused(["-f", fx.idx, missing], missing)
        a_file = os.path.join(self.tmp, "a-file")
        write_file(a_file, b"")
        self.expect_refused(["-f", fx.idx, a_file], a_file)

    def test_not_an_index_is_refused(self):
        fx = self.fixture()
        empty = os.path.join(self.tmp, "empty-dir")
        os.mkdir(empty)
        junk = os.path.join(self.tmp, "junk-dir")
        os.mkdir(junk)
        write_file(os.path.join(junk, "CURRENT"), b"garbage\n")
        a_file = os.path.join(self.tmp, "plain-file")
        write_file(a_file, b"not an index")
        for idx in (empty, junk, a_file, os.path.join(self.tmp, "missing.idx"), fx.shards[0]):
            with self.subTest(idx=idx):
                before = sorted(os.listdir(idx)) if os.path.isdir(idx) else None
                err = self.expect_refused(["-f", idx, fx.mnt], fx.mnt)
                self.assertIn(os.path.basename(idx), err)
                if before is not None:
                    self.assertEqual(sorted(os.listdir(idx)), before, "the index dir was written")

    # -- signals and the daemonised form ---------------------------------------

    def test_sigterm_sigint_sighup_unmount_cleanly(self):
        fx = self.fixture()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            with self.subTest(sig=sig):
                with tl.Mount(fx.idx, fx.mnt) as m:
                    self.assertServes(fx, m, ["a/f0.bin"])
                    os.kill(m.pid, sig)
                    rc = m.proc.wait(timeout=15)
                    self.assertEqual(rc, 0, m.stderr())
                    self.assertFalse(os.path.ismount(fx.mnt))

    def daemons_of(self, mnt):
        """PIDs of live shardfs processes whose command line names `mnt`
        (a fresh temporary path, so only ours)."""
        want = os.fsencode(mnt)
        pids = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if want in argv and b"mount" in argv and tl.pid_alive(int(name)):
                pids.append(int(name))
        return pids

    def test_daemonised_mount_and_umount(self):
        fx = self.fixture()
        pids = []
        try:
            p = subprocess.run([tl.SHARDFS, "mount", fx.idx, fx.mnt], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
            mounted = os.path.ismount(fx.mnt)  # Right after it returns.
            pids = self.daemons_of(fx.mnt)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(mounted, "not mounted when `shardfs mount` returned")
            self.assertEqual(len(pids), 1, "daemon processes: %r" % pids)
            self.assertEqual(read_file(os.path.join(fx.mnt, "b/f2.bin")), fx.content["b/f2.bin"])
            u = subprocess.run([tl.SHARDFS, "umount", fx.mnt], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
            self.assertEqual(u.returncode, 0, u.stderr)
            self.assertFalse(os.path.ismount(fx.mnt))
            self.assertTrue(tl.wait_until(lambda: not tl.pid_alive(pids[0]), timeout=15),
                            "daemon %d still running after umount" % pids[0])
        finally:
            problem = tl.unmount(fx.mnt)
            for pid in pids:  # Only the daemon this test started.
                if tl.wait_until(lambda: not tl.pid_alive(pid), timeout=10):
                    continue
                os.kill(pid, signal.SIGKILL)
        self.assertIsNone(problem)
        # umount of something not mounted fails.
        u = subprocess.run([tl.SHARDFS, "umount", fx.mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(u.returncode, 1)


if __name__ == "__main__":
    tl.main()
