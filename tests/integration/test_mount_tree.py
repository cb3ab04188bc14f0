#!/usr/bin/env python3
"""A real FUSE mount of a hostile tree, compared with the source tree that
GNU tar archived: metadata of every path, directory listings, content read in
every way (one call, odd chunks, random ranges, O_DIRECT, mmap), and the
standard tools (find, du, ls -lR, cp -a, tar) against the source.

Every test runs against two mounts: the defaults (kernel opens, splice) and
`-o kernel_open=0,splice=0,clone_fd=0` (daemon opens, pread into a buffer)."""

import hashlib
import mmap
import os
import random
import re
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

C_ENV = dict(os.environ, LC_ALL="C")


def run(argv, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=C_ENV,
                       timeout=120, **kw)
    if p.returncode != 0:
        raise AssertionError("%r exited %d: %s" % (argv, p.returncode,
                                                   p.stderr.decode(errors="replace")[-3000:]))
    return p.stdout


class _MountTreeTests:
    PREFIX = "shardfs-tree-"
    OPTIONS = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.src = os.path.join(cls.tmp, "src")
        os.mkdir(cls.src)
        tl.make_hostile_tree(cls.src)
        shard_dir = os.path.join(cls.tmp, "shards")
        os.mkdir(shard_dir)
        cls.shards = tl.tar_into_shards(cls.src, shard_dir, 3)
        cls.idx = os.path.join(cls.tmp, "tree.idx")
        tl.build_index(cls.shards, cls.idx)
        cls.ref = tl.walk_reference(cls.src)
        cls.entries = tl.index_entries(cls.idx)
        cls.info, _ = tl.index_info(cls.idx)
        if tl.tar_mtime_quantum_ns() != 1:
            raise AssertionError("these tests compare tools' output with the source and need "
                                 "tar to keep nanosecond mtimes")
        cls.mnt = os.path.join(cls.tmp, "mnt")
        os.mkdir(cls.mnt)
        cls.mount = tl.Mount(cls.idx, cls.mnt, options=cls.OPTIONS)
        cls.mount.__enter__()
        cls.addClassCleanup(cls.mount.__exit__, None, None, None)
        cls.bmnt = os.fsencode(cls.mnt)
        cls.bsrc = os.fsencode(cls.src)

    def m(self, rel):
        return os.path.join(self.bmnt, rel) if rel else self.bmnt

    def s(self, rel):
        return os.path.join(self.bsrc, rel) if rel else self.bsrc

    def files(self):
        return [(p, e) for p, e in sorted(self.ref.items()) if e.type == "file"]

    # -- metadata -----------------------------------------------------------

    def test_mounted_read_only_as_shardfs(self):
        with open("/proc/self/mounts") as f:
            lines = [l.split() for l in f if l.split()[1] == self.mnt]
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(lines[0][2], "fuse.shardfs")
        self.assertIn("ro", lines[0][3].split(","))

    def test_root(self):
        st = os.lstat(self.mnt)
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        self.assertEqual(st.st_ino, 1)
        subdirs = sum(1 for p, e in self.ref.items() if p and b"/" not in p and e.type == "dir")
        self.assertEqual(st.st_nlink, 2 + subdirs)

    def test_metadata_of_every_path(self):
        for path, want in self.ref.items():
            if not path:
                continue
            with self.subTest(path=path):
                st = os.lstat(self.m(path))
                got_type = ("dir" if stat.S_ISDIR(st.st_mode) else
                            "symlink" if stat.S_ISLNK(st.st_mode) else
                            "file" if stat.S_ISREG(st.st_mode) else "other")
                target = os.readlink(self.m(path)) if got_type == "symlink" else None
                got = tl.Entry(got_type, st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns,
                               st.st_nlink, target, None, st.st_uid, st.st_gid, None)
                tl.compare_entry(self, path, want, got)
                self.assertEqual(st.st_ino, self.entries[path]["inode"], "st_ino")
                self.assertEqual(st.st_blocks, (st.st_size + 511) // 512, "st_blocks")
                if got_type == "dir":
                    self.assertEqual(st.st_size, 0)

    def test_listdir_of_every_directory(self):
        for d, names in tl.list_dirs(self.ref).items():
            with self.subTest(dir=d):
                got = os.listdir(self.m(d))
                self.assertEqual(len(got), len(set(got)), "duplicate names")
                self.assertEqual(sorted(got), names)

    def test_scandir_types_and_inodes(self):
        # readdir(plus) answers: d_type and d_ino as stat gives them.
        for d in tl.list_dirs(self.ref):
            with os.scandir(self.m(d)) as it:
                for e in it:
                    rel = os.path.join(d, e.name) if d else e.name
                    want = self.ref[rel]
                    self.assertEqual(e.is_dir(follow_symlinks=False), want.type == "dir", rel)
                    self.assertEqual(e.is_symlink(), want.type == "symlink", rel)
                    self.assertEqual(e.inode(), self.entries[rel]["inode"], rel)

    def test_lookup_errors(self):
        import errno
        with self.assertRaises(FileNotFoundError):
            os.lstat(self.m(b"names/no such name"))
        with self.assertRaises(NotADirectoryError):
            os.lstat(self.m(b"nested/a/b/c/d/deep.txt/below_a_file_is_nothing"))
        with self.assertRaises(OSError) as cm:
            os.lstat(self.m(b"names/" + b"x" * 256))
        self.assertEqual(cm.exception.errno, errno.ENAMETOOLONG)
        with self.assertRaises(OSError) as cm:
            os.readlink(self.m(b"sizes/size_1"))
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        fd = os.open(self.m(b"nested"), os.O_RDONLY)
        try:
            with self.assertRaises(OSError) as cm:
                os.read(fd, 10)
            self.assertEqual(cm.exception.errno, errno.EISDIR)
        finally:
            os.close(fd)
        with self.assertRaises(NotADirectoryError):
            os.listdir(self.m(b"sizes/size_1"))
        # Symlinks resolve through the mount like anywhere else.
        with open(self.m(b"symlinks/chain"), "rb") as f:
            self.assertEqual(f.read(), b"target\n")
        self.assertEqual(sorted(os.listdir(self.m(b"symlinks/to_dir"))), [b"t.txt"])

    def test_statvfs(self):
        v = os.statvfs(self.mnt)
        self.assertEqual(v.f_files, self.info["entries"])
        self.assertEqual(v.f_files, tl.tree_counts(self.ref)["entries"])
        self.assertEqual(v.f_namemax, 255)
        self.assertTrue(v.f_flag & os.ST_RDONLY)
        self.assertGreaterEqual(v.f_blocks * v.f_frsize, self.info["bytes"])
        self.assertEqual(v.f_bfree, 0)

    # -- content ------------------------------------------------------------

    def source_bytes(self, path):
        with open(self.s(path), "rb") as f:
            return f.read()

    def test_read_whole_file_in_one_call(self):
        for path, want in self.files():
            with self.subTest(path=path):
                fd = os.open(self.m(path), os.O_RDONLY)
                try:
                    data = os.pread(fd, want.size + 4096, 0)
                finally:
                    os.close(fd)
                self.assertEqual(len(data), want.size)
                self.assertEqual(hashlib.sha256(data).hexdigest(), want.sha256)

    def test_read_in_odd_chunks(self):
        for path, want in self.files():
            with self.subTest(path=path):
                h = hashlib.sha256()
                n = 0
                with open(self.m(path), "rb", buffering=0) as f:
                    while True:
                        b = f.read(4093)
                        if not b:
                            break
                        self.assertLessEqual(len(b), 4093)
                        h.update(b)
                        n += len(b)
                    self.assertEqual(f.read(4093), b"")
                self.assertEqual(n, want.size)
                self.assertEqual(h.hexdigest(), want.sha256)

    def random_reads(self, flags, drop_cache, count):
        rnd = random.Random(flags * 7 + drop_cache)
        for path, want in self.files():
            src = self.source_bytes(path)
            fd = os.open(self.m(path), os.O_RDONLY | flags)
            try:
                if drop_cache:
                    # Drops this file's cached pages: the reads below reach
                    # the daemon, not the page cache.
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                for _ in range(count):
                    off = rnd.randrange(0, want.size + 2)
                    n = rnd.choice([1, 7, 511, 512, 513, 4095, 4096, 4097, 65536, 200000,
                                    rnd.randrange(1, 300000)])
                    got = os.pread(fd, n, off)
                    if got != src[off:off + n]:
                        self.fail("%r: pread(%d, %d) gave %d bytes, differing from the source"
                                  % (path, n, off, len(got)))
                for off in (want.size, want.size + 1, want.size + 12345, 1 << 40):
                    self.assertEqual(os.pread(fd, 100, off), b"", "%r past EOF at %d" % (path, off))
            finally:
                os.close(fd)

    def test_random_ranges_through_page_cache(self):
        self.random_reads(0, drop_cache=True, count=50)

    def test_random_ranges_direct_io(self):
        # O_DIRECT sends each read to the daemon at the caller's own offset.
        self.random_reads(os.O_DIRECT, drop_cache=False, count=20)

    def test_walk_open_mmap_sha256(self):
        # What a plain Python data loader does: os.walk, open, mmap.
        seen = {}
        for dirpath, dirnames, filenames in os.walk(self.bmnt):
            for name in filenames:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, self.bmnt)
                if os.path.islink(full):
                    continue
                with open(full, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if size == 0:
                        digest = hashlib.sha256(f.read()).hexdigest()
                    else:
                        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                            digest = hashlib.sha256(mm).hexdigest()
                seen[rel] = digest
        want = {p: e.sha256 for p, e in self.files()}
        self.assertEqual(sorted(seen), sorted(want))
        for p, d in want.items():
            self.assertEqual(seen[p], d, p)

    # -- standard tools ------------------------------------------------------

    def find_listing(self, root):
        out = []
        for args, fmt in ((["!", "-type", "d"], "%P\\0%y %m %n %U %G %T@ %s %l\\0"),
                          (["-type", "d"], "%P\\0%y %m %n %U %G %T@\\0")):
            raw = run(["find", root, "-mindepth", "1"] + args + ["-printf", fmt])
            parts = raw.split(b"\0")
            self.assertEqual(parts[-1], b"")
            out += list(zip(parts[0:-1:2], parts[1:-1:2]))
        return sorted(out)

    def test_find_printf(self):
        got = self.find_listing(self.mnt)
        want = self.find_listing(self.src)
        self.assertEqual(len(got), len(self.ref) - 1)
        self.assertEqual(got, want)

    def test_du(self):
        # Apparent sizes: files and symlinks count their size, directories 0
        # (the mount's); with -l every name counts, so no order dependence.
        expect = {}
        for path, e in self.ref.items():
            size = 0 if e.type == "dir" else e.size
            p = path
            while True:
                expect[p] = expect.get(p, 0) + size
                if not p:
                    break
                p = os.path.dirname(p)
        raw = run(["du", "-b", "-l", self.mnt])
        got = {}
        for line in raw.split(b"\n"):
            if not line:
                continue
            n, _, p = line.partition(b"\t")
            rel = os.path.relpath(p, self.bmnt)
            got[b"" if rel == b"." else rel] = int(n)
        dirs = {p: v for p, v in expect.items() if self.ref[p].type == "dir"}
        self.assertEqual(got, dirs)
        # Without -l each inode once; blocks are ceil(size / 512) each.
        total = int(run(["du", "-b", "-s", self.mnt]).split()[0])
        once = {}
        for p, e in self.ref.items():
            once.setdefault(e.ino, 0 if e.type == "dir" else e.size)
        self.assertEqual(total, sum(once.values()))
        blocks = int(run(["du", "-s", "--block-size=512", self.mnt]).split()[0])
        self.assertEqual(blocks, sum((v + 511) // 512 for v in once.values()))

    def ls_lr(self, root):
        raw = run(["ls", "-lR", "--time-style=+%s.%N", "--quoting-style=escape", root])
        broot = os.fsencode(root)
        out = []
        for line in raw.split(b"\n"):
            if line.startswith(b"total "):
                continue  # Blocks allocated: file-system specific.
            if line.startswith(broot) and line.endswith(b":"):
                line = b"ROOT" + line[len(broot):]
            elif line[:1] == b"d":
                f = line.split(None, 5)
                f[4] = b"-"  # A directory's size: file-system specific.
                line = b" ".join(f)
            # Column widths follow the widest size; names are escaped, so
            # runs of blanks are only padding.
            out.append(re.sub(rb" +", b" ", line))
        return out

    def test_ls_lR(self):
        got = self.ls_lr(self.mnt)
        want = self.ls_lr(self.src)
        self.assertGreater(len(got), len(self.ref))
        self.assertEqual(got, want)

    def diff_tree(self, copy):
        p = subprocess.run(["diff", "-r", "--no-dereference", self.src, copy],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=C_ENV)
        self.assertEqual(p.returncode, 0, (p.stdout + p.stderr)[-4000:])
        got = tl.walk_reference(copy)
        self.assertEqual(sorted(got), sorted(self.ref))
        for path, want in self.ref.items():
            if path:
                tl.compare_entry(self, path, want, got[path])

    def test_cp_a_out_of_the_mount(self):
        out = os.path.join(self.scratch("cp-"), "copy")
        os.mkdir(out)
        run(["cp", "-a", self.mnt + "/.", out])
        self.diff_tree(out)

    def test_tar_from_the_mount(self):
        d = self.scratch("tar-")
        archive = os.path.join(d, "from-mount.tar")
        run(["tar", "--format=posix", "-cf", archive, "-C", self.mnt, "."])
        out = os.path.join(d, "x")
        os.mkdir(out)
        run(["tar", "-xpf", archive, "-C", out])
        self.diff_tree(out)


class DefaultMountTree(_MountTreeTests, tl.ScratchTestCase):
    OPTIONS = None


class DaemonOpenPreadMountTree(_MountTreeTests, tl.ScratchTestCase):
    # Also max_open_shards=1: reads alternate between 3 shards, so every switch
    # evicts, closes, reopens and re-checks a shard.
    OPTIONS = "kernel_open=0,splice=0,clone_fd=0,threads=2,max_open_shards=1"


if __name__ == "__main__":
    tl.main()
