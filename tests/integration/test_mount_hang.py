#!/usr/bin/env python3
"""Concurrent cold reads must never hang the mount (a regression test).

The daemon used to store the files after a read into the kernel's page cache
(FUSE_NOTIFY_STORE) from the request worker right after replying; the kernel
then waited for a page lock held by a reader whose own READ sat in the queue
for a worker, and mount, readers and daemon hung for good (workers in D state,
SIGKILL ignored, only the fusectl abort freed them).

Dataset: 6,000 files of 2-24 KB (seeded random bytes) in 6 directories, packed
with `shardfs pack --shard-size 4M` (shards in tree order, as users have them).
Each run is a fresh mount (a cold FUSE page cache, which is what the hang
needs) read by separate reader processes, which together read every file
exactly once and check its size and SHA-256 against the source tree. Before
a run with the default options (16 workers) the system's page cache is
dropped too: shards read from disk widen the window in which every worker
can block: on the daemon of e43b260 default-option runs hung only so (1 in 8
with 16 sequential readers, 3 in 8 with 32; none in 20 with the shards
cached). With 1 or 2 workers 22 of the 25 runs hung with the shards cached,
so those runs keep the cache, and the test stays short. Patterns:
  sequential  reader i of N reads every N-th file in name order;
  skipping    read 3 files, jump 300 ahead, wrapping round until every file
              is read; the order is cut into N consecutive parts;
  shuffled    a seeded permutation cut into N consecutive parts.
Runs (37): first those named in the issue (default options with 16 sequential
readers, threads=1 with 1 skipping reader, threads=2 with 4 sequential and
with 8 shuffled readers), then the rest of the full cross product of options
threads=1, threads=2 and the default, 1, 4, 16 and 32 readers, and the three
patterns.

A run that stalls (no reader finishes a file for STALL_S) or outlasts RUN_S
is a hang: the test aborts its own FUSE connection through fusectl
(connection id = minor of the mountpoint's st_dev, taken before the readers
start), kills its readers, detaches the mount (fusermount3 -u -z), reaps the
daemon by its PID and fails naming options, readers and pattern. After
MAX_HANGS hangs, and once a run has failed any run that could end after
BUDGET_S, the remaining runs are not started (the failure lists them), so a
failing test ends, cleaned up, inside meson's timeout; SIGTERM (meson's
timeout) runs the same cleanup. Only processes this test started are
signalled, by PID; no mount is left behind, which the test checks.

Needs root and /dev/fuse, like every mount test; fails (never skips) without."""

import hashlib
import multiprocessing
import multiprocessing.connection
import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from shardfs_testlib import abort_connection  # noqa: E402

DIRS = 6
FILES_PER_DIR = 1000
MIN_SIZE, MAX_SIZE = 2 * 1024, 24 * 1024
SHARD_SIZE = "4M"
SKIP_RUN, SKIP_JUMP = 3, 300

# The sanitizer build is several times slower; the bounds only matter when
# something is wrong, so they are generous either way.
SLOW = 2 if os.environ.get("SHARDFS_SANITIZED") == "1" else 1
RUN_S = 60.0 * SLOW    # Longest a run may take.
STALL_S = 15.0 * SLOW  # Longest no reader may finish a file.
MAX_HANGS = 3
# meson's timeout is 300 s; once a run has failed, no run starts that could
# end after BUDGET_S, so a failing test still ends, and cleans up, by itself.
BUDGET_S = 240.0

OPTIONS = ["threads=1", "threads=2", None]  # None: the defaults.
READERS = [1, 4, 16, 32]
PATTERNS = ["sequential", "skipping", "shuffled"]
# The runs of the original hang report come first, so that a failure names them.
ISSUE_RUNS = [(None, 16, "sequential"), ("threads=1", 1, "skipping"),
              ("threads=2", 4, "sequential"), ("threads=2", 8, "shuffled")]

class Terminated(Exception):
    """SIGTERM (meson's timeout): unwinds so that cleanup still runs."""


def _on_sigterm(signum, frame):
    raise Terminated("SIGTERM")


def reader_orders(n, readers, pattern, seed):
    """The file indices each reader reads, in order; together every index of
    range(n) exactly once."""
    if pattern == "sequential":
        return [list(range(i, n, readers)) for i in range(readers)]
    if pattern == "skipping":
        step = SKIP_RUN + SKIP_JUMP
        order = [k for start in range(0, step, SKIP_RUN)
                 for base in range(start, n, step)
                 for k in range(base, min(base + SKIP_RUN, n))]
    elif pattern == "shuffled":
        order = list(range(n))
        random.Random(seed).shuffle(order)
    else:
        raise ValueError(pattern)
    cuts = [n * i // readers for i in range(readers + 1)]
    return [order[cuts[i]:cuts[i + 1]] for i in range(readers)]


def reader_main(mnt, items, slot, progress, err_path):
    """One reader process: reads `items` ((rel, size, sha256) each) through
    the mount, counting finished files in progress[slot]; the first problem
    goes to err_path and ends the process with status 1."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    rel = None
    try:
        for rel, size, want in items:
            with open(os.path.join(mnt, rel), "rb", buffering=0) as f:
                data = f.read()
            if len(data) != size:
                raise AssertionError("read %d bytes, the source has %d" % (len(data), size))
            if hashlib.sha256(data).hexdigest() != want:
                raise AssertionError("content differs from the source (%d bytes)" % size)
            progress[slot] += 1
    except BaseException as e:  # The parent reports it.
        with open(err_path, "w") as f:
            f.write("%s: %s: %s" % (rel, type(e).__name__, e))
        os._exit(1)


def drop_caches():
    """Empties the system's page cache (the shards are clean: pack fsyncs)."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    except OSError as e:
        raise RuntimeError("cannot drop the page cache (%s): the runs with the default "
                           "options need shards read from disk" % e) from e


def mounted_below(root):
    """Mount points in /proc/self/mountinfo at or below `root`."""
    root = os.path.realpath(root)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == root or mp.startswith(root + "/"):
                out.append(mp)
    return out


def remove_unless_mounted(root):
    """Removes `root`, unless something is still mounted below it (walking a
    hung FUSE mount would hang too; the test has failed on it already)."""
    left = mounted_below(root)
    if left:
        print("leaving %s: still mounted: %s" % (root, left), file=sys.stderr)
        return
    shutil.rmtree(root, ignore_errors=True)


class MountHangTest(tl.ScratchTestCase):
    PREFIX = "shardfs-hang-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        if os.geteuid() != 0:
            raise RuntimeError("test_mount_hang needs root (fusectl abort of a hung mount)")
        cls.src = os.path.join(cls.tmp, "src")
        rnd = random.Random(10)
        for d in range(DIRS):
            sub = os.path.join(cls.src, "class%02d" % d)
            os.makedirs(sub)
            for i in range(FILES_PER_DIR):
                with open(os.path.join(sub, "img%04d.bin" % i), "wb") as f:
                    f.write(rnd.randbytes(rnd.randint(MIN_SIZE, MAX_SIZE)))
        # The reference: the source files as written, in name order.
        cls.files = []
        for d in sorted(os.listdir(cls.src)):
            for name in sorted(os.listdir(os.path.join(cls.src, d))):
                rel = d + "/" + name
                full = os.path.join(cls.src, rel)
                cls.files.append((rel, os.path.getsize(full), tl.sha256_file(full)))
        out = os.path.join(cls.tmp, "packed")
        tl.run_shardfs("pack", cls.src, "--out", out, "--shard-size", SHARD_SIZE, "--quiet",
                       check=0)
        cls.idx = os.path.join(out, "index")
        shards = [n for n in os.listdir(out) if n.endswith(".tar")]
        if len(shards) < 10:
            raise AssertionError("expected ~20 shards of %s, got %d" % (SHARD_SIZE, len(shards)))
        cls.runs = ISSUE_RUNS + [(o, r, p) for o in OPTIONS for r in READERS for p in PATTERNS
                                 if (o, r, p) not in ISSUE_RUNS]

    @classmethod
    def remove_tmp(cls):
        # Walking a hung FUSE mount would hang too.
        remove_unless_mounted(cls.tmp)

    def one_run(self, k, options, readers, pattern):
        """Mounts, reads every file with `readers` processes in `pattern`.
        Returns None, or a failure text (a hang says "HANG")."""
        label = "options=%s readers=%d pattern=%s" % (options or "(default)", readers, pattern)
        mnt = os.path.join(self.tmp, "mnt%02d" % k)
        os.mkdir(mnt)
        ctx = multiprocessing.get_context("fork")
        progress = ctx.Array("q", readers, lock=False)
        orders = reader_orders(len(self.files), readers, pattern, seed=k)
        errs = [os.path.join(self.tmp, "run%02d-reader%02d.err" % (k, i)) for i in range(readers)]
        procs = []
        if options is None:
            drop_caches()
        with tl.Mount(self.idx, mnt, options=options) as m:
            # Taken before any reader starts: a hung mount cannot be stat'ed.
            conn = os.minor(os.stat(mnt).st_dev)
            hang = None
            start = time.monotonic()
            sys.stdout.flush()  # Or each forked reader flushes the buffers again.
            sys.stderr.flush()
            try:
                for i, order in enumerate(orders):
                    items = [self.files[j] for j in order]
                    p = ctx.Process(target=reader_main, args=(mnt, items, i, progress, errs[i]))
                    p.start()
                    procs.append(p)
                last, last_change = -1, time.monotonic()
                while True:
                    alive = [p.sentinel for p in procs if p.is_alive()]
                    if not alive:
                        break
                    # Wakes when a reader ends, else every 0.1 s for the
                    # stall and run bounds: a run ends as its last reader does.
                    multiprocessing.connection.wait(alive, timeout=0.1)
                    now = time.monotonic()
                    done = sum(progress)
                    if done != last:
                        last, last_change = done, now
                    if now - last_change > STALL_S:
                        hang = "no file finished for %.0f s" % STALL_S
                    elif now - start > RUN_S:
                        hang = "not finished after %.0f s" % RUN_S
                    if hang:
                        break
            finally:
                if hang is not None or any(p.is_alive() for p in procs):
                    note = self.abort(m, conn, mnt, procs)
                    if hang is None:  # An exception (or SIGTERM) is on its way.
                        hang = "interrupted"
            if hang is not None:
                m.check_exit = False  # Aborted: the daemon's status is not the finding.
                stuck = ["reader %d: %d of %d" % (i, progress[i], len(orders[i]))
                         for i in range(readers) if progress[i] < len(orders[i])]
                return ("HANG with %s: %s after %.1f s, %d of %d files read (%s); %s; "
                        "daemon exited %s; daemon log tail:\n%s" % (
                            label, hang, time.monotonic() - start, sum(progress),
                            len(self.files), ", ".join(stuck[:8]) + (
                                ", %d more" % (len(stuck) - 8) if len(stuck) > 8 else ""),
                            note, m.proc.returncode, m.stderr()[-1500:]))
            elapsed = time.monotonic() - start
            for p in procs:
                p.join()
            problems = []
            for i, p in enumerate(procs):
                if p.exitcode != 0:
                    why = ""
                    if os.path.exists(errs[i]):
                        with open(errs[i]) as f:
                            why = f.read()
                    problems.append("reader %d exited %s: %s" % (i, p.exitcode, why))
            if not problems and sum(progress) != len(self.files):
                problems.append("%d of %d files read" % (sum(progress), len(self.files)))
            if m.proc.poll() is not None:
                problems.append("the daemon exited %d:\n%s" % (m.proc.returncode, m.stderr()))
        print("  %-52s %5.1f s" % (label, elapsed), file=sys.stderr, flush=True)
        if problems:
            return "%s: %s" % (label, "; ".join(problems))
        return None

    def abort(self, m, conn, mnt, procs):
        """A hung run: abort its FUSE connection, kill its readers, detach the
        mount, reap the daemon. Returns what was done, for the message."""
        notes = [abort_connection(conn)]
        for p in procs:
            if p.is_alive():
                p.kill()  # Only readers this test started, by PID.
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                notes.append("reader pid %d did not die" % p.pid)
        subprocess.run(["fusermount3", "-u", "-z", mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        try:
            m.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            m.proc.kill()  # The daemon this test started, by PID.
            try:
                m.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                notes.append("daemon pid %d did not exit" % m.proc.pid)
        return ", ".join(notes)

    def test_concurrent_cold_reads_finish(self):
        failures, hangs, not_run = [], 0, []
        start = time.monotonic()
        for k, (options, readers, pattern) in enumerate(self.runs):
            if failures and (hangs >= MAX_HANGS or
                             time.monotonic() - start + RUN_S > BUDGET_S):
                not_run = self.runs[k:]
                break
            failure = self.one_run(k, options, readers, pattern)
            if failure:
                failures.append(failure)
                hangs += failure.startswith("HANG")
        self.assertEqual(mounted_below(self.tmp), [], "mounts left behind")
        if failures:
            if not_run:
                failures.append("not run after %d failures (%d hangs): %s" % (
                    len(failures), hangs, ", ".join(
                        "%s/%d/%s" % (o or "(default)", r, p) for o, r, p in not_run)))
            self.fail("%d of %d runs failed, %d hung, %d not run:\n\n%s" % (
                len(failures) - bool(not_run), len(self.runs), hangs, len(not_run),
                "\n\n".join(failures)))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _on_sigterm)
    tl.main()
