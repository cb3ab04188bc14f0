#!/usr/bin/env python3
"""Stress: 16 workers (8 threads, 8 processes) doing mixed readdir, lstat,
open/read at random ranges and mmap over random files of one mount for
~10 s; every byte is checked against the source, the daemon's descriptors
are the same afterwards and its memory stays bounded.

Also: a daemon killed with SIGKILL leaves a mountpoint that fusermount3 -u
recovers, and a new mount there works.

Run with `--worker MNT SRC SECONDS SEED` it is one of the worker processes."""

import errno
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from shardfs_testlib import mmap_worker, settled_fds, source_files  # noqa: E402

SECONDS = 10.0
THREADS = 8
PROCESSES = 8
# AddressSanitizer's quarantine and shadow memory inflate RSS by design; the
# sanitizer run (SHARDFS_SANITIZED=1, set by scripts/test.sh) gets more room.
RSS_LIMIT_KB = (1024 if os.environ.get("SHARDFS_SANITIZED") == "1" else 200) * 1024


def mixed_ops(mnt, src, files, content, rnd, end, errors):
    """Random readdir/lstat/read operations until `end`; returns the count."""
    bmnt, bsrc = os.fsencode(mnt), os.fsencode(src)
    n = 0
    while time.monotonic() < end and not errors:
        rel = rnd.choice(files)
        op = rnd.random()
        if op < 0.2:
            d = os.path.dirname(rel)
            got = sorted(os.listdir(os.path.join(bmnt, d) if d else bmnt))
            want = sorted(os.listdir(os.path.join(bsrc, d) if d else bsrc))
            if got != want:
                errors.append("%r: listing differs" % d)
        elif op < 0.4:
            a, b = os.lstat(os.path.join(bmnt, rel)), os.lstat(os.path.join(bsrc, rel))
            if (a.st_size, a.st_mode, a.st_mtime_ns) != (b.st_size, b.st_mode, b.st_mtime_ns):
                errors.append("%r: lstat differs" % rel)
        else:
            want = content(rel)
            with open(os.path.join(bmnt, rel), "rb", buffering=0) as f:
                if rnd.random() < 0.3:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                off = rnd.randrange(0, len(want) + 1)
                size = rnd.choice([1, 4096, 65536 + 3, rnd.randrange(1, 300000)])
                if os.pread(f.fileno(), size, off) != want[off:off + size]:
                    errors.append("%r: pread(%d, %d) differs" % (rel, size, off))
        n += 1
    return n


def worker_main(mnt, src, seconds, seed):
    rnd = random.Random(seed)
    files = source_files(src)
    bsrc = os.fsencode(src)

    def content(rel):
        with open(os.path.join(bsrc, rel), "rb") as f:
            return f.read()

    errors = []
    end = time.monotonic() + seconds / 2
    n = mixed_ops(mnt, src, files, content, rnd, end, errors)
    if errors:
        print(errors[0])
        return 1
    # Second half: mmap reads.
    rc = mmap_worker(mnt, src, seconds / 2, seed)
    print(n)
    return rc


class StressTest(tl.ScratchTestCase):
    PREFIX = "shardfs-stress-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.src = os.path.join(cls.tmp, "src")
        os.mkdir(cls.src)
        tl.make_hostile_tree(cls.src)
        rnd = random.Random(9)
        for d in range(8):
            sub = os.path.join(cls.src, "bulk%d" % d)
            os.mkdir(sub)
            for i in range(64):
                with open(os.path.join(sub, "f%03d.bin" % i), "wb") as f:
                    f.write(rnd.randbytes(rnd.choice([0, 1, 4096, rnd.randrange(1, 400000)])))
        shard_dir = os.path.join(cls.tmp, "shards")
        os.mkdir(shard_dir)
        cls.shards = tl.tar_into_shards(cls.src, shard_dir, 6)
        cls.idx = os.path.join(cls.tmp, "tree.idx")
        tl.build_index(cls.shards, cls.idx)
        cls.files = source_files(cls.src)
        cls.cache = {}
        cls.mnt = os.path.join(cls.tmp, "mnt")
        os.mkdir(cls.mnt)

    def content(self, rel):
        if rel not in self.cache:
            with open(os.path.join(os.fsencode(self.src), rel), "rb") as f:
                self.cache[rel] = f.read()
        return self.cache[rel]

    def daemon_rss_kb(self, pid):
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS for pid %d" % pid)

    def test_sixteen_workers(self):
        with tl.Mount(self.idx, self.mnt) as m:
            for rel in self.files:  # Opens every shard once: the fd baseline.
                with open(os.path.join(os.fsencode(self.mnt), rel), "rb") as f:
                    f.read(1)
            before = settled_fds(m.pid)[0]
            procs = [subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", self.mnt, self.src,
                 str(SECONDS), str(200 + i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for i in range(PROCESSES)]
            errors, counts = [], []
            end = time.monotonic() + SECONDS

            def thread_main(seed):
                try:
                    counts.append(mixed_ops(self.mnt, self.src, self.files, self.content,
                                            random.Random(seed), end, errors))
                except Exception as e:
                    errors.append(repr(e))

            threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(THREADS)]
            try:
                for t in threads:
                    t.start()
                peak_rss = 0
                while any(t.is_alive() for t in threads):
                    peak_rss = max(peak_rss, self.daemon_rss_kb(m.pid))
                    time.sleep(0.5)
            finally:
                for t in threads:
                    t.join()
                outs = [p.communicate(timeout=SECONDS + 60) for p in procs]
            self.assertEqual(errors, [])
            for p, (out, err) in zip(procs, outs):
                self.assertEqual(p.returncode, 0, (out + err).decode(errors="replace"))
            self.assertTrue(tl.pid_alive(m.pid), "the daemon died under load")
            self.assertGreater(sum(counts), 1000, "the threads did almost nothing")
            self.assertLess(peak_rss, RSS_LIMIT_KB, "daemon RSS grew to %d KiB" % peak_rss)
            after = settled_fds(m.pid, want=(before, 0))[0]
            self.assertEqual(after, before, "the daemon's descriptors changed under load")

    def test_sigkill_then_recover(self):
        with tl.Mount(self.idx, self.mnt, check_exit=False) as m:
            os.kill(m.pid, signal.SIGKILL)
            self.assertTrue(tl.wait_until(lambda: not tl.pid_alive(m.pid)))
            with self.assertRaises(OSError) as cm:
                os.stat(os.path.join(self.mnt, "bulk0"))
            # ENOTCONN, or ECONNABORTED on kernels that report the aborted connection.
            self.assertIn(cm.exception.errno, (errno.ENOTCONN, errno.ECONNABORTED),
                          "expected the dead mount to say it is not connected")
        # Leaving the block ran fusermount3 -u: the mountpoint is usable again.
        self.assertFalse(os.path.ismount(self.mnt))
        with tl.Mount(self.idx, self.mnt):
            rel = self.files[len(self.files) // 2]
            with open(os.path.join(os.fsencode(self.mnt), rel), "rb") as f:
                self.assertEqual(f.read(), self.content(rel))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        sys.exit(worker_main(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])))
    tl.main()
