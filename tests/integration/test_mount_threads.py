#!/usr/bin/env python3
"""The daemon's worker threads over shuffled epochs: no thread churn.

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


class MountThreadsTest(tl.ScratchTestCase):
    PREFIX = "shardfs-threads-"

    def test_three_cold_epochs_start_no_more_threads_than_workers(self):
        self.assertEqual(os.geteuid(), 0, "dropping the dentry cache needs root")
        src = self.scratch("src")
        rnd = random.Random(5)
        names = []
        for i in range(FILES):
            rel = "class%02d/f%05d.bin" % (i % 30, i)
            os.makedirs(os.path.join(src, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(src, rel), "wb") as f:
                f.write(rnd.randbytes(rnd.randrange(100, 3000)))
            names.append(rel)
        shards = tl.tar_into_shards(src, self.scratch("shards"), 4)
        idx = os.path.join(self.tmp, "idx")
        tl.build_index(shards, idx)
        listing = os.path.join(self.tmp, "names")
        tl.write_lines(listing, names)
        mnt = self.scratch("mnt")
        log = os.path.join(self.tmp, "clones.log")
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
        print("threads started over %d epochs: %d" % (EPOCHS, len(created)))
        self.assertLessEqual(len(created), THREADS + SLACK,
                             "threads started over %d epochs:\n%s" % (EPOCHS,
                                                                       "\n".join(created[:40])))


if __name__ == "__main__":
    tl.main()
