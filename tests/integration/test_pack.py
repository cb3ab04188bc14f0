#!/usr/bin/env python3
"""`shardfs pack` and `shardfs verify` on a hostile tree: what is packed is the
source tree, byte for byte, and verify reports each difference.

The reference is always the source tree (os.lstat/os.readlink/sha256), or
what GNU tar, bsdtar and Python's tarfile extract from the shards; never the
code's own output. Refusals and interruptions are in test_pack_safety.py,
sample grouping and selection options in test_pack_options.py.
"""

import collections
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402


GIB = 1 << 30
BEFORE_EPOCH_FRACTION = b"before_epoch_fraction"


def concat(paths, dest):
    with open(dest, "wb") as o:
        for p in paths:
            with open(p, "rb") as f:
                shutil.copyfileobj(f, o, 1 << 20)
    return dest


def link_groups(ref):
    """The partition of file paths into hard link groups (sets of >= 2)."""
    by_ino = collections.defaultdict(set)
    for p, e in ref.items():
        if e.type == "file":
            by_ino[e.ino].add(p)
    return sorted(sorted(g) for g in by_ino.values() if len(g) > 1)


def add_pack_extras(root):
    """Cases beyond the shared hostile tree that only a tar writer meets: a
    long path and a long symlink target that are not UTF-8 (pax
    hdrcharset=BINARY), a long hard link name, a uid over ustar's limit, and
    the ustar prefix/name split at its limits."""
    r = os.fsencode(root)
    x = os.path.join(r, b"pack_extras")
    os.mkdir(x)
    deep = os.path.join(x, b"\xff" * 80, b"\xfe\xfd" * 40)
    os.makedirs(deep)
    tl._write(os.path.join(deep, b"\xe9" * 120 + b".bin"), b"latin-1 long\n")
    os.symlink(b"\xff/" * 70 + b"end", os.path.join(x, b"bytes_long_target"))
    tl._write(os.path.join(x, b"linked"), b"linked twice\n")
    os.link(os.path.join(x, b"linked"), os.path.join(x, b"L" * 150))
    tl._write(os.path.join(x, b"big_uid"), b"uid\n")
    os.chown(os.path.join(x, b"big_uid"), 4_000_000, 3_000_000)
    split = os.path.join(x, b"p" * 143)  # prefix 155 + name 100: fits ustar exactly
    os.mkdir(split)
    tl._write(os.path.join(split, b"q" * 100), b"split\n")
    tl._write(os.path.join(x, b"whole_second"), b"whole\n")
    os.utime(os.path.join(x, b"whole_second"), ns=(1_500_000_000 * 10**9,) * 2)
    # pax "mtime=-86400.250000000": a quarter second before 1969-12-31 00:00.
    tl._write(os.path.join(x, BEFORE_EPOCH_FRACTION), b"1969\n")
    os.utime(os.path.join(x, BEFORE_EPOCH_FRACTION), ns=(-86_400_250_000_000,) * 2)


class PackTest(tl.ScratchTestCase):
    PREFIX = "shardfs-pack-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        os.mkdir(cls.src)
        tl.make_hostile_tree(cls.src)
        add_pack_extras(cls.src)
        cls.ref = tl.walk_reference(cls.src)
        cls.out = os.path.join(cls.tmp, "out")
        cls.idx = os.path.join(cls.out, "index")
        cls.packed = tl.pack(cls.src, cls.out, "--shard-size", "256K", "-j", "3")
        cls.shards = [os.path.join(cls.out, n) for n in tl.shards_of(cls.out)]

    # -- The packed tree is the source tree -----------------------------------

    def test_layout(self):
        self.assertGreater(len(self.shards), 3, "256K shards of a ~6 MiB tree")
        self.assertEqual(sorted(os.listdir(self.out)),
                         ["index"] + ["train-%06d.tar" % i for i in range(len(self.shards))])

    def test_index_lists_exactly_the_source(self):
        entries = {e["path"]: e for e in tl.ls_json(self.idx)}
        want = {p: e for p, e in self.ref.items() if p}
        self.assertEqual(set(entries), set(want))
        for p, e in want.items():
            got = entries[p]
            self.assertEqual(got["type"], e.type, p)
            self.assertEqual(got["mode"], e.mode, p)
            self.assertEqual(got["mtime_ns"], e.mtime_ns, p)
            self.assertEqual((got["uid"], got["gid"]), (e.uid, e.gid), p)
            if e.type != "dir":
                self.assertEqual(got["size"], e.size, p)
            if e.type == "symlink":
                self.assertEqual(got["target"], e.target, p)
            if e.type == "file":
                self.assertEqual(got["nlink"], e.nlink, p)
                self.assertIsNotNone(got["xxh3"], p)
        # Hard links are one inode in the index.
        by_inode = collections.defaultdict(set)
        for p, e in entries.items():
            if e["type"] == "file":
                by_inode[e["inode"]].add(p)
        self.assertEqual(sorted(sorted(g) for g in by_inode.values() if len(g) > 1),
                         link_groups(self.ref))

    def test_offsets_point_at_the_source_bytes(self):
        for e in tl.ls_json(self.idx, drop=()):
            if e["type"] != "file":
                continue
            with open(e["shard"], "rb") as f:
                f.seek(e["offset"])
                data = f.read(e["size"])
            with open(os.path.join(os.fsencode(self.src), e["path"]), "rb") as f:
                self.assertEqual(data, f.read(), e["path"])

    def test_verify_index_identical(self):
        for extra in ((), ("--full",), ("-j", "1")):
            p = tl.run_shardfs("verify", *extra, self.idx, self.src)
            self.assertEqual(p.returncode, 0, "%r: %s %s" % (extra, p.stdout, p.stderr))
            self.assertEqual(p.stdout, b"")
            self.assertIn(b"identical", p.stderr)

    def test_mount_matches_source_and_verify_mounted(self):
        mnt = self.scratch("mnt")
        with tl.Mount(self.idx, mnt):
            got = tl.walk_reference(mnt)
            p = tl.run_shardfs("verify", "--mounted", mnt, self.src)
            p_full = tl.run_shardfs("verify", "--mounted", mnt, self.src, "--full", "-j", "2")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p_full.returncode, 0, p_full.stdout + p_full.stderr)
        self.assertEqual(set(got), set(self.ref))
        for path, want in self.ref.items():
            g = got[path]
            self.assertEqual((g.type, g.mode, g.mtime_ns, g.uid, g.gid, g.target, g.sha256),
                             (want.type, want.mode, want.mtime_ns, want.uid, want.gid,
                              want.target, want.sha256), path)
            if want.type != "dir":
                self.assertEqual((g.size, g.nlink), (want.size, want.nlink), path)
        self.assertEqual(link_groups(got), link_groups(self.ref))

    def check_extracted(self, dest, mtime_tol_ns, label, root_mtime=True, skip_mtime=()):
        got = tl.walk_reference(dest)
        self.assertEqual(set(got), set(self.ref), label)
        for path, want in self.ref.items():
            g = got[path]
            what = "%s: %r" % (label, path)
            self.assertEqual(g.type, want.type, what)
            self.assertEqual((g.mode, g.uid, g.gid, g.target, g.sha256),
                             (want.mode, want.uid, want.gid, want.target, want.sha256), what)
            if want.type != "dir":
                self.assertEqual(g.size, want.size, what)
            if want.type != "symlink" and (path or root_mtime) and path not in skip_mtime:
                self.assertLessEqual(abs(g.mtime_ns - want.mtime_ns), mtime_tol_ns, what)
        self.assertEqual(link_groups(got), link_groups(self.ref), label)

    def test_gnu_tar_extracts_the_source(self):
        # One tar run over all shards (-i reads past each shard's end blocks),
        # so directory times are set once, after their contents.
        dest = self.scratch("gnutar")
        combined = concat(self.shards, os.path.join(self.tmp, "gnu-combined.tar"))
        p = subprocess.run(["tar", "--numeric-owner", "-xpif", combined, "-C", dest],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.unlink(combined)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_extracted(dest, 0, "GNU tar")

    def test_bsdtar_extracts_the_source(self):
        if shutil.which("bsdtar") is None:
            raise RuntimeError("bsdtar (libarchive-tools, scripts/install-deps.sh) is missing")
        dest = self.scratch("bsdtar")
        combined = concat(self.shards, os.path.join(self.tmp, "bsd-combined.tar"))
        p = subprocess.run(["bsdtar", "--numeric-owner", "-xpf", combined, "--ignore-zeros",
                            "-C", dest], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.unlink(combined)
        self.assertEqual(p.returncode, 0, p.stderr)
        # bsdtar does not set the times of "./", the directory it extracts
        # into, and libarchive 3.6 reads "mtime=-86400.25" as -86399.75
        # (fixed upstream in 2025); GNU tar and tarfile read it right.
        bad = os.path.join(b"pack_extras", BEFORE_EPOCH_FRACTION)
        got_ns = os.lstat(os.path.join(os.fsencode(dest), bad)).st_mtime_ns
        self.assertIn(got_ns, (-86_400_250_000_000, -86_399_750_000_000))
        self.check_extracted(dest, 0, "bsdtar", root_mtime=False, skip_mtime=(bad,))

    def test_python_tarfile_extracts_the_source(self):
        dest = self.scratch("tarfile")
        combined = concat(self.shards, os.path.join(self.tmp, "py-combined.tar"))
        kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        with tarfile.open(combined, ignore_zeros=True) as tf:
            tf.extractall(dest, numeric_owner=True, **kw)
        os.unlink(combined)
        # tarfile keeps mtimes as floats: ~0.2 us of rounding at today's times.
        self.check_extracted(dest, 1000, "tarfile")

    def test_pax_headers_only_when_needed(self):
        with tarfile.open(self.shards[0]) as tf:
            first = tf.getmembers()[0]
        self.assertEqual(first.name, ".")
        seen = {}
        for s in self.shards:
            with tarfile.open(s) as tf:
                for m in tf.getmembers():
                    seen[os.fsencode(m.name)] = m
        plain = seen[b"pack_extras/whole_second"]
        self.assertEqual(plain.pax_headers, {}, "a whole-second mtime needs no pax header")
        self.assertEqual(seen[b"pack_extras/big_uid"].pax_headers.get("uid"), "4000000")
        self.assertEqual(seen[b"pack_extras/big_uid"].pax_headers.get("gid"), "3000000")
        split = b"pack_extras/" + b"p" * 143 + b"/" + b"q" * 100
        self.assertNotIn("path", seen[split].pax_headers, "fits ustar's prefix + name")
        for m in seen.values():
            self.assertEqual((m.uname, m.gname), ("", ""))

    def test_index_build_over_the_shards_is_equivalent(self):
        idx2 = os.path.join(self.scratch("rebuilt"), "index")
        tl.build_index(self.shards, idx2)
        self.assertEqual(tl.ls_json(idx2), tl.ls_json(self.idx))

    def test_deterministic(self):
        # Another run, another thread count: the same bytes.
        out2 = os.path.join(self.scratch("again"), "out")
        tl.pack(self.src, out2, "--shard-size", "256K", "-j", "7")
        self.assertEqual(tl.shards_of(out2), tl.shards_of(self.out))
        for n in tl.shards_of(self.out):
            p = subprocess.run(["cmp", os.path.join(self.out, n), os.path.join(out2, n)],
                               stdout=subprocess.PIPE)
            self.assertEqual(p.returncode, 0, "%s differs: %s" % (n, p.stdout))
        self.assertEqual(tl.ls_json(os.path.join(out2, "index")), tl.ls_json(self.idx))

    # -- verify finds differences --------------------------------------------

    def test_verify_reports_each_difference(self):
        src = os.path.join(self.scratch("verify"), "src")
        os.makedirs(os.path.join(src, "d"))
        for n in ("same", "content", "mode", "mtime", "size", "gone"):
            tl._write(os.path.join(src, "d", n), b"0123456789" * 100)
        os.symlink("same", os.path.join(src, "d", "link"))
        tl._write(os.path.join(src, "pair_a"), b"pair")
        os.link(os.path.join(src, "pair_a"), os.path.join(src, "pair_b"))
        out = os.path.join(self.scratch("verify-out"), "out")
        tl.pack(src, out)
        idx = os.path.join(out, "index")
        self.assertEqual(tl.run_shardfs("verify", idx, src).returncode, 0)

        d = os.path.join(src, "d")
        dir_times = [(p, os.stat(p).st_mtime_ns) for p in (src, d)]
        st = os.stat(os.path.join(d, "content"))
        with open(os.path.join(d, "content"), "r+b") as f:
            f.seek(123)
            f.write(b"X")
        os.utime(os.path.join(d, "content"), ns=(st.st_atime_ns, st.st_mtime_ns))
        os.chmod(os.path.join(d, "mode"), 0o600)
        os.utime(os.path.join(d, "mtime"), ns=(1, 2_000_000_001))
        st = os.stat(os.path.join(d, "size"))
        with open(os.path.join(d, "size"), "ab") as f:
            f.write(b"more")
        os.utime(os.path.join(d, "size"), ns=(st.st_atime_ns, st.st_mtime_ns))
        os.unlink(os.path.join(d, "gone"))
        tl._write(os.path.join(d, "new"), b"new")
        os.unlink(os.path.join(d, "link"))
        os.symlink("elsewhere", os.path.join(d, "link"))
        os.unlink(os.path.join(src, "pair_b"))
        tl._write(os.path.join(src, "pair_b"), b"pair")
        for p, ns in dir_times:
            os.utime(p, ns=(ns, ns))

        p = tl.run_shardfs("verify", idx, src)
        self.assertEqual(p.returncode, 1)
        lines = p.stdout.decode().splitlines()
        want = [
            "content differs: d/content: xxh3 ",
            "mode differs: d/mode: 0600 vs 0644",
            "mtime differs: d/mtime: 2.000000001 vs ",
            "size differs: d/size: 1004 vs 1000",
            "extra: d/gone",
            "missing: d/new",
            "target differs: d/link: elsewhere vs same",
            "nlink differs: pair_a: 1 vs 2",
            "nlink differs: pair_b: 1 vs 2",
        ]
        for w in want:
            self.assertTrue(any(line.startswith(w) for line in lines), "%r not in %s" % (w, lines))
        self.assertFalse(any("d/same" in line for line in lines), lines)

        # --full compares bytes and says where.
        p = tl.run_shardfs("verify", "--full", idx, src)
        self.assertIn(b"content differs: d/content: at byte 123", p.stdout)

        # Through the mount, the same differences.
        mnt = self.scratch("verify-mnt")
        with tl.Mount(idx, mnt):
            p = tl.run_shardfs("verify", "--mounted", mnt, src)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"content differs: d/content: at byte 123", p.stdout)
        self.assertIn(b"size differs: d/size: 1004 vs 1000", p.stdout)

        # A damaged shard: the fingerprint says so; --full finds the bytes.
        shard = os.path.join(out, tl.shards_of(out)[0])
        offset = next(e["offset"] for e in tl.ls_json(idx, drop=()) if e["path"] == b"d/same")
        with open(shard, "r+b") as f:
            f.seek(offset + 5)
            f.write(b"!")
        p = tl.run_shardfs("verify", idx, src)
        self.assertIn(b"shard differs: ", p.stdout)
        p = tl.run_shardfs("verify", "--full", idx, src)
        self.assertIn(b"content differs: d/same: at byte 5", p.stdout)

    def test_usage_errors(self):
        for args in (["pack", self.src], ["pack", "--out", "x"], ["pack", self.src, "--out", "x",
                     "--name", "no-number.tar"], ["pack", self.src, "--out", "x", "--name",
                     "a%d%d.tar"], ["verify", self.idx], ["verify", "--mounted", "m"]):
            p = tl.run_shardfs(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)


class PackBigFileTest(unittest.TestCase):
    """A file over 8 GiB (ustar's size field stops at 8 GiB - 1): the pax
    'size' record. The file is sparse: pack reads its holes as zeros without
    reading them (SEEK_DATA/SEEK_HOLE) and leaves them holes in the shard, so
    this takes about a second, not the minutes 8.5 GiB of real data would."""

    SIZE = 8 * GIB + 512 * (1 << 20) + 123
    ISLANDS = [(0, b"HEAD"), (4 * GIB, b"MIDDLE" * 1000), (8 * GIB + 300 * (1 << 20), b"PAST8G"),
               (SIZE - 5, b"TAIL!")]

    def setUp(self):
        tl.require_shardfs()
        self.tmp = tempfile.mkdtemp(prefix="shardfs-pack-big-")
        self.src = os.path.join(self.tmp, "src")
        os.mkdir(self.src)
        self.big = os.path.join(self.src, "huge.bin")
        with open(self.big, "wb") as f:
            f.truncate(self.SIZE)
            for off, data in self.ISLANDS:
                f.seek(off)
                f.write(data)
        tl._write(os.path.join(self.src, "small.txt"), b"small")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_pack_over_8_gib(self):
        out = os.path.join(self.tmp, "out")
        t0 = time.monotonic()
        tl.pack(self.src, out)
        idx = os.path.join(out, "index")
        e = {x["path"]: x for x in tl.ls_json(idx, drop=())}
        self.assertEqual(e[b"huge.bin"]["size"], self.SIZE)
        shard = e[b"huge.bin"]["shard"]
        self.assertLess(os.stat(shard).st_blocks * 512, 64 << 20, "holes stayed holes")
        # Data offsets past 8 GiB are right: read them straight from the shard.
        with open(shard, "rb") as f:
            for off, data in self.ISLANDS:
                f.seek(e[b"huge.bin"]["offset"] + off)
                self.assertEqual(f.read(len(data)), data, off)
        self.assertEqual(tl.run_shardfs("verify", idx, self.src).returncode, 0)

        with tarfile.open(shard) as tf:
            m = tf.getmember("huge.bin")
            self.assertEqual(m.size, self.SIZE)
            self.assertEqual(m.pax_headers.get("size"), str(self.SIZE))
            f = tf.extractfile(m)
            for off, data in self.ISLANDS:
                f.seek(off)
                self.assertEqual(f.read(len(data)), data, off)
        p = subprocess.run(["tar", "-tvf", shard], stdout=subprocess.PIPE, check=True)
        self.assertIn(b" %d " % self.SIZE, p.stdout)

        # index build (libarchive) finds the same size and offset.
        idx2 = os.path.join(self.tmp, "rebuilt")
        tl.build_index(sorted(os.path.join(out, n) for n in tl.shards_of(out)), idx2,
                       "--no-checksum")
        self.assertEqual(tl.ls_json(idx2, drop=("shard", "xxh3")),
                         tl.ls_json(idx, drop=("shard", "xxh3")))

        mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            path = os.path.join(mnt, "huge.bin")
            self.assertEqual(os.stat(path).st_size, self.SIZE)
            with open(path, "rb") as f:
                for off, data in self.ISLANDS:
                    f.seek(off)
                    self.assertEqual(f.read(len(data)), data, off)
        self.assertLess(time.monotonic() - t0, 60)


if __name__ == "__main__":
    tl.main()
