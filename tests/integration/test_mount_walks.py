#!/usr/bin/env python3
"""Metadata walks under the names-only listing policy.

A listing gives the kernel files' names and types only (no inode, no dentry)
until a file of the directory, or of a sibling directory, is looked up; from
then on listings carry attributes. Both kinds of walker must see the full,
correct metadata whatever the order: a names-only walk (find -type f, which
uses d_type), an lstat walk, `ls -l` of a directory listed names-only before,
a stat that arrives in the middle of a listing larger than one readdir reply,
two processes listing one directory at once, and seekdir/telldir. The
reference is the source tree (os.lstat), never the mount's own output.

Request counts come from the daemon's debug log (a line per request): they
show that the policy is in force (a stat after a names-only listing is a
LOOKUP; after the switch it is not), so these checks can fail."""

import ctypes
import os
import random
import re
import signal
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from shardfs_testlib import abort_connection  # noqa: E402

# Far more than one READDIRPLUS reply holds (each entry carries ~150 bytes of
# attributes; a reply is at most a few pages).
BIG = 3000
SMALL = 40


class MountWalksTest(tl.ScratchTestCase):
    PREFIX = "shardfs-walks-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.src = os.path.join(cls.tmp, "src")
        rnd = random.Random(15)
        dirs = {"big": BIG, "c0": SMALL, "c1": SMALL, "c2": SMALL, "c2/deep": SMALL, "c3": SMALL}
        for d, n in dirs.items():
            os.makedirs(os.path.join(cls.src, d), exist_ok=True)
            for i in range(n):
                p = os.path.join(cls.src, d, "sample_%05d.jpg" % i)
                with open(p, "wb") as f:
                    f.write(rnd.randbytes(rnd.randint(0, 3000)))
                os.chmod(p, rnd.choice([0o644, 0o600, 0o755, 0o444]))
                t = tl.BASE_TIME_S + rnd.randint(0, 10**8)
                os.utime(p, ns=(t * 10**9 + rnd.randint(0, 10**9 - 1),) * 2)
        os.symlink("c0/sample_00001.jpg", os.path.join(cls.src, "c3", "link"))
        with open(os.path.join(cls.src, "top.txt"), "wb") as f:
            f.write(b"top")
        cls.out = os.path.join(cls.tmp, "packed")
        tl.run_shardfs("pack", cls.src, "--out", cls.out, "--quiet", check=0)
        cls.idx = os.path.join(cls.out, "index")
        cls.ref = tl.walk_reference(cls.src, content=False)
        cls.quantum = tl.tar_mtime_quantum_ns()
        cls.mnt = os.path.join(cls.tmp, "mnt")
        os.mkdir(cls.mnt)

    def mount(self, options=None):
        return tl.Mount(self.idx, self.mnt, options="debug" + ("," + options if options else ""))

    def lookups(self, log):
        return len(re.findall(r"opcode: LOOKUP \(", log))

    def path(self, rel):
        return os.path.join(self.mnt, rel)

    def names(self, d):
        return sorted(os.fsdecode(os.path.basename(p)) for p in self.ref
                      if p and os.fsdecode(os.path.dirname(p)) == d)

    def check_lstat(self, rel):
        st = os.lstat(self.path(rel))
        want = self.ref[os.fsencode(rel)]
        got = tl.Entry(tl._type_of(st), st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns,
                       st.st_nlink, os.readlink(os.fsencode(self.path(rel))) if stat.S_ISLNK(st.st_mode)
                       else None, None, st.st_uid, st.st_gid, None)
        tl.compare_entry(self, rel, want, got, self.quantum)

    def find_walk(self):
        """{path: type} from d_type alone, as find -type f sees it."""
        seen = {}
        stack = [""]
        while stack:
            d = stack.pop()
            with os.scandir(self.path(d) if d else self.mnt) as it:
                for e in it:
                    rel = os.path.join(d, e.name) if d else e.name
                    if e.is_dir(follow_symlinks=False):
                        seen[rel] = "dir"
                        stack.append(rel)
                    elif e.is_symlink():
                        seen[rel] = "symlink"
                    else:
                        seen[rel] = "file" if e.is_file(follow_symlinks=False) else "other"
        return seen

    def want_types(self):
        return {os.fsdecode(p): e.type for p, e in self.ref.items() if p}

    def test_find_then_lstat_walk(self):
        with self.mount() as m:
            self.assertEqual(self.find_walk(), self.want_types())
            # find -type f itself: names and types only, no stat of a file.
            p = subprocess.run(["find", self.mnt, "-type", "f"], stdout=subprocess.PIPE,
                               check=True)
            got = sorted(os.path.relpath(x, self.mnt) for x in p.stdout.decode().split("\n") if x)
            self.assertEqual(got, sorted(k for k, v in self.want_types().items() if v == "file"))
            self.assertEqual(self.lookups(m.stderr()), 0, m.stderr()[-3000:])
            # The listings were names-only: the first stat of a file is a LOOKUP.
            before = len(m.stderr())
            self.check_lstat("c1/sample_00007.jpg")
            self.assertEqual(self.lookups(m.stderr()[before:]), 1)
            # Every file's metadata, in tree order, equals the source's.
            for rel in sorted(self.want_types()):
                self.check_lstat(rel)
            # And once more, now answered by the kernel alone.
            before = len(m.stderr())
            for rel in sorted(self.want_types()):
                self.check_lstat(rel)
            self.assertEqual(self.lookups(m.stderr()[before:]), 0)

    def test_stat_walker_switches_listings_to_attributes(self):
        with self.mount("prefill_dirs=0") as m:
            # du-like: list a directory, stat its files, go on to the next.
            self.assertEqual(sorted(os.listdir(self.path("c0"))), self.names("c0"))
            before = len(m.stderr())
            for n in self.names("c0"):
                self.check_lstat("c0/" + n)
            self.assertEqual(self.lookups(m.stderr()[before:]), SMALL)  # Listed names-only.
            # A sibling listed after the switch carries attributes, and so do
            # the directories below it.
            for d in ("c1", "c2", "c2/deep"):
                self.assertEqual(sorted(os.listdir(self.path(d))), self.names(d))
                before = len(m.stderr())
                for n in self.names(d):
                    self.check_lstat(d + "/" + n)
                self.assertEqual(self.lookups(m.stderr()[before:]), 0, d)

    def test_stat_in_the_middle_of_a_large_directory(self):
        with self.mount("prefill_dirs=0") as m:
            names = self.names("big")
            got = []
            with os.scandir(self.path("big")) as it:
                for e in it:
                    got.append(e.name)
                    if len(got) == 10:
                        # The first stat: the rest of the listing carries attributes.
                        self.check_lstat("big/" + e.name)
            self.assertEqual(sorted(got), names)
            before = len(m.stderr())
            for n in names:
                self.check_lstat("big/" + n)
            n_lookups = self.lookups(m.stderr()[before:])
            # The entries listed names-only before the switch (at most a few
            # replies) are looked up; the rest are known to the kernel.
            self.assertGreater(n_lookups, 0)
            self.assertLess(n_lookups, BIG // 2)

    def test_ls_l_of_a_directory_listed_names_only(self):
        with self.mount() as m:
            os.listdir(self.mnt)  # The kernel learns the directories from the root's listing.
            for d in ("c0", "big", "c3"):
                self.assertEqual(sorted(os.listdir(self.path(d))), self.names(d))
            self.assertEqual(self.lookups(m.stderr()), 0)
            for d in ("c0", "big", "c3"):
                p = subprocess.run(["ls", "-ln", "--time-style=+%s", self.path(d)],
                                   stdout=subprocess.PIPE, check=True)
                rows = [r.split(None, 6) for r in p.stdout.decode().splitlines()[1:]]
                self.assertEqual(sorted(r[6].split(" -> ")[0] for r in rows), self.names(d))
                for r in rows:
                    name = r[6].split(" -> ")[0]
                    want = self.ref[os.fsencode(d + "/" + name)]
                    self.assertEqual(int(r[4]), want.size, name)
                    kind = {"file": stat.S_IFREG, "symlink": stat.S_IFLNK}[want.type]
                    self.assertEqual(r[0], stat.filemode(kind | want.mode), name)
                    self.assertEqual(int(r[5]), tl.quantize_ns(want.mtime_ns, 10**9) // 10**9,
                                     name)
                for n in self.names(d):
                    self.check_lstat(d + "/" + n)

    def test_two_processes_list_one_directory(self):
        with self.mount("prefill_dirs=0"):
            lister = ("import os,sys\n"
                      "with os.scandir(sys.argv[1]) as it:\n"
                      "    print('\\n'.join(sorted(e.name for e in it)))\n")
            procs = [subprocess.Popen([sys.executable, "-c", lister, self.path("big")],
                                      stdout=subprocess.PIPE) for _ in range(2)]
            # Meanwhile this process lists it too, stat'ing as it goes.
            got = []
            with os.scandir(self.path("big")) as it:
                for e in it:
                    got.append(e.name)
                    if len(got) % 500 == 1:
                        self.check_lstat("big/" + e.name)
            for p in procs:
                out, _ = p.communicate(timeout=60)
                self.assertEqual(p.returncode, 0)
                self.assertEqual(out.decode().split("\n")[:-1], self.names("big"))
            self.assertEqual(sorted(got), self.names("big"))
            for n in self.names("big"):
                self.check_lstat("big/" + n)

    def test_seekdir_telldir(self):
        libc = ctypes.CDLL(None, use_errno=True)

        class Dirent64(ctypes.Structure):
            _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64),
                        ("d_reclen", ctypes.c_ushort), ("d_type", ctypes.c_ubyte),
                        ("d_name", ctypes.c_char * 256)]

        libc.opendir.restype = ctypes.c_void_p
        libc.opendir.argtypes = [ctypes.c_char_p]
        libc.readdir64.restype = ctypes.POINTER(Dirent64)
        libc.readdir64.argtypes = [ctypes.c_void_p]
        libc.telldir.restype = ctypes.c_long
        libc.telldir.argtypes = [ctypes.c_void_p]
        libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
        libc.closedir.argtypes = [ctypes.c_void_p]

        def read_all(d, marks=None):
            out = []
            while True:
                if marks is not None:
                    marks.append(libc.telldir(d))
                e = libc.readdir64(d)
                if not e:
                    return out
                out.append((e.contents.d_name.decode(), e.contents.d_type))
        with self.mount("prefill_dirs=0"):
            d = libc.opendir(os.fsencode(self.path("big")))
            self.assertTrue(d)
            try:
                marks = []
                first = read_all(d, marks)
                names = [n for n, _ in first if n not in (".", "..")]
                self.assertEqual(sorted(names), self.names("big"))
                self.assertTrue(all(t == 8 for n, t in first if n not in (".", "..")))
                # Stat one entry (the switch), then go back to points across
                # the listing: the same entries follow each point.
                self.check_lstat("big/" + names[0])
                for i in (len(first) - 1, 2, BIG // 2, 1, 0, BIG - 7):
                    libc.seekdir(d, marks[i])
                    self.assertEqual(read_all(d)[:20], first[i:i + 20], i)
            finally:
                libc.closedir(d)
            for n in self.names("big"):
                self.check_lstat("big/" + n)

    def test_prefill_after_a_names_only_listing(self):
        # A directory listed names-only sits in the kernel's readdir cache;
        # the prefill's listing must still reach the daemon and give the
        # kernel the entries, or every stat would stay a LOOKUP.
        with self.mount() as m:
            names = self.names("big")
            self.assertEqual(sorted(os.listdir(self.path("big"))), names)
            ino = os.stat(self.path("big")).st_ino
            for n in names[:2]:
                self.check_lstat("big/" + n)
            marker = "prefill: listed directory inode %d" % ino
            self.assertTrue(tl.wait_until(lambda: marker in m.stderr()),
                            "no prefill of big:\n" + m.stderr()[-3000:])
            before = len(m.stderr())
            for n in names:
                self.check_lstat("big/" + n)
            # Without the prefill every name is a LOOKUP (len(names) of them);
            # one racing the listing's pass over its name may still reach the
            # daemon (seen once under AddressSanitizer with tests in parallel).
            self.assertLessEqual(self.lookups(m.stderr()[before:]), 2)
            self.assertGreater(len(names), 100)

    def test_sigkill_inside_a_prefill_listing(self):
        # The prefill lists the mount from a child process that holds no
        # /dev/fuse descriptor. A daemon killed while a listing of its own
        # mount is under way then still exits: its descriptor closes, the
        # connection ends, the listing fails. (From a thread of the daemon,
        # the listing would wait for an answer only the dead daemon could
        # give, keep its descriptor open, and hang the mount until an abort.)
        names = self.names("big")
        inside = 0
        for trial in range(15):
            with tl.Mount(self.idx, self.mnt, options="debug", check_exit=False) as m:
                conn = os.minor(os.stat(self.mnt).st_dev)
                ino = os.stat(self.path("big")).st_ino
                for n in names[trial * 2:trial * 2 + 2]:  # Two misses: a listing.
                    os.lstat(self.path("big/" + n))
                # Killed once the lister's first READDIRPLUS reached the daemon.
                pat = re.compile(r"prefill: lister process (\d+) started")
                self.assertTrue(tl.wait_until(lambda: pat.search(m.stderr()), interval=0.001),
                                m.stderr()[-3000:])
                lister = int(pat.search(m.stderr()).group(1))
                readdir = re.compile(r"opcode: READDIRPLUS \(44\), nodeid: %d, .*pid: %d\b"
                                     % (ino, lister))
                self.assertTrue(tl.wait_until(lambda: readdir.search(m.stderr()), interval=0.001),
                                m.stderr()[-3000:])
                os.kill(m.pid, signal.SIGKILL)
                exited = tl.wait_until(lambda: not tl.pid_alive(m.pid), timeout=10)
                if not exited:
                    note = abort_connection(conn)
                    self.fail("daemon %d hung after SIGKILL inside a listing (%s):\n%s"
                              % (m.pid, note, m.stderr()[-3000:]))
                log = m.stderr()
                self.assertTrue(tl.wait_until(lambda: not tl.pid_alive(lister)),
                                "the lister process outlived the daemon")
                if "prefill: listed directory inode %d" % ino not in log:
                    inside += 1
            self.assertEqual(m.returncode, -signal.SIGKILL)
            if inside >= 3:
                break
        self.assertGreater(inside, 0, "no SIGKILL landed inside a listing in 15 tries")

    def test_the_lister_holds_no_fuse_descriptor_and_ends_with_the_mount(self):
        with self.mount() as m:
            for n in self.names("c1")[:2]:
                os.lstat(self.path("c1/" + n))
            pat = re.compile(r"prefill: lister process (\d+) started")
            self.assertTrue(tl.wait_until(lambda: pat.search(m.stderr())), m.stderr()[-3000:])
            pid = int(pat.search(m.stderr()).group(1))
            ino = os.stat(self.path("c1")).st_ino
            self.assertTrue(tl.wait_until(
                lambda: "prefill: listed directory inode %d" % ino in m.stderr()))
            # Between listings it holds fds 0-2 only. While it lists the
            # siblings that follow c1 it also holds the one it lists open, never
            # /dev/fuse or anything else.
            seen = []

            def only_std_fds():
                fds = {}
                for fd in os.listdir("/proc/%d/fd" % pid):
                    try:
                        fds[int(fd)] = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                    except FileNotFoundError:  # Closed while being read.
                        pass
                seen.append(fds)
                return sorted(fds) == [0, 1, 2]

            self.assertTrue(tl.wait_until(only_std_fds, timeout=10, interval=0.01), seen[-1])
            for fds in seen:
                self.assertNotIn("/dev/fuse", fds.values())
                for fd, target in fds.items():
                    if fd > 2:
                        self.assertTrue(target == self.mnt or target.startswith(self.mnt + "/"),
                                        fds)
            self.assertEqual(os.readlink("/proc/%d/cwd" % pid), "/")
        self.assertFalse(tl.pid_alive(pid), "the lister outlived the unmount")


if __name__ == "__main__":
    tl.main()
