#!/usr/bin/env python3
"""The daemon's control socket (`shardfs stats`, `shardfs cache warm`) against
hostile local users and careless clients:

- another user who binds every name it can guess before the mount (the
  abstract names "shardfs-ctl-MAJOR:MINOR" of the earlier scheme, and the
  socket files of the current one, which it has no right to create) never
  receives a byte from root's `stats` or `cache warm`, and neither hangs;
- 2,000 requests leave the daemon's thread and mapping counts as they were
  (each connection's thread is joined once it is done);
- connections beyond the cap are refused at once with a message, and the
  daemon keeps serving;
- a client that sends a request and never reads the answer cannot hold up an
  unmount;
- a control directory another user made first makes the mount fail, undone
  and with a message.

The refusal of a listener of another uid (SO_PEERCRED) is tested at unit level
(tests/unit/reader/control_socket_test.cc): nobody but the owner and root can create
a socket where the client looks, so it cannot be set up here."""

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

# Run as nobody: binds every name given, accepts every connection, reads and
# counts what arrives and never answers (the client of the earlier scheme hung
# on it). Prints "ready" once bound; prints its counts when stdin closes.
SQUATTER = r"""
import json, os, resource, selectors, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
sel = selectors.DefaultSelector()
counts = {"abstract_bound": 0, "files_bound": 0, "connections": 0, "bytes": 0}
for name in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(name.encode() if name.startswith("/") else b"\0" + name.encode())
        s.listen(64)
    except OSError:
        s.close()
        continue
    counts["files_bound" if name.startswith("/") else "abstract_bound"] += 1
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, "listen")
sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        if key.data == "stdin":
            if not os.read(sys.stdin.fileno(), 4096):
                print(json.dumps(counts), flush=True)
                sys.exit(0)
        elif key.data == "listen":
            try:
                c, _ = key.fileobj.accept()
            except BlockingIOError:
                continue
            counts["connections"] += 1
            c.setblocking(False)
            sel.register(c, selectors.EVENT_READ, "conn")
        else:
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            counts["bytes"] += len(data)
            if not data:
                sel.unregister(key.fileobj)
"""


def as_nobody(argv):
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + argv


def anon_minors():
    """Minor numbers of the anonymous devices (major 0) mounted now."""
    minors = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            major, minor = line.split()[2].split(":")
            if major == "0":
                minors.append(int(minor))
    return minors


def mount_dev(mnt):
    st = os.stat(mnt)
    return os.major(st.st_dev), os.minor(st.st_dev)


def socket_path(mnt):
    """Where the daemon of root's mount listens (see control_socket.h)."""
    return "/run/shardfs/ctl-%d:%d" % mount_dev(mnt)


def connect(s, path, timeout=10):
    """A blocking connect, which waits (at most SO_SNDTIMEO) for room in the
    listener's backlog; Python's timeout mode would make it non-blocking, and
    a full backlog then fails with EAGAIN. Then `timeout` for the rest."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", timeout, 0))
    s.connect(path)
    s.settimeout(timeout)


def request(path, words, timeout=10):
    """One request in the protocol of control_server.h; returns the answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        connect(s, path, timeout)
        s.sendall(b"".join(w + b"\0" for w in words))
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                return b"".join(chunks)
            chunks.append(data)


def threads_and_maps(pid):
    with open("/proc/%d/status" % pid) as f:
        threads = int(next(l for l in f if l.startswith("Threads:")).split()[1])
    with open("/proc/%d/maps" % pid) as f:
        maps = sum(1 for _ in f)
    return threads, maps


class ControlSocketTest(tl.ScratchTestCase):
    PREFIX = "shardfs-control-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        src = os.path.join(cls.tmp, "src")
        os.makedirs(os.path.join(src, "some", "secret", "path"))
        for i in range(4):
            with open(os.path.join(src, "some", "secret", "path", "f%d" % i), "wb") as f:
                f.write(os.urandom(5000 + i))
        shard = tl.tar_create(os.path.join(cls.tmp, "a.tar"), src, ["some"])
        cls.idx = os.path.join(cls.tmp, "idx")
        tl.build_index([shard], cls.idx)

    def mount(self, name, options=None):
        mnt = self.scratch(name)
        return tl.Mount(self.idx, mnt, options=options), mnt

    def test_squatter_never_reached(self):
        # Every name the old scheme gives the next mounts (the lowest free
        # minors of major 0), and the socket files of the current scheme.
        top = max(anon_minors(), default=0) + 512
        names = []
        for minor in range(1, top):
            names += ["shardfs-ctl-0:%d" % minor, "/run/shardfs/ctl-0:%d" % minor]
        squatter = subprocess.Popen(as_nobody([sys.executable, "-c", SQUATTER] + names),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        try:
            if squatter.stdout.readline().strip() != b"ready":
                self.fail("the squatter did not start: %s" % squatter.communicate(timeout=20)[1])
            cache = self.scratch("cache")
            m, mnt = self.mount("squatted", options="cache_dir=" + cache)
            with m:
                major, minor = mount_dev(mnt)
                self.assertEqual(major, 0)
                self.assertLess(minor, top, "the mount's device is outside the squatted names")
                try:
                    stats = tl.run_shardfs("stats", mnt, timeout=20)
                    warm = tl.run_shardfs("cache", "warm", mnt, "some/secret/path", timeout=20)
                except subprocess.TimeoutExpired as e:
                    self.fail("shardfs hung on the squatted control socket: %s" % e)
                self.assertEqual(stats.returncode, 0, stats.stderr)
                self.assertIn(b"cache", stats.stdout)
                self.assertEqual(warm.returncode, 0, warm.stderr)
                self.assertIn(b"warmed 4 files", warm.stdout)
        finally:
            out, err = squatter.communicate(input=b"", timeout=20)
        counts = json.loads(out.decode().splitlines()[-1])
        self.assertGreater(counts["abstract_bound"], 0, err)  # The squat took place.
        self.assertEqual(counts["files_bound"], 0, counts)
        self.assertEqual(counts["connections"], 0, counts)
        self.assertEqual(counts["bytes"], 0, counts)

    def test_connections_are_reaped(self):
        m, mnt = self.mount("reaped")
        with m:
            first = tl.run_shardfs("stats", mnt, check=0).stdout
            path = socket_path(mnt)
            self.assertEqual(request(path, [b"stats"]), b"ok\n" + first)
            before = threads_and_maps(m.pid)
            start = time.monotonic()
            for _ in range(2000):
                self.assertTrue(request(path, [b"stats"]).startswith(b"ok\n"))
            # The last connection's thread may still be on its way out.
            tl.wait_until(lambda: threads_and_maps(m.pid)[0] <= before[0] + 1, timeout=5)
            after = threads_and_maps(m.pid)
            self.assertLessEqual(after[0], before[0] + 1, (before, after))
            self.assertLessEqual(after[1], before[1] + 8, (before, after))
            self.assertLess(time.monotonic() - start, 60)
            tl.run_shardfs("stats", mnt, check=0)

    def test_connections_beyond_the_cap_are_refused(self):
        m, mnt = self.mount("capped")
        with m:
            tl.run_shardfs("stats", mnt, check=0)
            path = socket_path(mnt)
            held = []
            try:
                # Connected, the request never finished: each holds a slot.
                for _ in range(20):
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    held.append(s)
                    connect(s, path)
                    try:
                        s.sendall(b"stats\0")
                    except BrokenPipeError:
                        pass  # Refused and closed already: the answer is queued.
                answers = []
                for s in held[16:]:
                    answers.append(s.recv(4096))
                for a in answers:
                    self.assertTrue(a.startswith(b"error\n") and b"busy" in a, answers)
            finally:
                for s in held:
                    s.close()
            # Slots come back once the clients are gone.
            ok = tl.wait_until(lambda: tl.run_shardfs("stats", mnt).returncode == 0, timeout=10)
            self.assertTrue(ok, tl.run_shardfs("stats", mnt).stderr)

    def test_unmount_with_a_client_that_never_reads(self):
        m, mnt = self.mount("stuck")
        with m:
            tl.run_shardfs("stats", mnt, check=0)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(socket_path(mnt))
                # The answer echoes the unknown word: 8 MiB, far more than
                # the socket buffers, so the daemon blocks sending it.
                word = b"x" * (8 << 20)
                s.sendall(b"stats\0" + word + b"\0")
                s.shutdown(socket.SHUT_WR)
                time.sleep(0.5)
                start = time.monotonic()
                subprocess.run(["fusermount3", "-u", mnt], check=True, timeout=20)
                try:
                    m.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.fail("the daemon did not exit within 10 s of the unmount:\n" +
                              m.stderr())
                elapsed = time.monotonic() - start
                # What reached the client: the daemon was cut off mid-answer.
                s.settimeout(5)
                got = 0
                while True:
                    data = s.recv(1 << 20)
                    if not data:
                        break
                    got += len(data)
                self.assertLess(got, len(word), "the answer was not blocked")
                self.assertLess(elapsed, 10)
            finally:
                s.close()

    def test_mount_fails_when_another_user_holds_the_directory(self):
        # In a mount namespace of its own with an empty /run, so that nothing
        # else sees the directory: another user made /run/shardfs first.
        mnt = self.scratch("refused")
        script = ('mount -t tmpfs tmpfs /run && mkdir -m 700 /run/shardfs && '
                  'chown 65534:65534 /run/shardfs && '
                  'timeout 15 "$0" mount -f "$1" "$2"; rc=$?; '
                  'if mountpoint -q "$2"; then echo STILL-MOUNTED >&2; fi; exit $rc')
        p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                            tl.SHARDFS, self.idx, mnt],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        err = p.stderr.decode(errors="replace")
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("/run/shardfs: owned by uid 65534", err)
        self.assertIn("not mounting", err)
        self.assertNotIn("STILL-MOUNTED", err)
        self.assertFalse(os.path.ismount(mnt))


if __name__ == "__main__":
    tl.main()
