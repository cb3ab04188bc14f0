#!/usr/bin/env python3
"""The mount(8) helper tools/cli/mount.fuse.shardfs, run the way mount(8) runs it
for `mount -t fuse.shardfs INDEX MNT -o OPTIONS` and for fstab lines: it drops
the options only mount(8) uses, mounts, and returns once mounted."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

HELPER = os.path.join(os.environ.get("SHARDFS_SOURCE_ROOT", ""), "tools", "cli", "mount.fuse.shardfs")


class MountHelperTest(unittest.TestCase):

    def setUp(self):
        tl.require_shardfs()
        tl.require_fuse()
        self.tmp = tempfile.mkdtemp(prefix="shardfs-helper-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        src = os.path.join(self.tmp, "src")
        os.makedirs(os.path.join(src, "d"))
        with open(os.path.join(src, "d", "f.txt"), "wb") as f:
            f.write(b"through the helper\n")
        shard = tl.tar_create(os.path.join(self.tmp, "s.tar"), src, ["d"])
        self.idx = os.path.join(self.tmp, "idx")
        tl.build_index([shard], self.idx)
        self.mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(self.mnt)

    def daemon_pid(self):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if os.fsencode(self.mnt) in argv and b"mount" in argv:
                return int(pid)
        return None

    def test_fstab_style_options(self):
        env = dict(os.environ, SHARDFS=tl.SHARDFS)
        p = subprocess.run([HELPER, self.idx, self.mnt, "-o",
                            "ro,noauto,_netdev,nofail,x-systemd.automount,defaults,"
                            "comment=x-gvfs-show,max_open_shards=4"],
                           env=env, capture_output=True, timeout=60)
        pid = self.daemon_pid()
        try:
            self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
            self.assertTrue(os.path.ismount(self.mnt), "not mounted when the helper returned")
            with open(os.path.join(self.mnt, "d", "f.txt"), "rb") as f:
                self.assertEqual(f.read(), b"through the helper\n")
            with open("/proc/self/mountinfo") as f:
                line = [l for l in f if " %s " % self.mnt in l][0]
            self.assertIn("fuse.shardfs", line)
            self.assertIn(" ro", line.split(" - ")[0])
        finally:
            self.assertIsNone(tl.unmount(self.mnt))
            if pid is not None:
                self.assertTrue(tl.wait_until(lambda: not tl.pid_alive(pid), timeout=10),
                                "daemon %d still running after unmount" % pid)

    def test_rw_is_not_passed_and_bad_usage_fails(self):
        env = dict(os.environ, SHARDFS=tl.SHARDFS)
        p = subprocess.run([HELPER, self.idx], env=env, capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        p = subprocess.run([HELPER, self.idx, self.mnt, "-o", "verify=sometimes"], env=env,
                           capture_output=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"verify", p.stderr)
        self.assertFalse(os.path.ismount(self.mnt))


if __name__ == "__main__":
    tl.main()
