"""Shared helpers of the shardfs integration tests (Python 3 stdlib only).

The reference model is always the source tree itself (what tar archived), read
with os.lstat/os.readlink, never the code's own output.

- make_hostile_tree(root): a tree with every awkward case we know of.
- tar_into_shards(src, out_dir, n): the tree as n GNU tar (posix) shards.
- walk_reference(root): {path bytes: Entry} for every path below root.
- Mount: `shardfs mount -f` as a context manager that always unmounts.
- run_shardfs(...): the CLI, with bytes arguments and captured output.
- ScratchTestCase: a test class with one temporary folder for its tests.
- ThreeShardFixture: three small shards and their index (mount error tests).
- source_files, mmap_worker, settled_fds: concurrent readers and the
  daemon's descriptors (mount concurrency and stress tests).
- abort_connection(conn): aborts a hung FUSE connection through fusectl.
- warm_pass(take): a pass that counts requests, taken again while the page
  cache lost pages during it (/proc/vmstat), and what it lost.
- apply_view and friends: the view contract's reference model (view tests).

Test files import helpers from here only, never from each other.
"""

import collections
import fnmatch
import hashlib
import json
import logging
import mmap
import os
import random
import re
import shutil
import stat
import subprocess
import tempfile
import time
import unittest

SHARDFS = os.environ.get("SHARDFS", "")

# A fixed base time so mtimes are far from "now" and differ from ctimes.
BASE_TIME_S = 1_600_000_000


def require_shardfs():
    """Fails loudly (never skips) if the binary under test is not there."""
    if not SHARDFS or not os.access(SHARDFS, os.X_OK):
        raise RuntimeError(
            "SHARDFS must name the built shardfs binary (meson test sets it); got %r" % SHARDFS)


def require_fuse():
    """Fails loudly if FUSE cannot be used here: a FUSE test never skips."""
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
    except OSError as e:
        raise RuntimeError("/dev/fuse is unusable (%s): FUSE tests cannot run" % e) from e
    os.close(fd)
    if shutil.which("fusermount3") is None:
        raise RuntimeError("fusermount3 not found: FUSE tests cannot run")


def run_shardfs(*args, check=None, timeout=120, **kw):
    """Runs shardfs with `args` (str or bytes). Returns CompletedProcess with
    bytes stdout/stderr. check=N asserts the exit code is N."""
    require_shardfs()
    argv = [SHARDFS] + [a if isinstance(a, bytes) else str(a) for a in args]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, **kw)
    if check is not None and p.returncode != check:
        raise AssertionError("shardfs %r exited %d, expected %d\nstdout: %s\nstderr: %s" % (
            args, p.returncode, check, p.stdout[-4000:], p.stderr[-4000:]))
    return p


def json_lines(data):
    """Parses JSON Lines output; paths/targets come back as raw bytes."""
    out = []
    for line in data.decode("utf-8").splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        for k in ("path", "target"):
            if k in obj and isinstance(obj[k], str):
                obj[k] = os.fsencode(obj[k])
        out.append(obj)
    return out


def build_index(shards, out, *extra, check=0):
    return run_shardfs("index", "build", "--quiet", "--out", out, *extra, *shards, check=check)


def index_entries(idx):
    """{path bytes: json object} for every entry of the index (root excluded)."""
    p = run_shardfs("ls", "-R", "--json", idx, check=0)
    entries = {}
    for obj in json_lines(p.stdout):
        if obj["path"] in entries:
            raise AssertionError("ls -R --json lists %r twice" % obj["path"])
        entries[obj["path"]] = obj
    return entries


def index_info(idx):
    p = run_shardfs("index", "info", "--json", idx, check=0)
    lines = json_lines(p.stdout)
    return lines[0], lines[1:]


# ---------------------------------------------------------------------------
# The hostile tree.

def _write(path, data, mode=0o644):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def make_hostile_tree(root, seed=1234):
    """Fills `root` (an existing empty directory) with awkward names, types,
    sizes, modes and times. Returns the number of entries created.

    Hard links are kept inside one top-level directory ("links") so that a
    shard split by top-level entry keeps every name of a file together."""
    rnd = random.Random(seed)
    r = os.fsencode(root)
    j = os.path.join

    def rbytes(n):
        return rnd.randbytes(n)

    # Nested directories, empty files, empty directories.
    os.makedirs(j(r, b"nested/a/b/c/d"))
    _write(j(r, b"nested/a/b/c/d/deep.txt"), b"deep\n")
    _write(j(r, b"nested/a/empty_file"), b"")
    os.makedirs(j(r, b"nested/empty_dir"))
    os.makedirs(j(r, b"nested/a/b/empty_sub/also_empty"))
    os.makedirs(j(r, b"empty_top_dir"))

    # Unicode and odd names.
    odd = j(r, b"names")
    os.mkdir(odd)
    for name in ["caf\u00e9.txt", "\u65e5\u672c\u8a9e", "emoji_\U0001F600\U0001F4E6.dat",
                 "with space", " leading space", "trailing space ", "-leading-dash",
                 "--double-dash", "new\nline", "tab\there", "quote'single", 'quote"double',
                 "back\\slash", "star*", "question?", "bracket[x]", "glob*?[", "semi;colon",
                 "dollar$HOME", "percent%s", "colon:name", "hash#", "tilde~", "comma,name",
                 "=equals", "..dots", ".hidden", "..."]:
        _write(j(odd, os.fsencode(name)), name.encode("utf-8") + b"\n")
    os.mkdir(j(odd, "dir with space/".encode()))
    _write(j(odd, "dir with space/inner \u00e9".encode()), b"inner")
    _write(j(odd, b"\xff\xfe.bin"), b"not utf-8 name\n")          # Not UTF-8.
    _write(j(odd, b"latin1_\xe9t\xe9"), b"latin-1 name\n")         # Not UTF-8 either.

    # Name lengths: 100 (ustar name field), 101 (one past it), 255 (NAME_MAX).
    lens = j(r, b"lengths")
    os.mkdir(lens)
    for n in (99, 100, 101, 154, 155, 156, 254, 255):
        _write(j(lens, b"n" * (n - 4) + b".txt"), b"%d\n" % n)
    os.mkdir(j(lens, b"D" * 255))
    _write(j(lens, b"D" * 255, b"F" * 255), b"255/255\n")
    # A path over 300 bytes (and one over 1000).
    p = j(lens, b"long")
    for i in range(12):
        p = j(p, (b"%02d" % i) + b"x" * 98)
    os.makedirs(p)
    _write(j(p, b"y" * 200), b"very long path\n")

    # Symlinks.
    sl = j(r, b"symlinks")
    os.mkdir(sl)
    os.mkdir(j(sl, b"target_dir"))
    _write(j(sl, b"target_dir/t.txt"), b"target\n")
    os.symlink(b"target_dir/t.txt", j(sl, b"relative"))
    os.symlink(b"../nested/a/b/c/d/deep.txt", j(sl, b"up_relative"))
    os.symlink(b"/dev/null", j(sl, b"absolute"))
    os.symlink(b"does/not/exist", j(sl, b"dangling"))
    os.symlink(b"target_dir", j(sl, b"to_dir"))
    os.symlink(b"relative", j(sl, b"chain"))
    os.symlink("caf\u00e9 \u65e5\u672c".encode(), j(sl, b"unicode_target"))
    os.symlink(b"t" * 200 + b"/" + b"u" * 200, j(sl, b"long_target"))
    os.symlink(b"\xff\xfe.bin", j(sl, b"bytes_target"))
    os.symlink(b"new\nline target", j(sl, b"newline_target"))

    # Hard links: one file with 2 names, one with 3.
    hl = j(r, b"links")
    os.makedirs(j(hl, b"sub"))
    _write(j(hl, b"two_a"), rbytes(3000))
    os.link(j(hl, b"two_a"), j(hl, b"two_b"))
    _write(j(hl, b"three_a"), rbytes(700))
    os.link(j(hl, b"three_a"), j(hl, b"three_b"))
    os.link(j(hl, b"three_a"), j(hl, b"sub/three_c"))
    _write(j(hl, b"empty_linked"), b"")
    os.link(j(hl, b"empty_linked"), j(hl, b"empty_linked2"))

    # Sizes around block boundaries, and random content.
    sz = j(r, b"sizes")
    os.mkdir(sz)
    for n in (0, 1, 2, 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536,
              65537, 131072 + 3, (1 << 20) + 7):
        _write(j(sz, b"size_%d" % n), rbytes(n))
    _write(j(sz, b"zeros_300k"), bytes(300 * 1024))

    # Modes and owners.
    md = j(r, b"modes")
    os.mkdir(md)
    _write(j(md, b"m0600"), b"secret\n", 0o600)
    _write(j(md, b"m0755"), b"#!/bin/sh\nexit 0\n", 0o755)
    _write(j(md, b"m0444"), b"read only\n", 0o444)
    _write(j(md, b"m0000"), b"no access\n", 0o000)
    _write(j(md, b"m4755"), b"setuid\n", 0o4755)
    _write(j(md, b"m2711"), b"setgid\n", 0o2711)
    os.mkdir(j(md, b"sticky1777"))
    _write(j(md, b"sticky1777/in_sticky"), b"x")
    os.chmod(j(md, b"sticky1777"), 0o1777)
    os.mkdir(j(md, b"d0700"))
    os.chmod(j(md, b"d0700"), 0o700)
    os.mkdir(j(md, b"d0555"))
    _write(j(md, b"d0555/in_ro_dir"), b"y")
    _write(j(md, b"owned"), b"owned by someone else\n")
    # Large ids need pax headers (ustar's octal field stops at 2097151).
    os.chown(j(md, b"owned"), 1234567, 7654321)
    _write(j(md, b"owned_small"), b"1000:1000\n")
    os.chown(j(md, b"owned_small"), 1000, 1000)

    # A directory of 2,000 small files.
    many = j(r, b"many")
    os.mkdir(many)
    for i in range(2000):
        _write(j(many, b"f%04d.txt" % i), rbytes(rnd.randrange(0, 200)))

    # Sample keys with several extensions, as in webdataset shards.
    smp = j(r, b"samples")
    os.mkdir(smp)
    for i in range(1, 6):
        key = b"s%03d" % i
        _write(j(smp, key + b".jpg"), b"\xff\xd8\xff\xe0" + rbytes(rnd.randrange(500, 5000)))
        _write(j(smp, key + b".json"), json.dumps({"key": key.decode(), "i": i}).encode())
        _write(j(smp, key + b".cls"), b"%d\n" % (i % 3))

    # Top-level odd names too (each top-level entry lands in one shard).
    _write(j(r, b"-top-dash"), b"top dash\n")
    _write(j(r, "top \u00e9\U0001F600".encode()), b"top unicode\n")
    _write(j(r, b"top_\xff\xfe.bin"), b"top non utf-8\n")
    _write(j(r, b"top_empty"), b"")

    # Times: every entry gets a distinct sub-second mtime (a few whole
    # seconds and one before the epoch too); directories last, deepest first,
    # since creating entries changes a directory's mtime.
    paths = []
    for dirpath, dirnames, filenames in os.walk(r):
        for n in dirnames + filenames:
            paths.append(j(dirpath, n))
    paths.sort()
    for i, p in enumerate(paths):
        if os.path.isdir(p) and not os.path.islink(p):
            continue
        ns = BASE_TIME_S * 10**9 + i * 1_000_003_917 + rnd.randrange(1, 10**9)
        if i % 97 == 0:
            ns -= ns % 10**9  # A whole second.
        os.utime(p, ns=(ns, ns), follow_symlinks=False)
    old = j(r, b"nested/before_epoch")
    _write(old, b"1969\n")
    # Whole seconds: libarchive misreads negative fractions (see test_cli).
    os.utime(old, ns=(-86_400 * 10**9 - 10**9,) * 2)
    dirs = [p for p in paths if os.path.isdir(p) and not os.path.islink(p)]
    dirs.sort(key=lambda p: -p.count(b"/"))
    for i, p in enumerate(dirs):
        ns = BASE_TIME_S * 10**9 - (i + 1) * 7_777_777_777 + rnd.randrange(1, 10**9)
        os.utime(p, ns=(ns, ns))
    os.chmod(j(md, b"d0555"), 0o555)
    return len(paths) + 1


# ---------------------------------------------------------------------------
# Shards.

def tar_into_shards(src, out_dir, n, prefix="shard"):
    """Splits the top-level entries of `src` (sorted by name) round-robin into
    `n` GNU tar --format=posix shards, each made with `tar -C src`; the union
    of the shards is the tree (without its root directory). Returns the shard
    paths in order."""
    names = sorted(os.listdir(os.fsencode(src)))
    if len(names) < n:
        raise ValueError("%d top-level entries cannot fill %d shards" % (len(names), n))
    shards = []
    for i in range(n):
        part = names[i::n]
        out = os.path.join(out_dir, "%s-%03d.tar" % (prefix, i))
        tar_create(out, src, part)
        shards.append(out)
    return shards


def tar_create(out, src, members, extra=()):
    """`tar --format=posix -c` of `members` (bytes or str, relative to src)."""
    argv = ["tar", "--format=posix", "--sort=name", "-cf", out, *extra, "-C", src, "--"]
    argv += [os.fsencode(m) for m in members]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError("tar failed (%d): %s" % (p.returncode, p.stderr.decode(errors="replace")))
    return out


def tar_mtime_quantum_ns():
    """The mtime resolution, in ns, that `tar --format=posix` keeps here
    (probed: a file with a 9-digit fraction is archived, the pax record read
    back). 1 means nanoseconds are kept."""
    import tarfile
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "probe")
        _write(f, b"x")
        os.utime(f, ns=(BASE_TIME_S * 10**9 + 123456789,) * 2)
        t = tar_create(os.path.join(d, "probe.tar"), d, ["probe"])
        with tarfile.open(t, format=tarfile.PAX_FORMAT) as tf:
            m = tf.getmember("probe")
            raw = m.pax_headers.get("mtime")
        if raw is None:
            return 10**9
        frac = raw.partition(".")[2]
        return 10 ** (9 - len(frac))


def quantize_ns(ns, q):
    return ns - (ns % q) if q > 1 else ns


# ---------------------------------------------------------------------------
# The reference walker.

Entry = collections.namedtuple(
    "Entry", "type size mode mtime_ns nlink target sha256 uid gid ino")


def _type_of(st):
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "other"


def sha256_file(path):
    # Unbuffered (as read_file): Python's default open() asks isatty(), which
    # a FUSE mount answers as one more request per file (FUSE_IOCTL, never
    # cached by the kernel); an explicit buffering skips it. The same bytes.
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def walk_reference(root, content=True):
    """{relative path bytes: Entry} for every path below `root` (the root
    itself is b""). Uses only os.lstat/os.readlink/open; never follows
    symlinks. `ino` is the (st_dev, st_ino) pair, for hard link identity."""
    root = os.fsencode(root)
    out = {}

    def visit(rel):
        full = os.path.join(root, rel) if rel else root
        st = os.lstat(full)
        t = _type_of(st)
        target = os.readlink(full) if t == "symlink" else None
        digest = sha256_file(full) if (content and t == "file") else None
        out[rel] = Entry(t, st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_nlink,
                         target, digest, st.st_uid, st.st_gid, (st.st_dev, st.st_ino))
        if t == "dir":
            for name in sorted(os.listdir(full)):
                visit(os.path.join(rel, name) if rel else name)

    visit(b"")
    return out


def list_dirs(ref):
    """{dir path: sorted child names} from a walk_reference result."""
    kids = {p: [] for p, e in ref.items() if e.type == "dir"}
    for p in ref:
        if p:
            kids[os.path.dirname(p)].append(os.path.basename(p))
    return {p: sorted(v) for p, v in kids.items()}


def tree_counts(ref):
    """What an index of the tree should report: distinct inodes by type,
    content bytes (each file inode once), entries (inodes, root included)."""
    seen = {}
    for p, e in ref.items():
        seen.setdefault(e.ino, e)
    c = collections.Counter(e.type for e in seen.values())
    nbytes = sum(e.size for e in seen.values() if e.type == "file")
    return {"files": c["file"], "dirs": c["dir"], "symlinks": c["symlink"],
            "entries": len(seen), "bytes": nbytes}


def assert_same_tree(tc, want, got, skip_mtime=(), dir_mtimes=True):
    """Asserts on `tc` that two {path: Entry} trees (walk_reference, an
    index's listing) agree in everything but inode numbers: names, types,
    modes, sizes (not of directories), mtimes (except the paths in
    skip_mtime, and directories' without dir_mtimes: GNU tar gives a
    directory no member describes the time of the extraction), owners, link
    counts, targets, content, and which names share an inode."""
    tc.assertEqual(sorted(got), sorted(want), "names")
    for p, w in want.items():
        g = got[p]
        tc.assertEqual(g.type, w.type, "%r: type" % p)
        tc.assertEqual(g.mode, w.mode, "%r: mode %o vs %o" % (p, g.mode, w.mode))
        if w.type != "dir":
            tc.assertEqual(g.size, w.size, "%r: size" % p)
        if p not in skip_mtime and (dir_mtimes or w.type != "dir"):
            tc.assertEqual(g.mtime_ns, w.mtime_ns, "%r: mtime" % p)
        tc.assertEqual((g.uid, g.gid), (w.uid, w.gid), "%r: owner" % p)
        tc.assertEqual(g.nlink, w.nlink, "%r: nlink" % p)
        tc.assertEqual(g.target, w.target, "%r: target" % p)
        tc.assertEqual(g.sha256, w.sha256, "%r: content" % p)
    # Which names share an inode: both trees split the names into the same
    # groups (the names are equal, checked above). One pass per tree, not a
    # check per pair of names, which took seconds from a few hundred names.
    tc.assertEqual(inode_groups(got), inode_groups(want), "names sharing an inode")


def inode_groups(tree):
    """The names of a {path: Entry} tree grouped by inode number, as a sorted
    list of sorted lists (inode numbers themselves left out)."""
    groups = {}
    for p, e in tree.items():
        groups.setdefault(e.ino, []).append(p)
    return sorted(sorted(g) for g in groups.values())


def compare_entry(tc, label, want, got, quantum_ns=1, dir_size=False):
    """Asserts that `got` (an Entry read from the mount or an extracted copy)
    matches `want` from the source tree. Directory sizes are file-system
    specific and only compared when dir_size."""
    tc.assertEqual(got.type, want.type, "%r: type" % label)
    if want.type != "dir" or dir_size:
        tc.assertEqual(got.size, want.size, "%r: size" % label)
    tc.assertEqual(got.mode, want.mode, "%r: mode %o vs %o" % (label, got.mode, want.mode))
    tc.assertEqual(got.mtime_ns, quantize_ns(want.mtime_ns, quantum_ns), "%r: mtime_ns" % label)
    tc.assertEqual(got.nlink, want.nlink, "%r: nlink" % label)
    tc.assertEqual(got.target, want.target, "%r: symlink target" % label)
    tc.assertEqual(got.uid, want.uid, "%r: uid" % label)
    tc.assertEqual(got.gid, want.gid, "%r: gid" % label)
    if want.sha256 is not None and got.sha256 is not None:
        tc.assertEqual(got.sha256, want.sha256, "%r: content" % label)


# ---------------------------------------------------------------------------
# Mounting.

def _fusermount_u(mnt):
    return subprocess.run(["fusermount3", "-u", mnt], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)


def in_mount_table(mnt):
    """Whether the kernel lists `mnt` as a mount point. Unlike
    os.path.ismount this needs no stat of it, which fails on a mount whose
    daemon cannot answer for its root (and would leave it behind)."""
    want = os.path.realpath(mnt)
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            # The table writes space, tab, newline and backslash as \ooo.
            if len(fields) > 1 and re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)),
                                          fields[1]) == want:
                return True
    return False


def is_mounted(mnt):
    return os.path.ismount(mnt) or in_mount_table(mnt)


def unmount(mnt, tries=25):
    """Unmounts `mnt` with fusermount3 -u, retrying while it is busy; as a
    last resort detaches it lazily. Returns an error text or None."""
    last = b""
    for _ in range(tries):
        if not is_mounted(mnt):
            return None
        p = _fusermount_u(mnt)
        if p.returncode == 0 and not is_mounted(mnt):
            return None
        last = p.stderr
        time.sleep(0.2)
    if is_mounted(mnt):
        subprocess.run(["fusermount3", "-u", "-z", mnt], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
        return "fusermount3 -u %s kept failing (%s); detached lazily" % (
            mnt, last.decode(errors="replace").strip())
    return None


class MountError(AssertionError):
    pass


class Mount:
    """`shardfs mount -f IDX MNT [-o OPTS] [extra args]` for a `with` block.

    Enter starts the daemon (stderr to a temp file) and waits until MNT is a
    mount point (20 s deadline; if the daemon dies first, fails with its
    stderr). Exit always unmounts with fusermount3 -u (retrying while busy),
    waits for the daemon and kills it, by its PID only, if it does not end.
    After exit, `returncode` holds the daemon's exit code and `stderr()` its
    log; with check_exit (the default) a non-zero exit fails the test."""

    def __init__(self, idx, mnt, options=None, extra_args=(), deadline=20.0, check_exit=True):
        self.idx = idx
        self.mnt = mnt
        self.options = options
        self.extra_args = list(extra_args)
        self.deadline = deadline
        self.check_exit = check_exit
        self.proc = None
        self.returncode = None
        self._log = None

    @property
    def pid(self):
        return self.proc.pid

    def stderr(self):
        if self._log is None:
            return ""
        self._log.flush()
        with open(self._log.name, "rb") as f:
            return f.read().decode(errors="replace")

    def __enter__(self):
        require_shardfs()
        require_fuse()
        if os.path.ismount(self.mnt):
            raise MountError("%s is already a mount point" % self.mnt)
        argv = [SHARDFS, "mount", "-f"] + self.extra_args
        if self.options:
            argv += ["-o", self.options]
        argv += [self.idx, self.mnt]
        self._log = tempfile.NamedTemporaryFile(prefix="shardfs-mount-", suffix=".log")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._log)
        end = time.monotonic() + self.deadline
        try:
            while not os.path.ismount(self.mnt):
                if self.proc.poll() is not None:
                    raise MountError("shardfs mount exited %d before mounting %s:\n%s" % (
                        self.proc.returncode, self.mnt, self.stderr()))
                if time.monotonic() > end:
                    raise MountError("%s not mounted after %.0f s:\n%s" % (
                        self.mnt, self.deadline, self.stderr()))
                time.sleep(0.02)
        except BaseException:
            self._teardown()
            raise
        return self

    def _teardown(self):
        problem = unmount(self.mnt)
        if self.proc is not None:
            try:
                self.returncode = self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # Only the daemon we started.
                self.returncode = self.proc.wait(timeout=15)
                problem = (problem or "") + " daemon pid %d did not exit; killed" % self.proc.pid
        return problem

    def __exit__(self, exc_type, exc, tb):
        problem = self._teardown()
        log = self.stderr()
        if self._log is not None:
            self._log.close()
            self._log = None
        self._final_log = log
        if exc_type is not None:
            return False
        if problem:
            raise MountError("%s\n%s" % (problem, log))
        if self.check_exit and self.returncode != 0:
            raise MountError("shardfs mount exited %d after unmount:\n%s" % (
                self.returncode, log))
        return False

    def final_log(self):
        return getattr(self, "_final_log", None) or self.stderr()


class KernelMount:
    """`shardfs mount --kernel[=WHEN] [-o OPTS] IDX MNT` for a `with` block.

    The command returns once mounted (there is no daemon). Enter fails with
    its stderr unless it exits 0 with MNT mounted; `stderr` and `fstype` say
    what happened (with --kernel=auto, "fuse.shardfs" after a fallback). Exit
    always unmounts: umount(8) for the kernel mount, fusermount3 -u for a
    fallback's FUSE mount, retrying while busy, detaching lazily as a last
    resort (and then failing the test)."""

    def __init__(self, idx, mnt, options=None, when=None, cache_dir=None, extra_args=(),
                 env=None, preexec=None, shardfs=None):
        self.idx, self.mnt, self.options = idx, mnt, options
        self.shardfs = shardfs or SHARDFS
        self.flag = "--kernel" if when is None else "--kernel=" + when
        self.cache_dir = cache_dir
        self.extra_args = list(extra_args)
        self.env, self.preexec = env, preexec
        self.stderr = ""
        self.fstype = None

    def argv(self):
        opts = [self.options] if self.options else []
        if self.cache_dir:
            opts.append("cache_dir=" + self.cache_dir)
        argv = [self.shardfs, "mount", self.flag] + self.extra_args
        if opts:
            argv += ["-o", ",".join(opts)]
        return argv + [self.idx, self.mnt]

    def __enter__(self):
        require_shardfs()
        if is_mounted(self.mnt):
            raise MountError("%s is already a mount point" % self.mnt)
        p = subprocess.run(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300, env=self.env,
                           preexec_fn=self.preexec)
        self.stderr = p.stderr.decode(errors="replace")
        self.fstype = mount_fstype(self.mnt)
        if p.returncode != 0 or self.fstype is None:
            problem = kernel_unmount(self.mnt)
            raise MountError("shardfs mount %s exited %d (%s mounted):\n%s%s" % (
                self.flag, p.returncode, self.fstype, self.stderr, problem or ""))
        return self

    def __exit__(self, exc_type, exc, tb):
        problem = kernel_unmount(self.mnt)
        if problem and exc_type is None:
            raise MountError(problem)
        return False


def mount_fstype(mnt):
    """The type of the mount at `mnt` (the last one there), or None."""
    want = os.path.realpath(mnt)
    found = None
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)),
                                          fields[1]) == want:
                found = fields[2]
    return found


def kernel_unmount(mnt, tries=25):
    """Unmounts whatever is at `mnt`: umount(8) for a kernel mount,
    fusermount3 -u for a FUSE one; retries while busy. Returns an error text
    or None."""
    last = ""
    for _ in range(tries):
        fstype = mount_fstype(mnt)
        if fstype is None:
            return None
        cmd = ["fusermount3", "-u", mnt] if fstype.startswith("fuse") else ["umount", mnt]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        last = p.stderr.decode(errors="replace").strip()
        if mount_fstype(mnt) is None:
            return None
        time.sleep(0.2)
    subprocess.run(["umount", "-l", mnt], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return "could not unmount %s (%s); detached lazily" % (mnt, last)


def wait_until(pred, timeout=10.0, interval=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return pred()


# -- Warm passes: passes over files the page cache should hold ---------------
#
# A test that counts the requests of a warm pass (none but what the kernel
# never caches) must tell a pass during which pages of its files went from
# one that sent requests of its own accord. Tests run side by side, some drop
# caches, and a host may page out idle memory (a DAMON pageout scheme). These
# /proc/vmstat counters (since boot, machine-wide) say that pages were lost:
#   drop_pagecache, drop_slab   writes to /proc/sys/vm/drop_caches;
#   workingset_refault_file     file pages that reclaim evicted, read again:
#                               counted at the read, for every kind of
#                               reclaim. A DAMON pageout (the kernel's
#                               reclaim_pages(), as MADV_PAGEOUT) counts no
#                               pgsteal_* or pgscan_*: paging out a FUSE
#                               file's pages that way moved this counter alone,
#                               when the pages were read again;
#   pginodesteal, kswapd_inodesteal, workingset_nodereclaim
#                               pages lost with no refault to count (freed
#                               with a reclaimed inode, or their shadow
#                               entries reclaimed).
# pgpgout counts writes to disk, not pages lost.
REFAULT_COUNTER = "workingset_refault_file"
DROP_COUNTERS = ("drop_pagecache", "drop_slab", "pginodesteal", "kswapd_inodesteal",
                 "workingset_nodereclaim")
WARM_TRIES = 5


def page_losses():
    """The counters above, as {name: count} (those this kernel has)."""
    want = DROP_COUNTERS + (REFAULT_COUNTER,)
    found = {}
    with open("/proc/vmstat") as f:
        for line in f:
            name, _, value = line.partition(" ")
            if name in want:
                found[name] = int(value)
    return found


class PageLossWatch:
    """`with watch:` around a pass; then watch.lost is {counter: increase} of
    the counters above that moved during it ({} if none did)."""

    def __init__(self):
        self.before = None
        self.lost = None

    def __enter__(self):
        self.before = page_losses()
        return self

    def __exit__(self, *exc):
        now = page_losses()
        self.lost = {k: now[k] - v for k, v in self.before.items() if now.get(k, v) != v}
        return False


def warm_pass(take, tries=WARM_TRIES, prepare=None):
    """Runs `take(watch)` until a try during which no page was lost, at most
    `tries` times. `take` runs the pass inside `with watch:` (only the reads:
    a program it runs to count requests has pages of its own to lose) and
    returns what it counted; `prepare()`, if given, runs before each try.
    Returns (what the last try returned, what it lost: {} for a warm one)."""
    for _ in range(tries):
        if prepare:
            prepare()
        watch = PageLossWatch()
        got = take(watch)
        if watch.lost is None:
            raise AssertionError("warm_pass: take() did not enter the watch")
        if not watch.lost:
            break
    return got, watch.lost


# The kernel can also forget a few inodes of a warm tree, and their pages and
# shadow entries with them, with no counter above moving (the dentry cache's
# shrinker under the slab pressure of a compile beside the suite): seen once
# as 37 READs and 25 LOOKUPs in a warm pass of 600 files with nothing lost.
# So a pass that lost nothing visible may still send READs and LOOKUPs (and
# the FORGETs of the inodes it looked up again) for at most this share of the
# files it read; a daemon that sends one for every file still fails.
UNSEEN_LOSS_SHARE = 8
UNSEEN_LOSS_KINDS = ("read", "lookup")
# FORGETs are the kernel's, sent when it evicts an inode, and cost a reader
# nothing: the dentry shrinker may evict inodes looked up before the pass
# while it runs (seen: 221 FORGETs, no LOOKUP, in a warm pass over 600 files
# beside a compile). Each is an inode looked up once, before or during the
# pass, so there are at most as many as the pass's files and LOOKUPs.
FORGET_KINDS = ("forget", "batch_forget")
# A directory's listing is cached in its pages, which reclaim (and this kind
# of host's DAMON pageout of idle pages) may take unseen like a file's: a
# pass that walks the tree then lists a directory again (seen: 4 OPENDIRs, 8
# READDIRPLUS over 600 files beside a compile). Bounded like LOOKUPs: a
# daemon that makes the kernel list a directory per file still fails.
LISTING_KINDS = ("opendir", "readdir", "readdirplus", "releasedir")


def reads_lost_pages_allow(lost, files):
    """The most READs that `lost` (PageLossWatch.lost of a pass over `files`
    files, each under the readahead window) accounts for: a share of the
    files (UNSEEN_LOSS_SHARE) when nothing visible was lost; besides that a
    READ per refaulted page (each READ fills at least one missing page) when
    reclaim took pages; a READ per file after a drop."""
    if any(k in lost for k in DROP_COUNTERS):
        return files
    return min(files, lost.get(REFAULT_COUNTER, 0) + files // UNSEEN_LOSS_SHARE)


def assert_warm_requests(tc, spent, lost, files, expected=None):
    """Asserts that a warm pass over `files` files (each under the readahead
    window), which lost `lost` (warm_pass), sent the requests `expected`
    ({kind: count}) and no other but the READs `lost` accounts for and the
    few an unseen eviction explains (UNSEEN_LOSS_SHARE). After a drop (which
    may take dentries and inodes too), only those two."""
    expected = expected or {}
    for kind, n in expected.items():
        tc.assertEqual(spent.get(kind, 0), n, (kind, spent, lost))
    tc.assertLessEqual(spent.get("read", 0), reads_lost_pages_allow(lost, files), (spent, lost))
    forgets = sum(spent.get(kind, 0) for kind in FORGET_KINDS)
    tc.assertLessEqual(forgets, files + spent.get("lookup", 0), (spent, lost))
    if not any(k in lost for k in DROP_COUNTERS):
        tc.assertLessEqual(spent.get("lookup", 0), files // UNSEEN_LOSS_SHARE, (spent, lost))
        for kind in LISTING_KINDS:
            tc.assertLessEqual(spent.get(kind, 0), files // UNSEEN_LOSS_SHARE, (kind, spent, lost))
        allowed = set(expected) | set(UNSEEN_LOSS_KINDS) | set(FORGET_KINDS) | set(LISTING_KINDS)
        tc.assertEqual(set(spent) - allowed, set(), (spent, lost))


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except FileNotFoundError:
        return False


def main():
    """unittest.main that exits non-zero on failure, verbose for the log."""
    require_shardfs()
    unittest.main(verbosity=2)


# -- shardfs pack, shared by the test_pack*.py files -------------------------


def pack(src, out, *extra, check=0, prefix=()):
    """Runs `shardfs pack SRC --out OUT --quiet EXTRA...`, optionally behind
    a `prefix` command (setpriv)."""
    require_shardfs()
    argv = list(prefix) + [SHARDFS, "pack", src, "--out", out, "--quiet"] + list(extra)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if check is not None and p.returncode != check:
        raise AssertionError("pack %r exited %d, expected %d\nstderr: %s" % (
            extra, p.returncode, check, p.stderr.decode(errors="replace")[-4000:]))
    return p


def shards_of(out):
    return sorted(n for n in os.listdir(out) if n.endswith(".tar"))


def ls_json(idx, drop=("shard",)):
    """ls -R --json of an index, minus keys that name where the shards are."""
    p = run_shardfs("ls", "-R", "--json", idx, check=0)
    out = []
    for obj in json_lines(p.stdout):
        for k in drop:
            obj.pop(k, None)
        out.append(obj)
    return out


def make_pack_samples(parent):
    """parent/src: samples of 1 to 9 files, some over --max-files 4, beside
    files without a sample key and one file over a 16K --shard-size."""
    src = os.path.join(parent, "src")
    os.makedirs(os.path.join(src, "train"))
    os.makedirs(os.path.join(src, "val", "sub"))
    for i in range(40):
        exts = ["jpg", "json", "cls", "seg.png"][: 1 + i % 4]
        if i % 13 == 0:
            exts += ["a", "b", "c", "d", "e"]  # more files than --max-files
        for e in exts:
            size = 600 + 97 * i if e == "jpg" else 10
            _write(os.path.join(src, "train", "s%03d.%s" % (i, e)), os.urandom(size))
    for i in range(5):
        _write(os.path.join(src, "val", "v%d.txt" % i), b"v")
        _write(os.path.join(src, "val", "sub", "v%d.txt" % i), b"w")
    _write(os.path.join(src, "val", "noext"), b"n")
    _write(os.path.join(src, "val", "big.bin"), os.urandom(40000))  # over --shard-size
    return src


class ScratchTestCase(unittest.TestCase):
    """A test class with one temporary folder for all its tests (`tmp`),
    removed afterwards, and fresh folders inside it (`scratch`). Subclasses
    set PREFIX, and call super().setUpClass() first in their own setUpClass.
    The folder is removed by a class cleanup, which runs even when the rest
    of a subclass's setUpClass fails, after any tearDownClass; a subclass
    with more to undo first (a mount left by a failed test) overrides
    remove_tmp."""
    PREFIX = "shardfs-test-"

    @classmethod
    def setUpClass(cls):
        require_shardfs()
        cls.tmp = tempfile.mkdtemp(prefix=cls.PREFIX)
        cls.addClassCleanup(cls.remove_tmp)

    @classmethod
    def remove_tmp(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def scratch(self, name):
        return tempfile.mkdtemp(prefix=name + "-", dir=self.tmp)


# -- A small three-shard mount (test_mount_errors, test_mount_robust) ----------


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)


class LogRecords(logging.Handler):
    """A logging handler that keeps every record it is given (the Python
    package's messages reach the "shardfs" logger)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def read_file(path):
    with open(path, "rb", buffering=0) as f:  # No isatty() IOCTL (sha256_file).
        return f.read()


class ThreeShardFixture:
    """Three shards (a/, b/, c/ top-level dirs) and their index, in `d`."""

    def __init__(self, d, seed=7):
        rnd = random.Random(seed)
        self.d = d
        self.src = os.path.join(d, "src")
        self.content = {}
        for top in ("a", "b", "c"):
            os.makedirs(os.path.join(self.src, top, "sub"))
            for i in range(5):
                rel = "%s/f%d.bin" % (top, i)
                data = rnd.randbytes(rnd.randrange(1, 20000))
                write_file(os.path.join(self.src, rel), data)
                self.content[rel] = data
            write_file(os.path.join(self.src, top, "sub", "x.txt"), top.encode())
            self.content[top + "/sub/x.txt"] = top.encode()
        shard_dir = os.path.join(d, "shards")
        os.mkdir(shard_dir)
        self.shards = tar_into_shards(self.src, shard_dir, 3)
        self.idx = os.path.join(d, "tree.idx")
        build_index(self.shards, self.idx)
        self.mnt = os.path.join(d, "mnt")
        os.mkdir(self.mnt)

    def shard_of(self, top):
        return self.shards["abc".index(top)]


# -- Concurrent readers and the daemon's descriptors (test_mount_concurrency,
#    test_mount_stress) -----------------------------------------------------------


def source_files(src):
    """Relative paths (bytes) of the regular files below `src`, sorted."""
    out = []
    bsrc = os.fsencode(src)
    for dirpath, _, files in os.walk(bsrc):
        for f in files:
            full = os.path.join(dirpath, f)
            if not os.path.islink(full):
                out.append(os.path.relpath(full, bsrc))
    return sorted(out)


def mmap_worker(mnt, src, seconds, seed):
    """Random slices of mmap'ed files of the mount against the source.
    Prints the number of checks; exits 1 at the first mismatch."""
    rnd = random.Random(seed)
    files = [f for f in source_files(src) if os.path.getsize(os.path.join(os.fsencode(src), f))]
    bmnt, bsrc = os.fsencode(mnt), os.fsencode(src)
    checks = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rel = rnd.choice(files)
        with open(os.path.join(bsrc, rel), "rb") as f:
            want = f.read()
        with open(os.path.join(bmnt, rel), "rb") as f:
            if rnd.random() < 0.3:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                if len(mm) != len(want):
                    print("%r: mapped %d bytes, source has %d" % (rel, len(mm), len(want)))
                    return 1
                for _ in range(8):
                    off = rnd.randrange(0, len(want))
                    n = rnd.randrange(1, 70000)
                    if mm[off:off + n] != want[off:off + n]:
                        print("%r: mmap bytes [%d, +%d) differ from the source" % (rel, off, n))
                        return 1
                    checks += 1
    print(checks)
    return 0


def fd_table(pid):
    """{fd: target} of process `pid`."""
    out = {}
    d = "/proc/%d/fd" % pid
    for name in os.listdir(d):
        try:
            out[int(name)] = os.readlink(os.path.join(d, name))
        except FileNotFoundError:
            pass  # Closed meanwhile.
    return out


def split_fds(table):
    """(sorted targets of the daemon's own fds, count of per-worker-thread
    fds). libfuse gives each worker thread a /dev/fuse clone (clone_fd) and
    a splice pipe pair; threads come and go with the load, so those are
    bounded rather than compared."""
    per_thread = [t for t in table.values() if t == "/dev/fuse" or t.startswith("pipe:")]
    own = sorted(t for t in table.values() if t != "/dev/fuse" and not t.startswith("pipe:"))
    return own, len(per_thread)


def settled_fds(pid, want=None, timeout=10.0):
    """The daemon's fds (split_fds) once they stop changing, or once its own
    fds equal those of `want`; the last seen at the deadline. A background
    listing of the dentry prefill holds a directory of the mount open for a
    moment: a single look could catch it."""
    last = split_fds(fd_table(pid))
    stable_since = time.monotonic()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(0.1)
        cur = split_fds(fd_table(pid))
        if want is not None and cur[0] == want[0]:
            return cur
        if cur != last:
            last, stable_since = cur, time.monotonic()
        elif want is None and time.monotonic() - stable_since > 1.0:
            return cur
    return last


# -- Aborting a hung FUSE connection (test_mount_hang, test_mount_walks) ------

FUSECTL = "/sys/fs/fuse/connections"


def fusectl_mounted():
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == FUSECTL and line.split()[2] == "fusectl" for line in f)


def abort_connection(conn):
    """Writes 1 to the abort file of FUSE connection `conn`, mounting fusectl
    first if needed (and unmounting it again afterwards). Returns a note for
    the failure message."""
    mounted_here = False
    if not fusectl_mounted():
        p = subprocess.run(["mount", "-t", "fusectl", "fusectl", FUSECTL],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            return "cannot mount fusectl at %s: %s" % (FUSECTL, p.stdout.decode(errors="replace"))
        mounted_here = True
    try:
        path = os.path.join(FUSECTL, str(conn), "abort")
        try:
            with open(path, "w") as f:
                f.write("1")
            return "aborted FUSE connection %d" % conn
        except OSError as e:
            return "cannot abort FUSE connection %d (%s): %s" % (conn, path, e)
    finally:
        if mounted_here:
            subprocess.run(["umount", FUSECTL], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)


# -- The reference model -------------------------------------------------------
#
# A tree is {path bytes: Node}; the root is b"". Node = (type, size, sha256,
# symlink target); size and sha256 only for files.


def node_of(e):
    return (e.type, e.size if e.type == "file" else None,
            e.sha256 if e.type == "file" else None, e.target)


def tree_of_dir(root):
    """The tree below `root` (the source, or a mount), read with lstat."""
    return {p: node_of(e) for p, e in walk_reference(root).items()}


DIR = ("dir", None, None, None)


def _components(path):
    return path.split(b"/")


def _pathmatch(path, glob):
    """fnmatch(glob, path, FNM_PATHNAME): '*', '?' and '[...]' never match '/'."""
    pc, gc = _components(path), _components(glob)
    return len(pc) == len(gc) and all(fnmatch.fnmatchcase(p, g) for p, g in zip(pc, gc))


def glob_hits(path, globs):
    """Whether `path` or one of its ancestors matches one of `globs`: a glob
    without '/' matches any component's name, one with '/' the whole path."""
    comps = _components(path)
    for g in globs:
        g = os.fsencode(g)
        if b"/" not in g:
            if any(fnmatch.fnmatchcase(c, g) for c in comps):
                return True
        else:
            g = g.lstrip(b"/")
            if any(_pathmatch(b"/".join(comps[:k]), g) for k in range(1, len(comps) + 1)):
                return True
    return False


def list_hits(path, listed):
    comps = _components(path)
    return any(b"/".join(comps[:k]) in listed for k in range(1, len(comps) + 1))


def normalize_list_line(line):
    line = line.rstrip(b"\n")
    if line.startswith(b"./"):
        line = line[2:]
    elif line.startswith(b"/"):
        line = line[1:]
    return line


def children(tree):
    kids = {p: [] for p, n in tree.items() if n[0] == "dir"}
    for p in tree:
        if p:
            kids[os.path.dirname(p)].append(p)
    return kids


def apply_view(src, includes=(), include_list=(), excludes=(), exclude_list=(), renames=()):
    """The tree a `view create` of `src` gives, by the contract's rules:
    includes, then excludes, then renames; directories the filters empty are
    dropped, directories empty in the source stay unless excluded (or, with
    includes, unless nothing included them)."""
    inc_list = {normalize_list_line(os.fsencode(x)) for x in include_list}
    exc_list = {normalize_list_line(os.fsencode(x)) for x in exclude_list}
    paths = [p for p in src if p]
    if includes or inc_list:
        keep = {p for p in paths if glob_hits(p, includes) or list_hits(p, inc_list)}
        for p in list(keep):  # A directory stays if something below it stays.
            d = os.path.dirname(p)
            while d:
                keep.add(d)
                d = os.path.dirname(d)
    else:
        keep = set(paths)
    keep = {p for p in keep if not (glob_hits(p, excludes) or list_hits(p, exc_list))}
    src_kids = children(src)
    # Bottom-up: a directory that had children and lost them all goes.
    for p in sorted(keep, key=lambda p: -p.count(b"/")):
        if src[p][0] == "dir" and src_kids[p] and not any(c in keep for c in src_kids[p]):
            keep.discard(p)
    out = {b"": DIR}
    out.update({p: src[p] for p in keep})
    for old, new in renames:
        old, new = normalize_list_line(os.fsencode(old)), normalize_list_line(os.fsencode(new))
        assert old in out and new not in out, (old, new)
        if out[old][0] != "dir":
            moved = {old: out[old]}
        else:
            moved = {p: n for p, n in out.items() if p == old or p.startswith(old + b"/")}
        for p in moved:
            del out[p]
        for p, n in moved.items():
            out[new + p[len(old):]] = n
        d = os.path.dirname(new)
        while d and d not in out:
            out[d] = DIR
            d = os.path.dirname(d)
    return out


def counts(tree):
    """files, dirs (root included, as index info counts), symlinks, bytes."""
    c = {"files": 0, "dirs": 0, "symlinks": 0, "bytes": 0}
    for n in tree.values():
        if n[0] == "file":
            c["files"] += 1
            c["bytes"] += n[1]
        elif n[0] == "dir":
            c["dirs"] += 1
        elif n[0] == "symlink":
            c["symlinks"] += 1
    return c


def diff_trees(want, got, limit=20):
    """A readable account of how two trees differ ("" when equal)."""
    lines = []
    for p in sorted(set(want) | set(got)):
        if p not in got:
            lines.append("missing %r %s" % (p, want[p][0]))
        elif p not in want:
            lines.append("unexpected %r %s" % (p, got[p][0]))
        elif want[p] != got[p]:
            lines.append("differs %r: want %r got %r" % (p, want[p], got[p]))
    more = " ... and %d more" % (len(lines) - limit) if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


# -- The CLI -------------------------------------------------------------------


def view_create(idx, name, *args, check=0):
    return run_shardfs("view", "create", idx, name, *args, check=check)


def ls_tree(idx, view=None):
    """The view's tree as `ls -R --json --view` lists it (no content hashes),
    plus {path: inode}."""
    extra = ("--view", view) if view is not None else ()
    p = run_shardfs("ls", "-R", "--json", *extra, idx, check=0)
    tree, inodes = {b"": DIR}, {}
    for o in json_lines(p.stdout):
        path = o["path"]
        if path in tree and path:
            raise AssertionError("ls -R --json --view %s lists %r twice" % (view, path))
        t = o["type"]
        tree[path] = (t, o["size"] if t == "file" else None, None, o.get("target"))
        inodes[path] = o["inode"]
    return tree, inodes


def sample_of(path):
    """A file's sample: its directory and its name up to the first '.'
    (WebDataset's key; what `shardfs pack` keeps adjacent in a shard), as
    bytes."""
    d, name = os.path.split(os.fsencode(path))
    return (d, name.split(b".", 1)[0])


def samples_of(paths):
    """{sample: sorted file paths} of `paths` (files)."""
    out = {}
    for p in sorted(paths):
        out.setdefault(sample_of(p), []).append(p)
    return out


def _splitmix64(x):
    mask = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def rank_split(idx, shards, world, seed=0, view=None):
    """The rank of every file of the view when split by samples over `world`
    ranks, worked out here from `ls -R --json` after the rule that
    index/rank_partition.h states: the `shards` shards in the order a
    Fisher-Yates shuffle driven by splitmix64(seed) gives, each shard's
    samples by the (offset, inode) of their first member, cut into `world`
    runs of n // world samples; the rest are trimmed. Returns ({file path:
    rank, None when trimmed}, n // world, n)."""
    extra = ("--view", view) if view is not None else ()
    p = run_shardfs("ls", "-R", "--json", *extra, idx, check=0)
    files = {o["path"]: o for o in json_lines(p.stdout) if o["type"] == "file"}
    order, state = list(range(shards)), seed
    for i in range(shards, 1, -1):
        state = _splitmix64(state)
        j = state % i
        order[i - 1], order[j] = order[j], order[i - 1]
    per_shard = [[] for _ in range(shards)]
    for members in samples_of(files).values():
        shard = files[members[0]]["shard_id"]
        first = min((files[m]["offset"], files[m]["inode"]) for m in members
                    if files[m]["shard_id"] == shard)
        per_shard[shard].append((first, members))
    n = sum(len(x) for x in per_shard)
    q = n // world
    rank, at = {}, 0
    for shard in order:
        for _, members in sorted(per_shard[shard]):
            for m in members:
                rank[m] = at // q if at < q * world else None
            at += 1
    return rank, q, n


def without_content(tree):
    return {p: (n[0], n[1], None, n[3]) for p, n in tree.items()}


def write_lines(path, lines):
    with open(path, "wb") as f:
        for line in lines:
            f.write(os.fsencode(line) + b"\n")
    return path


REPLAY_NAMES = ["a", "b", "c", "d"]


def random_replay_path(rnd):
    """A path over a few names, so that members often meet: one replaces
    another, a file lands where a directory was, and the reverse."""
    return "/".join(rnd.choice(REPLAY_NAMES) for _ in range(rnd.randint(1, 3)))


def add_random_members(tar, rnd, n, files, cuts=(0.55, 0.75, 0.85), dangling_links=False):
    """Adds n random members over random_replay_path to the tarfile `tar`:
    files, directories, symlinks and hard links, in the shares `cuts` marks
    off (the rest are hard links). `files` lists the regular files so far,
    the hard links' targets; new files are appended to it. With
    dangling_links, hard links with no file to name (and 5% of all) name a
    random path instead, which a build must skip as tar does."""
    import io
    import tarfile
    for _ in range(n):
        p = random_replay_path(rnd)
        ti = tarfile.TarInfo(p)
        ti.mtime = rnd.randint(1, 2_000_000_000)
        ti.mode = rnd.choice([0o644, 0o600, 0o755, 0o640])
        ti.uid, ti.gid = rnd.randint(0, 3), rnd.randint(0, 3)
        kind = rnd.random()
        if kind < cuts[0]:
            data = os.urandom(rnd.randint(0, 3000))
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
            files.append(p)
        elif kind < cuts[1]:
            ti.type = tarfile.DIRTYPE
            tar.addfile(ti)
        elif kind < cuts[2]:
            ti.type = tarfile.SYMTYPE
            ti.linkname = random_replay_path(rnd)
            tar.addfile(ti)
        elif files and not (dangling_links and kind >= 0.95):
            ti.type = tarfile.LNKTYPE
            ti.linkname = rnd.choice(files)
            tar.addfile(ti)
        elif dangling_links:
            ti.type = tarfile.LNKTYPE
            ti.linkname = random_replay_path(rnd)
            tar.addfile(ti)


def regular_files(root):
    """{relative path: content} of the regular files under `root` (symlinks
    left out), for tests that read a mount's files against their source."""
    files = {}
    for dirpath, _, filenames in os.walk(root):
        for n in filenames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                files[os.path.relpath(p, root)] = read_file(p)
    return files


def random_range_reads(mnt, files, max_len, readers=16, reads=150, pick=None):
    """`readers` threads each read `reads` random ranges (up to max_len
    bytes at a random offset) of random files of `files` ({path: content},
    empty files left out) through `mnt`, every byte checked. Returns the
    problems found (an empty list: every range was right). `pick(rnd,
    names)` chooses a file, if given."""
    import concurrent.futures
    names = sorted(n for n, d in files.items() if d)

    def reader(seed):
        rnd = random.Random(seed)
        for _ in range(reads):
            name = pick(rnd, names) if pick else rnd.choice(names)
            data = files[name]
            off = rnd.randrange(len(data))
            n = rnd.randrange(1, max_len)
            with open(os.path.join(mnt, name), "rb", buffering=0) as fh:
                fh.seek(off)
                got = fh.read(n)
            if got != data[off:off + n]:
                return "%s at %d: %d bytes differ" % (name, off, n)
        return None

    with concurrent.futures.ThreadPoolExecutor(readers) as pool:
        return [p for p in pool.map(reader, range(readers)) if p]


def read_all_right_or_eio(test, mnt, files):
    """Reads every file of `files` ({path: content}) through `mnt`: each gives
    its content or EIO, never other bytes. Returns how many gave EIO."""
    eio = 0
    for rel, data in sorted(files.items()):
        try:
            got = read_file(os.path.join(mnt, rel))
        except OSError as e:
            test.assertEqual(e.errno, 5, rel)
            eio += 1
            continue
        test.assertEqual(got, data, rel)
    return eio
