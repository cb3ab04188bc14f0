#!/usr/bin/env python3
"""Concurrent readers on one mount: 8 threads doing random-range reads (half
with O_DIRECT so they reach the daemon, the rest after dropping the file's
cached pages now and then) while 4 processes read through mmap, all for ~5 s;
every byte is checked against the source. The daemon's descriptors are the
same before and after (no leaked shard or index fds).

Run with `--mmap-worker MNT SRC SECONDS SEED` it is one of the mmap readers."""

import os
import random
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from shardfs_testlib import mmap_worker, settled_fds, source_files  # noqa: E402

SECONDS = 5.0
THREADS = 8
PROCESSES = 4


class ConcurrencyTest(tl.ScratchTestCase):
    PREFIX = "shardfs-conc-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
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
            tasks_before = len(os.listdir("/proc/%d/task" % m.pid))
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
            # Every worker is kept once started (no thread churn): at most the
            # 16 of -o threads beyond the threads the daemon had before the
            # load. A thread holds at most five of these descriptors: a
            # /dev/fuse clone, libfuse's splice pipe pair and the daemon's
            # own reply pipe pair (each taken as the thread first needs it).
            # The session's /dev/fuse and the daemon's own pipes (control
            # socket, signals), all there before the load, come on top.
            # (A bound of three per thread held only while some threads had
            # not yet taken a reply pipe: CI once counted 95 > 3 x 28 + 10.)
            tasks = len(os.listdir("/proc/%d/task" % m.pid))
            self.assertLessEqual(tasks, tasks_before + 16)
            self.assertLessEqual(after[1], 5 * tasks + before[1], (before, after, tasks))
            self.assertNotIn("error", m.stderr().lower())


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--mmap-worker":
        sys.exit(mmap_worker(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])))
    tl.main()
