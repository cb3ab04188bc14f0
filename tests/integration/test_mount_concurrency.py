#!/usr/bin/env python3
"""Concurrent readers on one mount: 8 threads doing random-range reads (half
with O_DIRECT so they reach the daemon, the rest after dropping the file's
cached pages now and then) while 4 processes read through mmap, all for ~5 s;
every byte is checked against the source. The daemon's descriptors are the
same before and after (no leaked shard or index fds).

Run with `--mmap-worker MNT SRC SECONDS SEED` it is one of the mmap readers."""

import mmap
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

SECONDS = 5.0
THREADS = 8
PROCESSES = 4


def source_files(src):
    """Relative paths (bytes) of the regular files below `src`, sorted."""
    out = []
    bsrc = os.fsencode(src)
    for dirpath, _, files in os.walk(bsrc):
        for f in files:
            full = os.path.join(dirpath, f)
            if not os.path.islink(full):
                out.append(os.path.relpath(full, bsrc))
    return sorted(out)


def mmap_worker(mnt, src, seconds, seed):
    """Random slices of mmap'ed files of the mount against the source.
    Prints the number of checks; exits 1 at the first mismatch."""
    rnd = random.Random(seed)
    files = [f for f in source_files(src) if os.path.getsize(os.path.join(os.fsencode(src), f))]
    bmnt, bsrc = os.fsencode(mnt), os.fsencode(src)
    checks = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rel = rnd.choice(files)
        with open(os.path.join(bsrc, rel), "rb") as f:
            want = f.read()
        with open(os.path.join(bmnt, rel), "rb") as f:
            if rnd.random() < 0.3:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                if len(mm) != len(want):
                    print("%r: mapped %d bytes, source has %d" % (rel, len(mm), len(want)))
                    return 1
                for _ in range(8):
                    off = rnd.randrange(0, len(want))
                    n = rnd.randrange(1, 70000)
                    if mm[off:off + n] != want[off:off + n]:
                        print("%r: mmap bytes [%d, +%d) differ from the source" % (rel, off, n))
                        return 1
                    checks += 1
    print(checks)
    return 0


def fd_table(pid):
    """{fd: target} of process `pid`."""
    out = {}
    d = "/proc/%d/fd" % pid
    for name in os.listdir(d):
        try:
            out[int(name)] = os.readlink(os.path.join(d, name))
        except FileNotFoundError:
            pass  # Closed meanwhile.
    return out


def split_fds(table):
    """(sorted targets of the daemon's own fds, count of per-worker-thread
    fds). libfuse gives each worker thread a /dev/fuse clone (clone_fd) and
    a splice pipe pair; threads come and go with the load, so those are
    bounded rather than compared."""
    per_thread = [t for t in table.values() if t == "/dev/fuse" or t.startswith("pipe:")]
    own = sorted(t for t in table.values() if t != "/dev/fuse" and not t.startswith("pipe:"))
    return own, len(per_thread)


def settled_fds(pid, want=None, timeout=10.0):
    """The daemon's fds (split_fds) once they stop changing, or once its own
    fds equal those of `want`; the last seen at the deadline. A background
    listing of the dentry prefill holds a directory of the mount open for a
    moment: a single look could catch it."""
    last = split_fds(fd_table(pid))
    stable_since = time.monotonic()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(0.1)
        cur = split_fds(fd_table(pid))
        if want is not None and cur[0] == want[0]:
            return cur
        if cur != last:
            last, stable_since = cur, time.monotonic()
        elif want is None and time.monotonic() - stable_since > 1.0:
            return cur
    return last


class ConcurrencyTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        tl.require_shardfs()
        tl.require_fuse()
        cls.tmp = tempfile.mkdtemp(prefix="shardfs-conc-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.src = os.path.join(cls.tmp, "src")
        os.mkdir(cls.src)
        tl.make_hostile_tree(cls.src)
        rnd = random.Random(5)
        bulk = os.path.join(cls.src, "bulk")
        os.mkdir(bulk)
        for i in range(48):
            with open(os.path.join(bulk, "b%02d.bin" % i), "wb") as f:
                f.write(rnd.randbytes(rnd.randrange(0, 600 * 1024)))
        shard_dir = os.path.join(cls.tmp, "shards")
        os.mkdir(shard_dir)
        cls.shards = tl.tar_into_shards(cls.src, shard_dir, 4)
        cls.idx = os.path.join(cls.tmp, "tree.idx")
        tl.build_index(cls.shards, cls.idx)
        cls.entries = tl.index_entries(cls.idx)
        cls.files = source_files(cls.src)
        cls.content = {}
        for rel in cls.files:
            with open(os.path.join(os.fsencode(cls.src), rel), "rb") as f:
                cls.content[rel] = f.read()
        cls.mnt = os.path.join(cls.tmp, "mnt")
        os.mkdir(cls.mnt)

    def reader_thread(self, seed, end, errors, counts):
        rnd = random.Random(seed)
        bmnt = os.fsencode(self.mnt)
        n = 0
        try:
            while time.monotonic() < end and not errors:
                rel = rnd.choice(self.files)
                want = self.content[rel]
                direct = rnd.random() < 0.5
                fd = os.open(os.path.join(bmnt, rel), os.O_RDONLY | (os.O_DIRECT if direct else 0))
                try:
                    if not direct and rnd.random() < 0.2:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    for _ in range(4):
                        off = rnd.randrange(0, len(want) + 2)
                        size = rnd.choice([1, 100, 4096, 65536, 131072 + 17,
                                           rnd.randrange(1, 400000)])
                        got = os.pread(fd, size, off)
                        if got != want[off:off + size]:
                            errors.append("%r: pread(%d, %d) gave %d bytes that differ" % (
                                rel, size, off, len(got)))
                            return
                        n += 1
                    if rnd.random() < 0.05:
                        d = os.path.dirname(rel)
                        if rel.split(b"/")[-1] not in os.listdir(os.path.join(bmnt, d) if d
                                                                  else bmnt):
                            errors.append("%r missing from its directory listing" % rel)
                            return
                finally:
                    os.close(fd)
        except Exception as e:  # Reported by the main thread.
            errors.append("%r: %s" % (rel, e))
        counts.append(n)

    def test_threads_and_mmap_processes(self):
        with tl.Mount(self.idx, self.mnt) as m:
            # Warm up: open every shard once, so the baseline holds their fds.
            by_shard = {}
            for path, e in self.entries.items():
                if e["type"] == "file" and e["size"] > 0:
                    by_shard.setdefault(e["shard_id"], path)
            self.assertEqual(sorted(by_shard), list(range(len(self.shards))))
            for path in by_shard.values():
                with open(os.path.join(os.fsencode(self.mnt), path), "rb") as f:
                    self.assertEqual(f.read(), self.content[path])
            before = settled_fds(m.pid)
            shard_fds = [t for t in before[0] if t.endswith(".tar")]
            self.assertEqual(sorted(shard_fds), sorted(os.path.abspath(s) for s in self.shards))

            workers = [subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--mmap-worker", self.mnt, self.src,
                 str(SECONDS), str(100 + i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for i in range(PROCESSES)]
            errors, counts = [], []
            end = time.monotonic() + SECONDS
            threads = [threading.Thread(target=self.reader_thread, args=(i, end, errors, counts))
                       for i in range(THREADS)]
            try:
                for t in threads:
                    t.start()
            finally:
                for t in threads:
                    t.join(timeout=60)
                results = []
                for w in workers:
                    try:
                        out, err = w.communicate(timeout=60)
                    except subprocess.TimeoutExpired:
                        w.kill()  # Only the worker we started.
                        out, err = w.communicate()
                    results.append((w.returncode, out, err))
            self.assertFalse(any(t.is_alive() for t in threads), "a reader thread hung")
            self.assertEqual(errors, [])
            self.assertEqual(len(counts), THREADS)
            # Enough work to mean something, even on a slow shared machine.
            self.assertGreater(sum(counts), 200, counts)
            for rc, out, err in results:
                self.assertEqual(rc, 0, (out + err).decode(errors="replace"))
                self.assertGreater(int(out.split()[-1]), 20)
            self.assertIsNone(m.proc.poll(), "daemon died:\n" + m.stderr())

            after = settled_fds(m.pid, want=before)
            self.assertEqual(after[0], before[0], "descriptors other than /dev/fuse changed")
            # At most 16 worker threads (the default), each with a /dev/fuse
            # clone and a pipe pair, plus the session's /dev/fuse fd.
            self.assertLessEqual(after[1], 16 * 3 + 1)
            self.assertNotIn("error", m.stderr().lower())


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--mmap-worker":
        sys.exit(mmap_worker(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])))
    tl.main()
