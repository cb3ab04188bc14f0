"""Processes and mounts. Everything started is recorded here so cleanup can end it, and only it."""

import os
import shutil
import signal
import subprocess
import tempfile
import time

from bench_common import BenchError, log


class Registry:
    def __init__(self):
        self.mounts = []  # Mount objects still mounted (or whose daemon still runs).
        self.procs = set()  # Popen objects of running readers / builders (own sessions).

    def cleanup(self):
        for p in list(self.procs):
            kill_group(p)
        for m in list(reversed(self.mounts)):
            try:
                m.unmount()
            except Exception as e:  # Keep going: every other mount must still go.
                log(f"cleanup: {m.mountpoint}: {e}")


REG = Registry()


def kill_group(p):
    """SIGKILL the process group of a child we started in its own session, and reap it."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log(f"process {p.pid} did not exit after SIGKILL")
    REG.procs.discard(p)


def run_tool(argv, timeout=None, log_path=None):
    """Runs a command in its own session; returns (rc, stdout, stderr, seconds). rc None = timeout."""
    out = open(log_path, "ab") if log_path else None
    try:
        start = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE,
                             stderr=out if out else subprocess.PIPE, start_new_session=True)
        REG.procs.add(p)
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            return None, b"", b"", time.perf_counter() - start
        secs = time.perf_counter() - start
        REG.procs.discard(p)
        return p.returncode, so, se or b"", secs
    finally:
        if out:
            out.close()


def run_measured(argv, timeout=None, log_path=None, with_io=False):
    """run_tool for a command whose cost is the figure: returns (rc, seconds, cpu seconds
    (user + system, children included), peak RSS in bytes), and with_io, then bytes read from
    the disk (block input: page-cache misses). rc None = timeout."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        start = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=True)
        REG.procs.add(p)
        deadline = None if timeout is None else start + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                kill_group(p)
                return (None, time.perf_counter() - start, 0.0, 0) + ((0,) if with_io else ())
            time.sleep(0.05)
        secs = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)
        REG.procs.discard(p)
        res = (p.returncode, secs, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024)
        return res + ((ru.ru_inblock * 512,) if with_io else ())
    finally:
        if log_path:
            out.close()


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            if decode_mountinfo_path(line.split()[4]) == path:
                return True
    return False


def decode_mountinfo_path(field):
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = bytearray(), 0
    while i < len(field):
        if field[i] == 0x5C and field[i + 1:i + 4].isdigit() and i + 4 <= len(field):
            out.append(int(field[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return os.fsdecode(bytes(out))


def mounts_under(prefix):
    prefix = os.path.realpath(prefix).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            p = decode_mountinfo_path(line.split()[4])
            if (p + "/").startswith(prefix):
                found.append(p)
    return found


def run_in_scratch(parent, prefix, body, keep=False, remove_instead=None):
    """Runs body(scratch) in a fresh directory under `parent` and returns its exit code (1 on
    a BenchError, 130 on Ctrl-C). Whatever happens, SIGTERM and SIGHUP included, every mount
    made through REG is unmounted, anything still mounted under the scratch dir is detached,
    and then `remove_instead` (when given) or else the scratch dir is removed, unless `keep` or
    something stays mounted."""
    def on_signal(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        return body(scratch)
    except BenchError as e:
        log(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        # Cleanup must finish even if the user presses Ctrl-C again.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        REG.cleanup()
        for mnt in mounts_under(scratch):  # Last resort for anything left under our scratch.
            subprocess.run(["umount", "-l", mnt], stderr=subprocess.DEVNULL)
        if mounts_under(scratch):
            log(f"still mounted: {mounts_under(scratch)}; scratch {scratch} kept")
        elif remove_instead:
            shutil.rmtree(remove_instead, ignore_errors=True)
        elif not keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            log(f"kept {scratch}")
        signal.signal(signal.SIGINT, signal.default_int_handler)


class Mount:
    """One mount made by the bench: a FUSE daemon in the foreground or a kernel mount."""

    def __init__(self, system, mountpoint, argv, kind, log_path):
        self.system = system
        self.mountpoint = mountpoint
        self.argv = argv
        self.kind = kind  # "fuse3", "fuse2" or "kernel"
        self.log_path = log_path
        self.proc = None
        self.seconds = None
        self.mounted = False

    def mount(self, timeout):
        """Launch until the root stats and is a mountpoint. Returns seconds; raises on failure."""
        REG.mounts.append(self)
        logf = open(self.log_path, "ab")
        try:
            start = time.perf_counter()
            if self.kind == "kernel":
                rc = subprocess.run(self.argv, stdout=logf, stderr=logf, timeout=timeout).returncode
                if rc != 0:
                    raise BenchError(f"{' '.join(self.argv)} exited {rc}; see {self.log_path}: "
                                     f"{self.log_tail()}")
            else:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=logf,
                                             stderr=logf, start_new_session=True)
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    raise BenchError(f"{self.argv[0]} exited {self.proc.returncode} before "
                                     f"mounting; see {self.log_path}: {self.log_tail()}")
                if os.path.ismount(self.mountpoint):
                    os.stat(self.mountpoint)
                    break
                if time.perf_counter() - start > timeout:
                    raise TimeoutError(f"not mounted after {timeout:.0f} s")
                time.sleep(0.0002)
            self.seconds = time.perf_counter() - start
            self.mounted = True
            return self.seconds
        except BaseException:
            self.unmount()
            raise
        finally:
            logf.close()

    def log_tail(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-400:].decode(errors="replace").strip()
        except OSError:
            return ""

    def peak_rss_bytes(self):
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def unmount(self):
        if is_mounted(self.mountpoint):
            if self.kind == "kernel":
                attempts = [["umount", self.mountpoint], ["umount", "-l", self.mountpoint]]
            else:
                fm = "fusermount3" if self.kind == "fuse3" else "fusermount"
                attempts = [[fm, "-u", self.mountpoint]]
                if os.geteuid() == 0:
                    attempts.append(["umount", self.mountpoint])
                attempts.append([fm, "-u", "-z", self.mountpoint])
            for argv in attempts:
                if shutil.which(argv[0]) is None:
                    continue
                subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if not is_mounted(self.mountpoint):
                    break
            if is_mounted(self.mountpoint):
                log(f"could not unmount {self.mountpoint}")
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log(f"{self.argv[0]} (pid {self.proc.pid}) still running after unmount; "
                    "sending SIGTERM")
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self.mounted = False
        if self in REG.mounts:
            REG.mounts.remove(self)
