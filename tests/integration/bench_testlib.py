"""What the smoke tests of tools/bench/shardfs_bench.py share: a run in a temporary directory
that must leave no mount, no process and no scratch behind."""

import glob
import os
import shutil
import subprocess

import shardfs_testlib as tl


def mounts_under(prefix):
    """Mountpoints at or below `prefix`."""
    prefix = os.path.realpath(prefix).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if (mp + "/").startswith(prefix):
                found.append(mp)
    return found


def processes_mentioning(text):
    """PIDs whose command line mentions `text` (our temp dir): left-behind daemons."""
    pids = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if text.encode() in f.read() and tl.pid_alive(int(d)):
                    pids.append(int(d))
        except OSError:
            pass
    return pids


class BenchTmpMixin:
    """For a unittest.TestCase whose setUpClass sets cls.tmp (and cls.workdir, where the bench
    keeps its run-* scratch dirs, if it has one)."""

    @classmethod
    def tearDownClass(cls):
        for mp in mounts_under(cls.tmp):  # Only if a test already failed on this.
            subprocess.run(["umount", "-l", mp])
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assertNothingLeft(self):
        self.assertEqual(mounts_under(self.tmp), [])
        self.assertEqual(processes_mentioning(self.tmp), [])
        workdir = getattr(self, "workdir", None)
        if workdir:
            self.assertEqual(glob.glob(os.path.join(workdir, "run-*")), [])
