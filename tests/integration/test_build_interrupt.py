#!/usr/bin/env python3
"""An interrupted `index build` leaves no temporary directory behind.

A build that spills (`--memory 1M`) keeps its sorted runs in
INDEX.tmp-HOST-PID-RANDOM beside INDEX. SIGTERM (a scheduler's time limit),
SIGINT or SIGHUP in the middle of it removes that directory, publishes
nothing at INDEX, and the process still ends by that signal. A directory
left by a build that is gone (SIGKILL, a crash: made on this host by a PID
that no longer exists) is removed by the next build into the same INDEX,
with one log line; a live process's, another host's, another output's and
one of an older name without a host are left alone, and so is anything in a
dead build's directory that a build does not write.
"""

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

MEMBERS = 60000  # Per shard: enough for a spilling build to take a while.


def write_flat_shard(path, shard, members):
    """A ustar archive of `members` empty files, written header by header
    (far faster than tarfile for this many)."""
    with open(path, "wb") as f:
        for i in range(members):
            name = b"d%d/%03d/f%06d" % (shard, i % 500, i)
            h = bytearray(512)
            h[0:len(name)] = name
            h[100:108] = b"0000644\0"
            h[108:116] = b"0000000\0"
            h[116:124] = b"0000000\0"
            h[124:136] = b"00000000000\0"
            h[136:148] = b"14000000000\0"
            h[148:156] = b" " * 8
            h[156:157] = b"0"
            h[257:265] = b"ustar\x0000"
            h[148:156] = b"%06o\0 " % sum(h)
            f.write(h)
        f.write(bytes(1024))
    return path


def default_signals():
    """In the child: SIGINT, SIGTERM and SIGHUP as a shell's job would have
    them (not ignored, whatever the test runner does)."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def temp_dirs(parent):
    return sorted(n for n in os.listdir(parent) if ".tmp-" in n)


def has_files(d):
    try:
        return bool(os.listdir(d))
    except FileNotFoundError:
        return False


def snapshot(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if os.path.isdir(p):
                out[os.path.relpath(p, root)] = None
            else:
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = f.read()
    return out


def dead_pid():
    """The PID of a process that has ended (and been reaped)."""
    while True:
        p = subprocess.Popen(["true"])
        p.wait()
        try:
            os.kill(p.pid, 0)
        except ProcessLookupError:
            return p.pid


class BuildInterruptTest(tl.ScratchTestCase):
    PREFIX = "shardfs-build-interrupt-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = os.path.join(cls.tmp, "shards")
        os.mkdir(d)
        cls.shards = [write_flat_shard(os.path.join(d, "s%d.tar" % i), i, MEMBERS)
                      for i in range(4)]
        cls.host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "unknown-host"

    def test_a_signal_removes_the_spill_directory(self):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            with self.subTest(signal=sig.name):
                parent = self.scratch(sig.name)
                out = os.path.join(parent, "idx")
                argv = [tl.SHARDFS, "index", "build", "--memory", "1M", "--jobs", "2",
                        "--out", out] + self.shards
                p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     preexec_fn=default_signals)
                try:
                    # A spill directory with runs in it; at most 60 s.
                    seen = []
                    deadline = time.monotonic() + 60
                    while not seen and p.poll() is None and time.monotonic() < deadline:
                        seen = [t for t in temp_dirs(parent)
                                if has_files(os.path.join(parent, t))]
                        time.sleep(0.002)
                    self.assertTrue(seen, "no spill directory seen; the build ended (%r)"
                                    % p.returncode)
                    p.send_signal(sig)
                    _, err = p.communicate(timeout=60)
                finally:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                self.assertEqual(p.returncode, -sig, err)
                self.assertEqual(os.listdir(parent), [],
                                 "left beside the index: %s" % err.decode(errors="replace"))
                self.assertRegex(seen[0], r"^idx\.tmp-%s-%d-[0-9a-f]{8}$"
                                 % (re.escape(self.host), p.pid))

    def make(self, parent, name, files):
        d = os.path.join(parent, name)
        os.mkdir(d)
        for f, data in files.items():
            tl._write(os.path.join(d, f), data)
        return d

    def test_the_next_build_removes_a_dead_builds_directory(self):
        parent = self.scratch("stale")
        out = os.path.join(parent, "idx")
        gone = dead_pid()
        runs = {"members-0-0": os.urandom(300), "dirents-3": b"x", "inodes-merge-1": b"y",
                "000007.sst": b"z", "CURRENT": b"MANIFEST-000005\n", "dirents.sst": b"w"}
        dead = "idx.tmp-%s-%d-0badf00d" % (self.host, gone)
        keep = {
            # This test's own process is alive.
            "idx.tmp-%s-%d-0badf00d" % (self.host, os.getpid()): runs,
            # Another host's: its PID means nothing here.
            "idx.tmp-elsewhere.example-%d-0badf00d" % gone: runs,
            # An older name without a host.
            "idx.tmp-%d-0badf00d" % gone: runs,
            # Another output's.
            "idy.tmp-%s-%d-0badf00d" % (self.host, gone): runs,
            # The aside of a publish by two renames: an old index.
            "idx.tmp-%s-%d-0badf00d.old" % (self.host, gone): runs,
        }
        for name, files in keep.items():
            self.make(parent, name, files)
        # A dead build's directory holding something a build never writes:
        # the runs go, the rest stays.
        mixed = "idx.tmp-%s-%d-0badf00e" % (self.host, gone)
        self.make(parent, mixed, dict(runs, **{"notes.txt": b"mine"}))
        os.mkdir(os.path.join(parent, mixed, "sub"))
        before = snapshot(parent)

        for extra in ([], ["--memory", "1M", "--force"]):
            with self.subTest(extra=extra):
                if not os.path.exists(os.path.join(parent, dead)):
                    self.make(parent, dead, runs)
                p = tl.build_index(self.shards[:1], out, *extra)
                err = p.stderr.decode(errors="replace")
                self.assertFalse(os.path.exists(os.path.join(parent, dead)), err)
                self.assertEqual(err.count(dead), 1, err)
                self.assertRegex(err, r"%s: removed: left by process %d of this host, which is "
                                 r"gone" % (re.escape(os.path.join(parent, dead)), gone))
                for name in keep:
                    self.assertEqual(snapshot(os.path.join(parent, name)),
                                     {k[len(name) + 1:]: v for k, v in before.items()
                                      if k.startswith(name + "/")}, name)
                self.assertEqual(sorted(os.listdir(os.path.join(parent, mixed))),
                                 ["notes.txt", "sub"])
                self.assertIn("notes.txt", err)
                self.assertEqual(sorted(os.listdir(parent)),
                                 sorted(["idx", mixed] + list(keep)))
                self.assertEqual(tl.index_info(out)[0]["shards"], 1)


if __name__ == "__main__":
    tl.main()
