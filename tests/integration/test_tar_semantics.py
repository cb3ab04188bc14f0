#!/usr/bin/env python3
"""Tree semantics of index build against GNU tar's extraction.

Every archive here is written byte for byte (tar headers by hand), extracted
with GNU tar (`tar -xf` of each shard in order into one directory, as root:
owners kept), and the index must show exactly that tree: names, types,
modes, uid/gid, mtimes, content and link counts. One test per rule of
index/index_writer.h, plus the pax/GNU long-name precedence of the scanner and
one comparison through a real FUSE mount.

Symlink modes are compared too: tar makes every symlink 0777 on Linux,
whatever its header says, and so does the index.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

T0 = 1_600_000_000


# ---------------------------------------------------------------------------
# Tar writing by hand: ustar headers, GNU 'L'/'K' long names, pax 'x' records.

def _b(s):
    return s if isinstance(s, bytes) else s.encode()


def header(name, *, size=0, typeflag=b"0", mode=0o644, uid=0, gid=0, mtime=T0, linkname=b""):
    h = bytearray(512)

    def put(off, n, val):
        val = val[:n]
        h[off:off + len(val)] = val

    def octal(off, n, v):
        put(off, n, b"%0*o\0" % (n - 1, v))

    put(0, 100, _b(name))
    octal(100, 8, mode)
    octal(108, 8, uid)
    octal(116, 8, gid)
    octal(124, 12, size)
    octal(136, 12, mtime)
    put(156, 1, typeflag)
    put(157, 100, _b(linkname))
    put(257, 8, b"ustar  \0")  # GNU magic.
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def pad(data):
    return data + b"\0" * (-len(data) % 512)


def gnu_long(typeflag, value):
    value = _b(value) + b"\0"
    return header(b"././@LongLink", size=len(value), typeflag=typeflag) + pad(value)


def pax(*records):
    body = b""
    for k, v in records:
        kv = b" %s=%s\n" % (_b(k), _b(v))
        n = len(kv) + 1
        while len(b"%d" % n) + len(kv) != n:
            n += 1
        body += b"%d" % n + kv
    return header(b"PaxHeaders/x", size=len(body), typeflag=b"x") + pad(body)


def f(name, data=b"", **kw):
    data = _b(data)
    return header(name, size=len(data), **kw) + pad(data)


def d(name, **kw):
    kw.setdefault("mode", 0o755)
    return header(name, typeflag=b"5", **kw)


def sym(name, target, **kw):
    kw.setdefault("mode", 0o644)  # As some writers store it; tar -x makes 0777 anyway.
    return header(name, typeflag=b"2", linkname=target, **kw)


def link(name, target, **kw):
    return header(name, typeflag=b"1", linkname=target, **kw)


def archive(*blocks):
    return b"".join(blocks) + b"\0" * 1024


# ---------------------------------------------------------------------------
# The comparison.

def tar_extract(shards, dest):
    """GNU tar -xf of each shard in order into `dest`; returns stderr text."""
    errs = []
    for s in shards:
        p = subprocess.run(["tar", "-xf", s, "-C", dest], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        errs.append(p.stderr.decode(errors="replace"))
    return "".join(errs)


def indexed(idx):
    """{path bytes: Entry} of the index (root excluded), content read from the
    shard at the indexed offset."""
    out = {}
    for path, e in tl.index_entries(idx).items():
        digest = None
        if e["type"] == "file":
            with open(e["shard"], "rb") as fh:
                fh.seek(e["offset"])
                digest = hashlib.sha256(fh.read(e["size"])).hexdigest()
        out[path] = tl.Entry(e["type"], e["size"], e["mode"] & 0o7777, e["mtime_ns"], e["nlink"],
                             e.get("target"), digest, e["uid"], e["gid"], e["inode"])
    return out


class TarSemanticsTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="shardfs-tarsem-")
        self.tmp = self._tmp.name
        self.n = 0

    def tearDown(self):
        self._tmp.cleanup()

    def compare(self, want, got, skip_mtime=()):
        tl.assert_same_tree(self, want, got, skip_mtime)

    def check(self, *shards, skip_mtime=(), refused=0, tar_fails=None):
        """Writes the shards, extracts them with GNU tar and indexes them;
        asserts the two trees agree and that `refused` members are reported.
        Returns (index path, extraction dir, build stderr)."""
        self.n += 1
        base = os.path.join(self.tmp, "c%d" % self.n)
        os.mkdir(base)
        paths = []
        for i, data in enumerate(shards):
            p = os.path.join(base, "shard%d.tar" % i)
            with open(p, "wb") as fh:
                fh.write(data)
            paths.append(p)
        x = os.path.join(base, "x")
        os.mkdir(x)
        tar_err = tar_extract(paths, x)
        if tar_fails is not None:
            self.assertEqual(bool(tar_err.strip()), tar_fails, "GNU tar said: %s" % tar_err)
        want = tl.walk_reference(x)
        del want[b""]
        idx = os.path.join(base, "idx")
        build = tl.build_index(paths, idx)
        err = build.stderr.decode(errors="replace")
        self.compare(want, indexed(idx), {os.fsencode(s) for s in skip_mtime})
        # A build forced to spill at every possible cut (index build --memory,
        # index/bounded_build.h) makes the same index and the same report.
        spilled = tl.build_index(paths, os.path.join(base, "idx-spilled"), "--memory", "1")
        self.assertEqual(tl.ls_json(os.path.join(base, "idx-spilled")), tl.ls_json(idx))
        self.assertEqual(spilled.stderr, build.stderr)
        # The kernel's mount of the index (mount --kernel) shows the same tree.
        mnt = os.path.join(base, "kmnt")
        os.mkdir(mnt)
        with tl.KernelMount(idx, mnt, cache_dir=os.path.join(base, "images")):
            got = tl.walk_reference(mnt)
        del got[b""]
        self.compare(want, got, {os.fsencode(s) for s in skip_mtime})
        if refused:
            self.assertRegex(err, r"%d member\(s\) could not be placed" % refused)
            self.assertRegex(err, r"shard \S+shard\d\.tar: member '[^']+' at byte \d+: ")
        else:
            self.assertNotIn("could not be placed", err)
        return idx, x, err

    # Rule 1: a hard link names the inode its target has when it is met.
    def test_hard_link_keeps_the_content_its_target_had(self):
        self.check(archive(d("d"), f("d/a", "OLD"), link("d/h", "d/a"), f("d/a", "NEW", mtime=T0 + 5)))

    def test_hard_link_chain_follows_the_inode_not_the_name(self):
        self.check(archive(f("a", "OLD"), link("b", "a"), link("c", "b"), f("a", "NEW")))
        # Across shards, as `tar -x` of each in order.
        self.check(archive(f("a", "OLD", mode=0o600, uid=7)),
                   archive(link("b", "a"), f("a", "NEWER"), link("c", "a")))

    # Rule 2: a hard link to a symlink is a second name of that symlink.
    def test_hard_link_to_a_symlink(self):
        _, _, _ = self.check(archive(sym("s", "target"), link("h", "s")), tar_fails=False)

    # Rule 3: a hard link to a later or missing member is left out.
    def test_hard_link_to_a_later_or_missing_member_is_refused(self):
        _, _, err = self.check(archive(link("early", "a"), f("a", "A"), link("nowhere", "zz"),
                                       link("ok", "a")), refused=2, tar_fails=True)
        self.assertIn("member 'early' at byte 0", err)
        self.assertIn("member 'nowhere' at byte 1536", err)

    # Rule 4: what cannot replace what, as in tar.
    def test_what_may_replace_what(self):
        _, _, err = self.check(archive(d("d", mode=0o700, uid=5, gid=6, mtime=T0 - 100),
                                       f("d/x", "X"), f("d", "F")), refused=1, tar_fails=True)
        self.assertIn("member 'd' at byte 1536", err)
        self.check(archive(d("d", mode=0o700, uid=5, mtime=T0 - 100), f("d/x", "X"),
                           sym("d", "t")), refused=1, tar_fails=True)
        self.check(archive(f("a", "A"), d("d", mode=0o711, mtime=T0 - 9), f("d/x", "X"),
                           link("d", "a")), refused=1, tar_fails=True)
        # File over an empty directory, directory over a file or a symlink, a
        # later directory member over a directory: new metadata, entries stay.
        self.check(archive(d("e", mode=0o700), f("e", "F"), f("g", "G"), d("g", mode=0o750),
                           sym("s", "t"), d("s", mode=0o701),
                           d("k", mode=0o700, uid=5, mtime=T0 - 7), f("k/x", "X"),
                           d("k", mode=0o750, uid=6, gid=3, mtime=T0 - 99)), tar_fails=False)

    # Rule 5: a directory is made up only where no member describes it.
    def test_made_up_directories_only_where_no_member_describes_one(self):
        # The describing member after its children.
        self.check(archive(f("d/x", "X"), d("d", mode=0o700, uid=9, mtime=T0 - 3)))
        # A file (or symlink) describes "n", so nothing goes below it.
        _, _, err = self.check(archive(f("n", "N"), f("n/child", "C"), sym("s", "t"),
                                       f("s/inner", "I")), refused=2, tar_fails=True)
        self.assertIn("'n/child' at byte 1024", err)

    # Rule 6: a pax record wins over a GNU long name, whatever comes first.
    def test_pax_records_win_over_gnu_long_names(self):
        self.check(archive(d("pax"), gnu_long(b"L", "gnu/long/name") + pax(("path", "pax/p1")) +
                           f("ustar1", "1"),
                           pax(("path", "pax/p2")) + gnu_long(b"L", "gnu/other") + f("ustar2", "2"),
                           gnu_long(b"K", "gnu-target") + pax(("linkpath", "pax-target")) +
                           sym("pax/s", "ustar-target"),
                           gnu_long(b"L", "pax/neg") +
                           pax(("mtime", "-1.25"), ("uid", "1234567"), ("gid", "7654321")) +
                           f("ustar3", "3"),
                           gnu_long(b"L", "pax/sized") + pax(("size", "3")) + header("u4") +
                           pad(b"abc"),
                           gnu_long(b"K", "nowhere") + pax(("linkpath", "pax/p1")) +
                           link("pax/h", "ustar1")))

    # The same through a real FUSE mount: what programs see.
    def test_mounted_tree_equals_tar_extraction(self):
        idx, x, _ = self.check(
            archive(d("d", mode=0o700, uid=5, mtime=T0 - 100), f("d/a", "OLD", mode=0o640),
                    link("d/h", "d/a"), f("d/a", "NEW"), f("d", "refused"),
                    sym("d/s", "a"), link("d/s2", "d/s"), link("d/fwd", "d/later"),
                    f("d/later", "L"), d("d", mode=0o750, uid=6, mtime=T0 - 50)),
            refused=2)
        want = tl.walk_reference(x)
        mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            got = tl.walk_reference(mnt)
        del want[b""], got[b""]
        self.compare(want, got)


if __name__ == "__main__":
    tl.main()
