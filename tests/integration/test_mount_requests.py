#!/usr/bin/env python3
"""What a file costs the daemon: the FUSE requests the kernel sends per file,
cold and warm, and the threads the daemon starts over shuffled epochs.

Requests: the daemon counts them by kind (`shardfs stats --json`,
"kernel_requests"). A loader that lists the tree first (ImageFolder) and
then opens every file in shuffled order with Python's open().read() must
cost, per file, no LOOKUP (the listing's READDIRPLUS left the dentries), no
GETATTR, at most one READ (a file under the readahead window), and no OPEN,
FLUSH or RELEASE beyond the mount's first (the kernel opens alone); a second
pass nothing but Python's isatty() IOCTL, which the kernel never caches; a
pass after the dentries were dropped no LOOKUP per file either (the daemon
lists a directory again with attributes at its first miss).

Threads: no thread churn.

libfuse's multi-threaded loop ends a worker that finds more than
`idle_threads` others idle, and starts one whenever a request finds none
waiting: with fewer idle workers kept than ever run at once, every burst of
requests starts threads again (a clone, a /dev/fuse clone and a splice pipe
each). With every worker kept, the daemon starts at most `threads` workers
over its life.

The oracle: strace attached to every thread of the daemon counts the threads
it creates over three shuffled epochs read by four processes, each epoch
begun with the kernel's dentries and inodes dropped (lookups go to the
daemon again, as in a long epoch over a big tree)."""
import json
import os
import random
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

FILES = 3000
READERS = 4
EPOCHS = 3
THREADS = 16  # The default -o threads.
# Besides the workers: the threads the daemon starts for itself at mount
# (prefill, pushes) are older than the trace; a few may start later.
SLACK = 4

READER = r"""
import os, random, sys
root, seed = sys.argv[1], int(sys.argv[2])
names = [l.rstrip("\n") for l in open(sys.argv[3])]
random.Random(seed).shuffle(names)
for n in names:
    with open(os.path.join(root, n), "rb") as f:
        f.read()
"""


def traced(pid):
    """Whether every thread of `pid` is traced."""
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
        for t in tasks:
            with open("/proc/%d/task/%s/status" % (pid, t)) as f:
                if not re.search(r"^TracerPid:\s*[1-9]", f.read(), re.M):
                    return False
        return bool(tasks)
    except FileNotFoundError:
        return False


def daemon_stats(mnt):
    p = tl.run_shardfs("stats", "--json", mnt, check=0)
    return json.loads(p.stdout)


def kernel_requests(mnt, also=None):
    """The daemon's request counts by kind; with `also`, its other counters
    (index_reads, worker_threads) filled into that dict."""
    st = daemon_stats(mnt)
    if also is not None:
        also.update({k: st[k] for k in ("index_reads", "worker_threads")})
    return st["kernel_requests"]


def spent(before, after):
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


class MountRequestsTest(tl.ScratchTestCase):
    PREFIX = "shardfs-requests-"

    def tree(self, files, dirs=30):
        src = self.scratch("src")
        rnd = random.Random(5)
        names = []
        for i in range(files):
            rel = "class%02d/f%05d.bin" % (i % dirs, i)
            os.makedirs(os.path.join(src, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(src, rel), "wb") as f:
                f.write(rnd.randbytes(rnd.randrange(100, 16384)))
            names.append(rel)
        shards = tl.tar_into_shards(src, self.scratch("shards"), 4)
        idx = os.path.join(self.scratch("index"), "idx")
        tl.build_index(shards, idx)
        return src, idx, names

    def test_what_each_file_costs_cold_and_warm(self):
        self.assertEqual(os.geteuid(), 0, "dropping the dentry cache needs root")
        src, idx, names = self.tree(2000)
        n = len(names)
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt):
            c0 = kernel_requests(mnt)
            paths = []
            for d in sorted(os.listdir(mnt)):
                for e in os.scandir(os.path.join(mnt, d)):
                    e.stat()
                    paths.append(e.path)
            self.assertEqual(len(paths), n)
            c1 = kernel_requests(mnt)
            random.Random(3).shuffle(paths)

            def read_all():
                for p in paths:
                    with open(p, "rb") as f:
                        f.read()
            read_all()
            c2 = kernel_requests(mnt)

            def counted_pass(watch):
                """(requests, index reads) of one read_all."""
                x0, x1 = {}, {}
                r0 = kernel_requests(mnt, x0)
                with watch:
                    read_all()
                return spent(r0, kernel_requests(mnt, x1)), x1["index_reads"] - x0["index_reads"]

            def drop_dentries():
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("2\n")

            # Warm: taken again while pages of the tree were lost during it
            # (tests run two at a time and some drop caches; the host may
            # page out idle memory).
            (warm, _), warm_lost = tl.warm_pass(counted_pass)
            drop_dentries()
            dropped, dropped_reads = counted_pass(tl.PageLossWatch())
            # Another epoch after the dentries were dropped again: the
            # daemon lists the directories again and pushes the files again
            # (the kernel's FORGETs told it their pages were gone). The push
            # is a page cache's too: taken again as the warm pass.
            (again, again_reads), again_lost = tl.warm_pass(counted_pass, prepare=drop_dentries)
        listing, cold = spent(c0, c1), spent(c1, c2)
        print("per %d files: listing %s\ncold %s\nwarm %s (pages lost: %s)\ndentries dropped %s\n"
              "again %s (pages lost: %s)\nindex reads %d, %d"
              % (n, listing, cold, warm, warm_lost, dropped, again, again_lost, dropped_reads,
                 again_reads))
        self.assertLessEqual(listing.get("lookup", 0), n // 10, listing)
        self.assertEqual(listing.get("getattr", 0), 0, listing)
        # Cold, after the listing: a READ at most, and Python's IOCTL.
        self.assertEqual(cold.get("lookup", 0), 0, cold)
        self.assertEqual(cold.get("getattr", 0), 0, cold)
        self.assertLessEqual(cold.get("open", 0), 1, cold)
        self.assertLessEqual(cold.get("flush", 0), 1, cold)
        self.assertLessEqual(cold.get("release", 0), 1, cold)
        self.assertLessEqual(cold.get("read", 0), n, cold)
        # Python before 3.14 asks isatty() at every open(): one IOCTL each,
        # which also shows that every file was opened (most READs are saved
        # by pages the daemon pushed ahead into the kernel's cache).
        ioctls = n if sys.version_info < (3, 14) else 0
        self.assertEqual(cold.get("ioctl", 0), ioctls, cold)
        # Warm: nothing but the IOCTL the kernel never caches (and, if every
        # try lost pages, the READs of what was lost).
        tl.assert_warm_requests(self, warm, warm_lost, n, {"ioctl": ioctls})
        # Dentries and inodes dropped: the pages go with the inodes (a READ
        # each again), but no LOOKUP per file.
        self.assertLessEqual(dropped.get("lookup", 0), n // 10, dropped)
        self.assertEqual(dropped.get("getattr", 0), 0, dropped)
        self.assertLessEqual(dropped.get("read", 0), n, dropped)
        # The second such epoch costs no more LOOKUPs, and the files are
        # pushed again: most need no READ.
        self.assertLessEqual(again.get("lookup", 0), n // 5, again)
        self.assertLessEqual(again.get("read", 0),
                             n // 2 + tl.reads_lost_pages_allow(again_lost, n), (again, again_lost))
        # Lookups answered from the daemon's memory: index reads per file
        # at most 0.2 in each dentries-dropped epoch.
        for reads in (dropped_reads, again_reads):
            self.assertLessEqual(reads, n // 5, (dropped_reads, again_reads))


    def test_three_cold_epochs_start_no_more_threads_than_workers(self):
        self.assertEqual(os.geteuid(), 0, "dropping the dentry cache needs root")
        src, idx, names = self.tree(FILES)
        listing = os.path.join(self.scratch("names"), "names")
        tl.write_lines(listing, names)
        mnt = self.scratch("mnt")
        log = os.path.join(self.scratch("strace"), "clones.log")
        with tl.Mount(idx, mnt) as m:
            strace = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=clone,clone3",
                                       "-o", log, "-p", str(m.pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                self.assertTrue(tl.wait_until(lambda: traced(m.pid), timeout=20),
                                "strace did not attach to the daemon")
                for epoch in range(EPOCHS):
                    with open("/proc/sys/vm/drop_caches", "w") as f:
                        f.write("2\n")
                    readers = [subprocess.Popen([sys.executable, "-c", READER, mnt,
                                                 str(epoch * 10 + r), listing],
                                                stderr=subprocess.PIPE)
                               for r in range(READERS)]
                    for r in readers:
                        _, err = r.communicate(timeout=240)
                        self.assertEqual(r.returncode, 0, err.decode(errors="replace"))
                served = daemon_stats(mnt)
            finally:
                strace.send_signal(signal.SIGINT)
                try:
                    strace.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    strace.kill()
                    strace.wait()
        with open(log) as f:
            lines = f.read().splitlines()
        # "PID clone3(...) = TID", or its "<... clone3 resumed> ...) = TID".
        created = [line for line in lines
                   if re.search(r"\bclone3?\b", line) and re.search(r"= [1-9]\d*$", line)]
        print("threads started over %d epochs: %d; %d served requests" % (
            EPOCHS, len(created), served["worker_threads"]))
        # The daemon's own count of threads that served a request agrees.
        self.assertLessEqual(served["worker_threads"], THREADS, served)
        self.assertLessEqual(len(created), THREADS + SLACK,
                             "threads started over %d epochs:\n%s" % (EPOCHS,
                                                                       "\n".join(created[:40])))


if __name__ == "__main__":
    tl.main()
