"""What the smoke tests of tools/bench/shardfs_bench.py share: a run in a temporary directory
that must leave no mount, no process and no scratch behind."""

import glob
import json
import os
import subprocess
import sys
import time
import zlib

import shardfs_testlib as tl

# The bench script and its reader, found through the variables meson test sets.
SOURCE_ROOT = os.environ.get("SHARDFS_SOURCE_ROOT", "")
BUILD_ROOT = os.environ.get("SHARDFS_BUILD_ROOT", "")
SCRIPT = os.path.join(SOURCE_ROOT, "tools", "bench", "shardfs_bench.py")
READER = os.path.join(BUILD_ROOT, "tools", "bench", "bench_reader")


def tree_checksum(train):
    """What one epoch over train/ must read: samples, bytes, sum of CRC-32s, per-class counts
    (classes in ImageFolder's sorted order)."""
    total = crc = 0
    per_class = []
    for c in sorted(os.listdir(train)):
        names = os.listdir(os.path.join(train, c))
        per_class.append(len(names))
        for n in names:
            with open(os.path.join(train, c, n), "rb") as f:
                data = f.read()
            total += len(data)
            crc += zlib.crc32(data)
    return {"samples": sum(per_class), "bytes": total, "crc32_sum": crc % (1 << 64),
            "per_class": per_class}


def as_text(out):
    """A child's output captured in text or bytes mode (None: nothing) as text."""
    if isinstance(out, bytes):
        return out.decode(errors="replace")
    return out or ""


def read_json(path):
    """The JSON document at path, or None when there is no such file."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


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


class BenchTestCase(tl.ScratchTestCase):
    """A bench smoke test: shardfs, FUSE, the bench script and its reader are
    required; one temporary folder (`tmp`, ScratchTestCase) that the run must
    leave without mount or process, and `workdir`, where the bench keeps its
    run-* scratch dirs, if the test sets one."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        for p in (SCRIPT, READER):
            if not os.path.exists(p):
                raise RuntimeError("%s missing (SHARDFS_SOURCE_ROOT/SHARDFS_BUILD_ROOT set?)" % p)

    @classmethod
    def remove_tmp(cls):
        for mp in mounts_under(cls.tmp):  # Only if a test already failed on this.
            subprocess.run(["umount", "-l", mp])
        super().remove_tmp()

    @classmethod
    def bench_argv(cls, args):
        """The bench's command line: this interpreter, the script, args, this tree's shardfs
        and bench_reader, and --workdir when the test set `workdir`."""
        argv = [sys.executable, SCRIPT] + list(args) + ["--shardfs", tl.SHARDFS,
                                                        "--bench-reader", READER]
        workdir = getattr(cls, "workdir", None)
        return argv + (["--workdir", workdir] if workdir else [])

    @classmethod
    def bench(cls, args, timeout=240):
        """Runs the bench with args (see bench_argv); returns the CompletedProcess, output as
        text."""
        return subprocess.run(cls.bench_argv(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout, text=True)

    @classmethod
    def run_bench_json(cls, name, args, timeout=240):
        """What every smoke test's setUpClass does: runs the bench with args and
        --json TMP/NAME.json, says how long it took and what it printed on stderr, and sets
        cls.json_path, cls.proc, cls.seconds and cls.report (the JSON read back, None when
        none was written; the tests then fail on the exit code)."""
        cls.json_path = os.path.join(cls.tmp, name + ".json")
        start = time.monotonic()
        try:
            cls.proc = cls.bench(list(args) + ["--json", cls.json_path], timeout=timeout)
        except subprocess.TimeoutExpired as e:
            # What the bench said up to then: which phase it was in.
            sys.stderr.write("bench %s smoke run timed out after %.0f s; its output so far:\n"
                             "%s\n%s\n" % (name, time.monotonic() - start, as_text(e.stdout),
                                           as_text(e.stderr)[-6000:]))
            raise
        cls.seconds = time.monotonic() - start
        sys.stderr.write("bench %s smoke run: %.1f s\n%s\n%s\n" % (
            name, cls.seconds, cls.proc.stdout, cls.proc.stderr[-3000:]))
        cls.report = read_json(cls.json_path)

    def assertNothingLeft(self):
        self.assertEqual(mounts_under(self.tmp), [])
        self.assertEqual(processes_mentioning(self.tmp), [])
        workdir = getattr(self, "workdir", None)
        if workdir:
            self.assertEqual(glob.glob(os.path.join(workdir, "run-*")), [])
