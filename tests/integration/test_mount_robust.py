"""A real FUSE mount under conditions that used to hurt it: a FIFO where a
shard should be (EIO at once, never a blocked open, and it heals when the
shard is put back), a daemon out of file descriptors (EIO, then it heals),
64 open handles on a directory of 100,000 entries (memory stays flat),
`shardfs umount` while the mount is briefly busy, and SIGTERM while readers
are busy (the daemon ends, nobody hangs)."""

import errno
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from shardfs_testlib import ThreeShardFixture as Fixture, read_file  # noqa: E402


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def read_in_child(path, timeout=20):
    """Reads `path` whole in a child process, so a read that blocks cannot
    block the test. Returns (errno or 0, bytes); fails on a timeout."""
    code = ("import os, sys\n"
            "try:\n"
            "    data = open(sys.argv[1], 'rb').read()\n"
            "except OSError as e:\n"
            "    sys.stderr.write(str(e.errno)); sys.exit(3)\n"
            "sys.stdout.buffer.write(data)\n")
    p = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()  # Only the reader we started.
        p.communicate()
        raise AssertionError("reading %s blocked for %d s" % (path, timeout))
    if p.returncode == 3:
        return int(err), b""
    if p.returncode != 0:
        raise AssertionError("reader of %s failed: %s" % (path, err.decode(errors="replace")))
    return 0, out


class MountRobustTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        tl.require_shardfs()
        tl.require_fuse()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="shardfs-robust-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def test_fifo_where_a_shard_should_be_gives_eio_at_once_and_heals(self):
        fx = Fixture(self.tmp)
        shard = fx.shard_of("b")
        saved = shard + ".saved"
        os.rename(shard, saved)
        os.mkfifo(shard)
        with tl.Mount(fx.idx, fx.mnt) as m:
            t0 = time.monotonic()
            err, _ = read_in_child(os.path.join(fx.mnt, "b/f1.bin"))
            self.assertEqual(err, errno.EIO)
            self.assertLess(time.monotonic() - t0, 15)
            self.assertIn("FIFO", m.stderr())
            self.assertEqual(read_file(os.path.join(fx.mnt, "a/f1.bin")), fx.content["a/f1.bin"])
            # The shard is put back: after the back-off the next read serves.
            os.unlink(shard)
            os.rename(saved, shard)
            self.assertTrue(tl.wait_until(
                lambda: read_in_child(os.path.join(fx.mnt, "b/f1.bin")) ==
                (0, fx.content["b/f1.bin"]), timeout=15), m.stderr()[-2000:])
            self.assertIn("checked again and serving", m.stderr())

    def test_out_of_file_descriptors_gives_eio_then_heals(self):
        prlimit = shutil.which("prlimit")
        self.assertIsNotNone(prlimit, "prlimit (util-linux) is needed for this test")
        fx = Fixture(self.tmp)
        with tl.Mount(fx.idx, fx.mnt) as m:
            self.assertEqual(read_file(os.path.join(fx.mnt, "a/f0.bin")), fx.content["a/f0.bin"])
            limit = subprocess.run([prlimit, "--pid", str(m.pid), "--nofile", "--raw",
                                    "--noheadings", "--output=SOFT,HARD"],
                                   capture_output=True, text=True, check=True).stdout.split()
            # No descriptor left for the daemon: shard c cannot be opened. The
            # soft limit is the lowest free number, not the count of open
            # ones: a descriptor closed earlier leaves a hole below the count
            # that an open would take.
            in_use = {int(fd) for fd in os.listdir("/proc/%d/fd" % m.pid)}
            lowest_free = next(n for n in range(len(in_use) + 1) if n not in in_use)
            subprocess.run([prlimit, "--pid", str(m.pid),
                            "--nofile=%d:%s" % (lowest_free, limit[1])], check=True)
            try:
                err, _ = read_in_child(os.path.join(fx.mnt, "c/f2.bin"))
            finally:
                subprocess.run([prlimit, "--pid", str(m.pid),
                                "--nofile=%s:%s" % (limit[0], limit[1])], check=True)
            self.assertEqual(err, errno.EIO)
            self.assertIn("Too many open files", m.stderr())
            # Descriptors are back: the very next read serves, no remount.
            self.assertEqual(read_in_child(os.path.join(fx.mnt, "c/f2.bin")),
                             (0, fx.content["c/f2.bin"]))
            self.assertEqual(read_file(os.path.join(fx.mnt, "c/f4.bin")), fx.content["c/f4.bin"])

    def test_open_handles_on_a_large_directory_keep_memory_flat(self):
        n, handles = 100_000, 64
        shard = os.path.join(self.tmp, "wide.tar")
        names = ["n%06d.jpg" % i for i in range(n)]
        with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT) as tf:
            d = tarfile.TarInfo("wide")
            d.type = tarfile.DIRTYPE
            d.mode = 0o755
            tf.addfile(d)
            for name in names:
                ti = tarfile.TarInfo("wide/" + name)
                ti.size = 0
                tf.addfile(ti)
        idx = os.path.join(self.tmp, "wide.idx")
        tl.build_index([shard], idx)
        mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt, options="prefill_dirs=0") as m:
            wide = os.path.join(mnt, "wide")
            os.stat(wide)
            before = rss_kib(m.pid)
            fds = []
            try:
                for _ in range(handles):
                    fds.append(os.open(wide, os.O_RDONLY | os.O_DIRECTORY))
                # Each handle read partly, then one read whole (the kernel
                # caches the listing; the first full read comes from the daemon).
                for fd in fds:
                    with os.scandir(fd) as it:  # Reads through a dup of fd.
                        for _, _ in zip(range(1000), it):
                            pass
                self.assertEqual(sorted(os.listdir(wide)), names)
                after = rss_kib(m.pid)
            finally:
                for fd in fds:
                    os.close(fd)
        # A listing held per handle was ~190 bytes an entry: 64 x 100,000 x
        # 190 bytes is 1.2 GB. Streamed, the handles cost next to nothing.
        self.assertLess(after - before, 32 * 1024,
                        "daemon RSS grew from %d KiB to %d KiB" % (before, after))

    def test_umount_waits_while_the_mount_is_briefly_busy(self):
        fx = Fixture(self.tmp)
        p = subprocess.run([tl.SHARDFS, "mount", fx.idx, fx.mnt], capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        try:
            self.assertTrue(os.path.ismount(fx.mnt))
            # A directory of the mount is held open for a second, as a
            # background listing would.
            holder = subprocess.Popen([sys.executable, "-c",
                                       "import os, sys, time\n"
                                       "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
                                       "print('held', flush=True)\n"
                                       "time.sleep(1.5)\n",
                                       os.path.join(fx.mnt, "a")], stdout=subprocess.PIPE)
            try:
                self.assertEqual(holder.stdout.readline().strip(), b"held")
                u = subprocess.run([tl.SHARDFS, "umount", fx.mnt], capture_output=True,
                                   timeout=30)
                self.assertEqual(u.returncode, 0, u.stderr)
                self.assertFalse(os.path.ismount(fx.mnt))
            finally:
                holder.wait(timeout=15)
                holder.stdout.close()
        finally:
            self.assertIsNone(tl.unmount(fx.mnt))

    def test_sigterm_while_readers_are_busy_ends_the_daemon(self):
        fx = Fixture(self.tmp)
        reader = ("import os, sys\n"
                  "root = sys.argv[1]\n"
                  "rels = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]\n"
                  "print('ready', flush=True)\n"
                  "while True:\n"
                  "    for r in rels:\n"
                  "        try:\n"
                  "            open(r, 'rb').read()\n"
                  "        except OSError:\n"
                  "            sys.exit(0)\n")
        with tl.Mount(fx.idx, fx.mnt, options="threads=2") as m:
            readers = [subprocess.Popen([sys.executable, "-c", reader, fx.mnt],
                                        stdout=subprocess.PIPE) for _ in range(8)]
            try:
                for r in readers:
                    self.assertEqual(r.stdout.readline().strip(), b"ready")
                time.sleep(0.3)
                os.kill(m.pid, signal.SIGTERM)
                self.assertEqual(m.proc.wait(timeout=20), 0, m.stderr()[-2000:])
                self.assertFalse(os.path.ismount(fx.mnt))
                for r in readers:
                    r.wait(timeout=20)  # They see errors and stop; none hangs.
            finally:
                for r in readers:
                    if r.poll() is None:
                        r.kill()  # Only the readers we started.
                        r.wait()
                    r.stdout.close()
        self.assertIn("signal: unmounting", m.final_log())


if __name__ == "__main__":
    tl.main()
