#!/usr/bin/env python3
"""The mount's readahead window: run as root, the daemon raises
read_ahead_kb of its mount (/sys/class/bdi/MAJOR:MINOR/read_ahead_kb) after
FUSE's INIT, so that a 150 KB sample read with a 256 KiB buffer takes one
READ, not two. The READs are counted in the daemon's debug log; the same read
with the window put back to the kernel's 128 KiB takes two, so the check can
fail. Without root the daemon says in one line that the window stays. Every
byte read is compared with the source."""

import hashlib
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

SIZE = 150 * 1000


def mount_device(mnt):
    """MAJOR:MINOR of the FUSE mount at `mnt`, from mountinfo (no stat through
    the mount)."""
    real = os.path.realpath(mnt)
    dev = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == real and " - fuse" in line:
                dev = fields[2]
    return dev


class MountReadaheadTest(tl.ScratchTestCase):
    PREFIX = "shardfs-readahead-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.src = os.path.join(cls.tmp, "src")
        os.makedirs(os.path.join(cls.src, "d"))
        rnd = random.Random(27)
        cls.want = {}
        for i in range(4):
            rel = "d/f%d.jpg" % i
            data = rnd.randbytes(SIZE)
            with open(os.path.join(cls.src, rel), "wb") as f:
                f.write(data)
            cls.want[rel] = hashlib.sha256(data).hexdigest()
        out = os.path.join(cls.tmp, "packed")
        tl.run_shardfs("pack", cls.src, "--out", out, "--quiet", check=0)
        cls.idx = os.path.join(out, "index")
        cls.mnt = os.path.join(cls.tmp, "mnt")
        os.mkdir(cls.mnt)

    def read_counted(self, m, rel):
        """Reads `rel` with a 256 KiB buffer, as the bench reader does; checks
        its bytes; returns the READs this process sent for it."""
        before = len(m.stderr())
        fd = os.open(os.path.join(self.mnt, rel), os.O_RDONLY)
        try:
            data = b""
            while True:
                b = os.read(fd, 256 * 1024)
                if not b:
                    break
                data += b
        finally:
            os.close(fd)
        self.assertEqual(hashlib.sha256(data).hexdigest(), self.want[rel], rel)
        log = m.stderr()[before:]
        return len(re.findall(r"opcode: READ \(.*pid: %d$" % os.getpid(), log, re.MULTILINE))

    def test_a_150k_sample_takes_one_read(self):
        # No pushes: a file pushed into the page cache would need no READ.
        with tl.Mount(self.idx, self.mnt, options="debug,push_ahead=0,push_random=0") as m:
            os.listdir(os.path.join(self.mnt, "d"))  # The first requests after INIT.
            dev = mount_device(self.mnt)
            self.assertIsNotNone(dev)
            ra = "/sys/class/bdi/%s/read_ahead_kb" % dev
            if os.geteuid() != 0:
                self.assertTrue(tl.wait_until(lambda: "raising it needs root" in m.stderr()),
                                m.stderr()[-3000:])
                self.assertEqual(m.stderr().count("raising it needs root"), 1)
                return
            self.assertTrue(tl.wait_until(lambda: "read_ahead_kb of the mount: 1024" in m.stderr()),
                            m.stderr()[-3000:])
            with open(ra) as f:
                self.assertGreaterEqual(int(f.read()), 1024)
            self.assertEqual(self.read_counted(m, "d/f0.jpg"), 1, m.stderr()[-3000:])
            self.assertEqual(self.read_counted(m, "d/f1.jpg"), 1, m.stderr()[-3000:])
            # The kernel's default window, for a file opened from now on:
            # two READs (128 KiB, then the rest).
            with open(ra, "w") as f:
                f.write("128\n")
            self.assertEqual(self.read_counted(m, "d/f2.jpg"), 2, m.stderr()[-3000:])
            self.assertNotIn("raising it needs root", m.stderr())


if __name__ == "__main__":
    tl.main()
