#!/usr/bin/env python3
"""shardfs.fastopen: Python's buffered open(path, "rb") under a shardfs FUSE
mount without its isatty() round trip, and nothing else changed.

The oracle for "no round trip" is the daemon's own count of the requests the
kernel sent (`shardfs stats --json`, kernel_requests.ioctl): Python before
3.14 sends one FUSE_IOCTL (TCGETS) per default open(), which the same pass
shows with the original open(). Bytes are compared with the source tree.
"Unchanged" is shown against the original open(): the same objects, errors
and requests for what fastopen leaves alone (text mode, other files,
explicit buffering), and install() undone by uninstall(). The startup route
(SHARDFS_FASTOPEN and the package's .pth file) runs in fresh interpreters.
"""
import builtins
import io
import json
import os
import pathlib
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

import shardfs.fastopen as fastopen  # noqa: E402  (PYTHONPATH=<build>/src/python)

REAL_OPEN = builtins.open
PTH = os.path.join(os.environ.get("SHARDFS_SOURCE_ROOT", ""), "src", "python", "shardfs",
                   "shardfs-fastopen.pth")
OLD_PYTHON = sys.version_info < (3, 14)  # 3.14's open() skips isatty() by itself.


def ioctls(mnt):
    p = tl.run_shardfs("stats", "--json", mnt, check=0)
    return json.loads(p.stdout)["kernel_requests"]["ioctl"]


class FastopenTest(tl.ScratchTestCase):
    PREFIX = "shardfs-fastopen-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        src = os.path.join(cls.tmp, "src")
        rnd = random.Random(11)
        cls.names = []
        # Sizes around the 4 KiB buffer: empty, under, at, over, many buffers.
        for i, size in enumerate([0, 1, 4095, 4096, 4097, 70000] + [rnd.randrange(1, 20000)
                                                                    for _ in range(34)]):
            rel = "d%d/f%03d.bin" % (i % 3, i)
            os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
            tl.write_file(os.path.join(src, rel), rnd.randbytes(size))
            cls.names.append(rel)
        tl.write_file(os.path.join(src, "notes.txt"), "one\ntwo\r\nthree\n".encode())
        cls.src = src
        os.makedirs(os.path.join(cls.tmp, "shards"))
        shards = tl.tar_into_shards(src, os.path.join(cls.tmp, "shards"), 2)
        cls.idx = os.path.join(cls.tmp, "idx")
        tl.build_index(shards, cls.idx)

    def setUp(self):
        self.addCleanup(fastopen.uninstall)
        self.assertIs(builtins.open, REAL_OPEN)

    def want(self, rel):
        with REAL_OPEN(os.path.join(self.src, rel), "rb") as f:
            return f.read()

    @unittest.skipUnless(OLD_PYTHON, "Python 3.14's open() sends no IOCTL by itself")
    def test_binary_reads_send_no_ioctl_and_give_the_same_bytes(self):
        self.assertTrue(fastopen.install())
        mnt = self.scratch("mnt")
        # Mounted after install(): seen at the next open (the mount table's poll).
        with tl.Mount(self.idx, mnt):
            self.assertIn(os.path.realpath(mnt), fastopen.shardfs_mounts())
            paths = [os.path.join(mnt, n) for n in self.names]
            before = ioctls(mnt)
            for n, p in zip(self.names, paths):
                with open(p, "rb") as f:
                    self.assertIsInstance(f, io.BufferedReader)
                    self.assertIsInstance(f.raw, io.FileIO)
                    self.assertEqual((f.mode, f.name, f.raw.closefd), ("rb", p, True))
                    self.assertEqual(f.read(), self.want(n), n)
                with io.open(p.encode(), "br") as f:  # io.open, bytes path, "br"
                    self.assertEqual(f.read(), self.want(n), n)
                self.assertEqual(pathlib.Path(p).read_bytes(), self.want(n), n)
            # Reads in pieces: peek, readinto, seek, tell through the buffer.
            p = os.path.join(mnt, self.names[5])
            with open(p, "rb") as f:
                self.assertEqual(f.peek(1)[:1], self.want(self.names[5])[:1])
                buf = bytearray(5000)
                self.assertEqual(f.readinto(buf), 5000)
                f.seek(-10, os.SEEK_END)
                self.assertEqual(f.read(), self.want(self.names[5])[-10:])
                self.assertEqual(f.tell(), 70000)
            self.assertEqual(ioctls(mnt) - before, 0)
            # A relative path, from a working directory inside the mount.
            cwd = os.getcwd()
            os.chdir(os.path.join(mnt, "d0"))
            try:
                with open(os.path.basename(self.names[0]), "rb") as f:
                    self.assertEqual(f.read(), self.want(self.names[0]))
            finally:
                os.chdir(cwd)
            self.assertEqual(ioctls(mnt) - before, 0)
            # The same pass with the original open(): one IOCTL per open().
            fastopen.uninstall()
            self.assertIs(builtins.open, REAL_OPEN)
            self.assertIs(io.open, REAL_OPEN)
            before = ioctls(mnt)
            for p in paths:
                with open(p, "rb") as f:
                    f.read()
            self.assertEqual(ioctls(mnt) - before, len(paths))

    @unittest.skipUnless(OLD_PYTHON, "Python 3.14's open() sends no IOCTL by itself")
    def test_a_forked_child_keeps_it(self):
        mnt = self.scratch("mnt")
        with tl.Mount(self.idx, mnt):
            self.assertTrue(fastopen.install())
            before = ioctls(mnt)
            pid = os.fork()
            if pid == 0:  # The child: exit 0 only if every byte matches.
                ok = True
                for n in self.names:
                    with open(os.path.join(mnt, n), "rb") as f:
                        ok = ok and f.read() == self.want(n)
                os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(status), 0)
            self.assertEqual(ioctls(mnt) - before, 0)

    def test_everything_else_is_the_original_open(self):
        mnt = self.scratch("mnt")
        with tl.Mount(self.idx, mnt):
            notes = os.path.join(mnt, "notes.txt")
            one = os.path.join(mnt, self.names[3])

            def requests_of(fn):
                before = ioctls(mnt)
                out = fn()
                return out, ioctls(mnt) - before

            def text():
                with open(notes, encoding="utf-8", newline="") as f:
                    return (f.read(), f.line_buffering, f.buffer.raw.name, f.mode)

            def explicit():
                with open(one, "rb", buffering=0) as f:
                    return (type(f), f.read())

            def by_fd():
                fd = os.open(one, os.O_RDONLY)
                with open(fd, "rb") as f:
                    return (type(f), f.read())

            def line_buffered():
                with open(notes, "r", buffering=1) as f:
                    return (f.readlines(), f.line_buffering)

            cases = [text, explicit, by_fd, line_buffered]
            original = [requests_of(fn) for fn in cases]
            self.assertEqual(original[0][1], 1 if OLD_PYTHON else 0)  # text mode asks isatty()
            fastopen.install()
            self.assertEqual([requests_of(fn) for fn in cases], original)

            # Outside the mount: the original open() gets the same arguments.
            seen = []
            real = fastopen._original_open

            def spy(*args):
                seen.append(args)
                return real(*args)
            fastopen._original_open = spy
            try:
                outside = os.path.join(self.src, self.names[3])
                with open(outside, "rb") as f:
                    self.assertEqual(f.read(), self.want(self.names[3]))
            finally:
                fastopen._original_open = real
            self.assertEqual(seen, [(outside, "rb", -1, None, None, None, True, None)])

    def test_errors_are_the_original_ones(self):
        mnt = self.scratch("mnt")
        with tl.Mount(self.idx, mnt):
            def opener_fails(path, flags):
                raise PermissionError(13, "refused by the opener", path)

            calls = [
                ((os.path.join(mnt, "d0", "missing.bin"), "rb"), {}),
                ((os.path.join(mnt, "d0"), "rb"), {}),
                ((os.path.join(mnt, "nodir", "x"), "rb"), {}),
                ((os.path.join(mnt, self.names[0]) + "\0x", "rb"), {}),
                ((os.path.join(mnt, self.names[0]), "rb"), {"opener": opener_fails}),
                ((os.path.join(mnt, self.names[0]), "rb"), {"encoding": "utf-8"}),
                ((os.path.join(mnt, self.names[0]), "rb"), {"buffering": 1.5}),
                ((os.path.join(mnt, self.names[0]), "wb"), {}),
                ((os.path.join(mnt, self.names[0]), "rbx"), {}),
                ((3.5, "rb"), {}),
            ]

            def outcome(args, kwargs):
                try:
                    f = open(*args, **kwargs)
                except Exception as e:  # noqa: BLE001 - the exception is the result
                    return (type(e), str(e), getattr(e, "errno", None),
                            getattr(e, "filename", None))
                f.close()
                return ("opened", type(f))

            original = [outcome(a, k) for a, k in calls]
            self.assertTrue(all(o[0] != "opened" for o in original), original)
            fastopen.install()
            self.assertEqual([outcome(a, k) for a, k in calls], original)

    def test_startup_route_is_opt_in(self):
        self.assertTrue(os.path.exists(PTH), PTH)
        site_dir = self.scratch("site")
        with REAL_OPEN(PTH, "rb") as f, REAL_OPEN(os.path.join(site_dir, "x.pth"), "wb") as g:
            g.write(f.read())
        # What `site` does for site-packages at startup: read its .pth files.
        probe = ("import site, sys, builtins; site.addsitedir(sys.argv[1]); "
                 "m = sys.modules.get('shardfs.fastopen'); "
                 "print(m is not None and m.installed(), 'shardfs' in sys.modules)")
        for value, want in (("1", "%s True" % OLD_PYTHON), ("0", "False False"),
                            (None, "False False")):
            env = dict(os.environ)
            env.pop(fastopen.ENV_VAR, None)
            if value is not None:
                env[fastopen.ENV_VAR] = value
            p = subprocess.run([sys.executable, "-c", probe, site_dir], env=env,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual((p.returncode, p.stdout.strip()), (0, want), (value, p.stderr))


if __name__ == "__main__":
    tl.main()
