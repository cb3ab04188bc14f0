#!/usr/bin/env python3
"""Zip archives as shards: index build, mount, ls, verify.

Zips written by Info-ZIP `zip` (plain, and streamed to a pipe so that every
member has a data descriptor), by Python's zipfile (stored, deflated, zip64
forced) and by `bsdtar --format zip` are indexed and mounted, and the mounted
tree must equal what `unzip` extracts (names, types, modes, mtimes, owners,
content) and, for content and types, what `bsdtar -x` extracts. The
comparison is the tar-semantics tests' (shardfs_testlib.assert_same_tree).

Then: random reads at random offsets by 16 concurrent readers with every
byte checked; corrupt and cut deflate data give EIO and a log line naming
the archive and the member's offset; each refusal (encryption, other
methods, split archives, local headers that disagree, names that cannot be
in a tree); duplicate names (the later central directory entry wins, as
`unzip -o` leaves it); CP437 names; zips and tars unioned in order; `index
add`; ls/stat fields; verify; the kernel mount's refusal.
"""
import hashlib
import os
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
import unittest
import zipfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

T0 = 1_600_000_000  # Even: DOS times have 2-second steps.
compare = tl.assert_same_tree  # The tar-semantics oracle's comparison.


def make_source(root):
    """A small tree with compressible and random files, an empty file, nested
    directories, a symlink and a few modes; returns {relpath: bytes}."""
    rng = random.Random(24)
    files = {
        "a/empty": b"",
        "a/text.txt": b"hello zip\n" * 5000,
        "a/b/random.bin": bytes(rng.getrandbits(8) for _ in range(70_000)),
        "a/b/c/deep.json": b'{"k": [1, 2, 3]}\n' * 20_000,
        "top.dat": bytes(rng.getrandbits(8) for _ in range(1000)) * 40,
        "exec.sh": b"#!/bin/sh\necho hi\n",
    }
    for rel, data in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    os.chmod(os.path.join(root, "exec.sh"), 0o755)
    os.chmod(os.path.join(root, "a/text.txt"), 0o600)
    os.symlink("b/random.bin", os.path.join(root, "a/link"))
    t = T0
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (t, t), follow_symlinks=False)
            t += 2
    # A zip has no member for its root: the index gives the root the newest
    # child's mtime, and verify compares the root too.
    os.utime(root, (t - 2, t - 2))
    return files


def unzip_into(zips, dest):
    for z in zips:
        p = subprocess.run(["unzip", "-o", "-q", z, "-d", dest], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if p.returncode not in (0, 1):
            raise AssertionError("unzip %s: %s" % (z, p.stderr.decode(errors="replace")))


def bsdtar_into(z, dest):
    subprocess.run(["bsdtar", "-xf", z, "-C", dest], check=True)


def tree(root):
    t = tl.walk_reference(root)
    del t[b""]
    return t


def deflate_raw(data):
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def member_info(z, name):
    """(local header offset, data offset, compressed size) of `name` in zip `z`."""
    with zipfile.ZipFile(z) as zf:
        zi = zf.getinfo(name)
    with open(z, "rb") as f:
        f.seek(zi.header_offset)
        h = f.read(30)
    n, e = struct.unpack("<HH", h[26:30])
    return zi.header_offset, zi.header_offset + 30 + n + e, zi.compress_size


class ZipTest(tl.ScratchTestCase):
    PREFIX = "shardfs-zip-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.src = os.path.join(cls.tmp, "src")
        os.mkdir(cls.src)
        cls.files = make_source(cls.src)

    # -- helpers -----------------------------------------------------------

    def build(self, shards, *extra, check=0):
        idx = os.path.join(self.scratch("idx"), "index")
        p = tl.build_index(shards, idx, *extra, check=check)
        return idx, p.stderr.decode(errors="replace")

    def refused(self, z, *words):
        """index build of `z` fails, naming the archive and `words`; nothing published."""
        d = self.scratch("refused")
        idx = os.path.join(d, "index")
        p = tl.build_index([z], idx, check=1)
        err = p.stderr.decode(errors="replace")
        self.assertIn(z, err)
        for w in words:
            self.assertIn(w, err)
        self.assertFalse(os.path.exists(idx), "an index was published after: %s" % err)
        return err

    def mounted_tree(self, idx, options=None):
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt, options=options):
            return tree(mnt)

    def check_against_unzip(self, z, bsdtar=True, skip_mtime=()):
        idx, _ = self.build([z])
        got = self.mounted_tree(idx)
        x = self.scratch("unzip")
        unzip_into([z], x)
        want = tree(x)
        # unzip 6.0 sets no symlink's mtime: the index's is the archive's.
        skip = {os.fsencode(s) for s in skip_mtime} | {
            p for p, w in want.items() if w.type == "symlink"}
        compare(self, want, got, skip)
        for p in skip:
            if got[p].type == "symlink":
                self.assertEqual(got[p].mtime_ns, os.lstat(os.path.join(
                    os.fsencode(self.src), p)).st_mtime_ns // 10**9 * 10**9, p)
        if bsdtar:
            b = self.scratch("bsdtar")
            bsdtar_into(z, b)
            want = tree(b)
            self.assertEqual(sorted(want), sorted(got))
            for p, w in want.items():
                self.assertEqual((got[p].type, got[p].sha256, got[p].target),
                                 (w.type, w.sha256, w.target), p)
        return idx, got

    def infozip(self, name, *args, stream=False):
        out = os.path.join(self.scratch("zip"), name)
        if stream:
            # To a pipe zip cannot seek back: every member gets a data
            # descriptor. (Zip 3.0 refuses -y, storing symlinks, on a pipe.)
            subprocess.run("set -o pipefail; zip -q -r %s - . | cat > '%s'" % (" ".join(args), out),
                           shell=True, executable="/bin/bash", cwd=self.src,
                           stdin=subprocess.DEVNULL, check=True)
        else:
            subprocess.run(["zip", "-q", "-r", "-y", *args, out, "."], cwd=self.src, check=True)
        return out

    def pyzip(self, name, compression, force_zip64=False):
        """Python's zipfile over the source tree, directories and symlinks included."""
        out = os.path.join(self.scratch("py"), name)
        with zipfile.ZipFile(out, "w", compression) as zf:
            for dirpath, dirnames, filenames in os.walk(self.src):
                dirnames.sort()
                for n in sorted(dirnames) + sorted(filenames):
                    full = os.path.join(dirpath, n)
                    rel = os.path.relpath(full, self.src)
                    st = os.lstat(full)
                    if os.path.islink(full):
                        zi = zipfile.ZipInfo(rel, time.localtime(st.st_mtime)[:6])
                        zi.create_system = 3
                        zi.external_attr = (0o120777 << 16)
                        zf.writestr(zi, os.readlink(full))
                    elif os.path.isdir(full):
                        zf.write(full, rel)
                    else:
                        zi = zipfile.ZipInfo.from_file(full, rel)
                        zi.compress_type = compression
                        with open(full, "rb") as src, zf.open(zi, "w",
                                                              force_zip64=force_zip64) as dst:
                            shutil.copyfileobj(src, dst)
        return out

    # -- writers against unzip and bsdtar ----------------------------------

    def test_infozip(self):
        z = self.infozip("info.zip")
        idx, got = self.check_against_unzip(z)
        self.assertEqual(got[b"a/link"].target, b"b/random.bin")
        e = tl.index_entries(idx)
        self.assertEqual(e[b"a/text.txt"]["method"], "deflate")
        self.assertEqual(e[b"a/empty"]["size"], 0)

    def test_infozip_stored(self):
        z = self.infozip("stored.zip", "-0")
        idx, _ = self.check_against_unzip(z)
        for p, e in tl.index_entries(idx).items():
            if e["type"] == "file":
                self.assertEqual(e.get("method"), "stored", p)

    def test_infozip_streamed_with_data_descriptors(self):
        z = self.infozip("streamed.zip", stream=True)
        with zipfile.ZipFile(z) as zf:
            self.assertTrue(all(zi.flag_bits & 8 for zi in zf.infolist() if zi.file_size),
                            "streamed zip without data descriptors")
        self.check_against_unzip(z)

    def test_python_stored_deflated_zip64(self):
        for name, comp, z64 in (("st.zip", zipfile.ZIP_STORED, False),
                                ("df.zip", zipfile.ZIP_DEFLATED, False),
                                ("z64.zip", zipfile.ZIP_DEFLATED, True)):
            with self.subTest(name):
                z = self.pyzip(name, comp, z64)
                self.check_against_unzip(z)

    def test_zip64_end_records(self):
        # Python writes the zip64 end record and its locator only past 65,535
        # entries; lowered, it writes them for a few.
        saved = zipfile.ZIP_FILECOUNT_LIMIT
        zipfile.ZIP_FILECOUNT_LIMIT = 1
        try:
            z = self.pyzip("z64end.zip", zipfile.ZIP_DEFLATED, True)
        finally:
            zipfile.ZIP_FILECOUNT_LIMIT = saved
        self.assertIn(b"PK\x06\x07", tl.read_file(z)[-200:])
        self.check_against_unzip(z)

    def test_bsdtar_zip(self):
        z = os.path.join(self.scratch("bsd"), "bsd.zip")
        subprocess.run(["bsdtar", "-cf", z, "--format", "zip", "-C", self.src, "."], check=True)
        self.check_against_unzip(z)

    # -- reads -------------------------------------------------------------

    def test_random_reads_16_readers(self):
        z = self.infozip("reads.zip")
        idx, _ = self.build([z])
        mnt = self.scratch("mnt")
        names = [n for n, d in self.files.items() if d]
        errors = []
        counts = [0] * 16

        def reader(k):
            # A fixed number of reads each (16 x 500), not a fixed time: 3 s
            # of reading made ~95,000 of them.
            rng = random.Random(k)
            try:
                for _ in range(500):
                    n = rng.choice(names)
                    data = self.files[n]
                    off = rng.randrange(len(data) + 10)
                    ln = rng.choice([1, 100, 4096, 65536, 200_000])
                    fd = os.open(os.path.join(mnt, n), os.O_RDONLY)
                    try:
                        got = os.pread(fd, ln, off)
                    finally:
                        os.close(fd)
                    if got != data[off:off + ln]:
                        errors.append("%s at %d+%d" % (n, off, ln))
                        return
                    counts[k] += 1
            except OSError as e:
                errors.append("%s: %s" % (n, e))

        with tl.Mount(idx, mnt):
            threads = [threading.Thread(target=reader, args=(k,)) for k in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertFalse(any(t.is_alive() for t in threads), "a reader hangs")
        self.assertEqual(errors, [])
        self.assertGreater(sum(counts), 100)

    def corrupt_read(self, z, name, patch, build_extra=()):
        """Indexes `z`, applies patch(bytearray) to it in place (same size),
        reads `name` through a mount: must be EIO, with a log line naming the
        archive and the member's compressed offset."""
        idx, _ = self.build([z], *build_extra)
        data = bytearray(tl.read_file(z))
        patch(data)
        with open(z, "r+b") as f:
            f.write(data)
        _, data_at, _ = member_info(z, name)
        mnt = self.scratch("mnt")
        m = tl.Mount(idx, mnt)
        with m:
            for _ in range(2):  # A failed decode is not cached.
                with self.assertRaises(OSError) as cm:
                    with open(os.path.join(mnt, name), "rb", buffering=0) as f:
                        f.read()
                self.assertEqual(cm.exception.errno, 5)
        log = m.final_log()
        self.assertIn("zip %s: member at byte %d" % (z, data_at), log)

    def big_zip(self, name):
        """A deflated member in the middle of a zip of > 256 KiB, away from
        the bytes the shard fingerprint covers (64 KiB at each end)."""
        rng = random.Random(5)
        z = os.path.join(self.scratch("big"), name)
        with zipfile.ZipFile(z, "w") as zf:
            zf.writestr("head.bin", bytes(rng.getrandbits(8) for _ in range(150_000)))
            zi = zipfile.ZipInfo("mid.txt", (2020, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, b"".join(b"line %d\n" % i for i in range(20_000)))
            zf.writestr("tail.bin", bytes(rng.getrandbits(8) for _ in range(150_000)))
        return z

    def test_corrupt_deflate_data_is_eio_with_a_log_line(self):
        z = self.big_zip("corrupt.zip")
        _, data_at, comp = member_info(z, "mid.txt")

        def flip(d):
            for i in range(data_at + comp // 3, data_at + comp // 3 + 64):
                d[i] ^= 0x5A
        self.corrupt_read(z, "mid.txt", flip)

    def test_cut_deflate_data_is_eio_with_a_log_line(self):
        # The recorded compressed size cut short: the stream ends early.
        z = self.big_zip("cut.zip")
        lho, data_at, comp = member_info(z, "mid.txt")
        data = bytearray(tl.read_file(z))
        new = comp - 100
        struct.pack_into("<I", data, lho + 18, new)
        cd = data.rfind(b"PK\x01\x02mid.txt"[:4], 0)  # Find mid.txt's central entry.
        i = data.find(b"PK\x01\x02")
        while i >= 0:
            n = struct.unpack_from("<H", data, i + 28)[0]
            if data[i + 46:i + 46 + n] == b"mid.txt":
                struct.pack_into("<I", data, i + 20, new)
            i = data.find(b"PK\x01\x02", i + 4)
        del cd
        with open(z, "wb") as f:
            f.write(data)
        # With checksums the build inflates it and refuses it.
        err = self.refused(z, "mid.txt", "deflate data")
        self.assertIn("at byte %d" % data_at, err)
        self.corrupt_read(z, "mid.txt", lambda d: None, build_extra=("--no-checksum",))

    # -- refusals ------------------------------------------------------------

    def test_encrypted_is_refused(self):
        z = self.infozip("enc.zip", "-P", "secret")
        self.refused(z, "encrypted")

    def test_other_methods_are_refused(self):
        for comp, word in ((zipfile.ZIP_BZIP2, "bzip2"), (zipfile.ZIP_LZMA, "lzma")):
            z = os.path.join(self.scratch("m"), word + ".zip")
            with zipfile.ZipFile(z, "w", comp) as zf:
                zf.writestr("x.txt", b"x" * 1000)
            self.refused(z, "x.txt", "method", word)

    def test_split_archive_is_refused(self):
        d = self.scratch("split")
        rng = random.Random(9)
        with open(os.path.join(d, "big.bin"), "wb") as f:
            f.write(bytes(rng.getrandbits(8) for _ in range(200_000)))
        subprocess.run(["zip", "-q", "-s", "64k", "sp.zip", "big.bin"], cwd=d, check=True)
        self.assertTrue(os.path.exists(os.path.join(d, "sp.z01")))
        self.refused(os.path.join(d, "sp.zip"), "split or spanned")

    def test_local_header_disagreeing_is_refused(self):
        for what, off in (("name", 30), ("method", 8)):
            z = os.path.join(self.scratch("dis"), "dis.zip")
            with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
                zf.writestr("ok.txt", b"fine" * 100)
                zf.writestr("bad.txt", b"data" * 100)
            lho, _, _ = member_info(z, "bad.txt")
            data = bytearray(tl.read_file(z))
            if what == "name":
                data[lho + off] = ord("B")
            else:
                struct.pack_into("<H", data, lho + off, 0)
            tl.write_file(z, data)
            with self.subTest(what):
                self.refused(z, "bad.txt", "disagrees with the central directory", what)

    def test_names_that_cannot_be_in_a_tree_are_refused(self):
        for name in ("../evil.txt", "a/../../evil.txt"):
            z = os.path.join(self.scratch("names"), "n.zip")
            with zipfile.ZipFile(z, "w") as zf:
                zf.writestr("ok.txt", b"ok")
                zf.writestr(name, b"evil")
            with self.subTest(name):
                self.refused(z, name, "cannot be in a tree")

    def test_huge_deflated_member_is_refused(self):
        # Its declared size alone refuses it: a read would inflate it whole.
        z = os.path.join(self.scratch("huge"), "huge.zip")
        with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("small.txt", b"s" * 1000)
        data = bytearray(tl.read_file(z))
        struct.pack_into("<I", data, 22, 3 << 30)  # local header's uncompressed size
        i = data.find(b"PK\x01\x02")
        struct.pack_into("<I", data, i + 24, 3 << 30)
        tl.write_file(z, data)
        for extra in ((), ("--no-checksum",)):
            p = tl.build_index([z], os.path.join(self.scratch("x"), "index"), *extra, check=1)
            err = p.stderr.decode(errors="replace")
            self.assertIn("small.txt", err)
            self.assertIn("larger than", err)

    def flat_bomb(self, name, entries, size=256 << 20):
        """A zip whose central directory names one deflated member of `size`
        zero bytes `entries` times, every entry at the one local header."""
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        chunk = bytes(1 << 20)
        assert size % len(chunk) == 0
        comp, crc = b"", 0
        for _ in range(size // len(chunk)):
            comp += c.compress(chunk)
            crc = zlib.crc32(chunk, crc)
        comp += c.flush()
        n = b"zeros"
        local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(comp), size,
                            len(n), 0) + n + comp
        entry = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0, 8, 0, 0x21, crc,
                            len(comp), size, len(n), 0, 0, 0, 0, 0o100644 << 16, 0) + n
        central = entry * entries
        end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, entries, entries, len(central),
                          len(local), 0)
        z = os.path.join(self.scratch("bomb"), name)
        tl.write_file(z, local + central + end)
        return z

    def build_measured(self, z, *extra, timeout=20):
        """index build of `z` in a child of a fresh Python, which kills it
        after `timeout` s: (exit code or "timeout", peak RSS in KiB, stderr,
        index path)."""
        tl.require_shardfs()
        idx = os.path.join(self.scratch("measured"), "index")
        probe = ("import resource, subprocess, sys\n"
                 "try:\n"
                 "    p = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL,\n"
                 "                       stderr=subprocess.PIPE, timeout=float(sys.argv[1]))\n"
                 "    rc, err = p.returncode, p.stderr\n"
                 "except subprocess.TimeoutExpired as e:\n"
                 "    rc, err = 'timeout', e.stderr or b''\n"
                 "sys.stderr.buffer.write(err)\n"
                 "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
        p = subprocess.run([sys.executable, "-c", probe, str(timeout), tl.SHARDFS, "index",
                            "build", "--quiet", "--out", idx, *extra, z],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout + 60)
        rc, rss = p.stdout.decode().split()
        return rc, int(rss), p.stderr.decode(errors="replace"), idx

    def test_overlapping_entries_are_refused_before_inflating(self):
        # 1,000 central entries at one local header of 256 MiB of zeros
        # (~250 KiB deflated): 250 GiB to inflate, one entry at a time, if
        # each were inflated to checksum it.
        z = self.flat_bomb("flat.zip", 1000)
        self.assertLess(os.path.getsize(z), 1 << 20)
        rc, rss, err, idx = self.build_measured(z)
        self.assertEqual(rc, "1", err)
        self.assertLess(rss, 100 << 10, "peak RSS %d KiB" % rss)
        self.assertIn("zip %s: members 'zeros' (local header at byte 0, data to byte " % z, err)
        self.assertIn("and 'zeros' (local header at byte 0) overlap: refused as a zip bomb", err)
        self.assertFalse(os.path.exists(idx))

    def test_declared_sizes_past_the_ratio_are_refused_naming_the_option(self):
        # One member of 300 MiB of zeros, ~300 KiB deflated: ~1000:1.
        z = self.flat_bomb("ratio.zip", 1, size=300 << 20)
        size = os.path.getsize(z)
        self.refused(z, "its members declare %d uncompressed bytes, more than 100 times the "
                        "zip's %d bytes: refused as a zip bomb" % (300 << 20, size),
                     "--max-zip-ratio")
        rc, _, err, idx = self.build_measured(z, "--max-zip-ratio", "5000", timeout=60)
        self.assertEqual(rc, "0", err)
        self.assertEqual(tl.index_entries(idx)[b"zeros"]["size"], 300 << 20)
        p = tl.build_index([z], os.path.join(self.scratch("x"), "index"), "--max-zip-ratio", "0",
                           check=2)
        self.assertIn("--max-zip-ratio needs a count of at least 1", p.stderr.decode())

    def test_a_cut_zip_is_refused_as_a_zip(self):
        z = self.pyzip("cut.zip", zipfile.ZIP_DEFLATED)
        data = tl.read_file(z)
        tl.write_file(z, data[:-10])  # The end record cut.
        p = tl.build_index([z], os.path.join(self.scratch("x"), "index"), check=1)
        err = p.stderr.decode(errors="replace")
        self.assertIn("zip %s: no end of central directory record" % z, err)

    def test_bytes_after_the_end_record_are_refused_by_name(self):
        # unzip reads past them; shardfs says what they are and how to drop them.
        z = self.pyzip("tail.zip", zipfile.ZIP_DEFLATED)
        size = os.path.getsize(z)
        with open(z, "ab") as f:
            f.write(b"trailing bytes")
        self.assertEqual(subprocess.run(["unzip", "-tq", z], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE).returncode, 0)
        p = tl.build_index([z], os.path.join(self.scratch("x"), "index"), check=1)
        err = p.stderr.decode(errors="replace")
        self.assertIn("zip %s: 14 bytes follow the end of central directory record, which ends "
                      "at byte %d" % (z, size), err)
        self.assertIn("truncate the file to %d bytes" % size, err)

    # -- semantics -----------------------------------------------------------

    def test_duplicate_names_the_later_entry_wins(self):
        z = os.path.join(self.scratch("dup"), "dup.zip")
        with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(zipfile.ZipInfo("same.txt", (2020, 1, 1, 0, 0, 0)), b"first\n")
            zf.writestr(zipfile.ZipInfo("other.txt", (2020, 1, 1, 0, 0, 0)), b"other\n")
            with self.assertWarns(UserWarning):
                zf.writestr(zipfile.ZipInfo("same.txt", (2021, 1, 1, 0, 0, 0)), b"second!\n")
        _, got = self.check_against_unzip(z, bsdtar=False)
        mnt = self.scratch("mnt")
        idx, _ = self.build([z])
        with tl.Mount(idx, mnt):
            self.assertEqual(tl.read_file(os.path.join(mnt, "same.txt")), b"second!\n")

    def test_cp437_names_become_utf8(self):
        z = os.path.join(self.scratch("cp"), "cp.zip")
        with zipfile.ZipFile(z, "w") as zf:
            zi = zipfile.ZipInfo("abXc.txt", (2020, 1, 1, 0, 0, 0))
            zi.create_system = 0  # MS-DOS: the name is CP437
            zf.writestr(zi, b"dos")
            zi = zipfile.ZipInfo("unYx.txt", (2020, 1, 1, 0, 0, 0))
            zi.create_system = 3  # Unix: raw bytes
            zi.external_attr = 0o644 << 16
            zf.writestr(zi, b"unix")
            zf.writestr("utf8-\u00e9.txt", b"utf8")  # flag bit 11
        data = tl.read_file(z).replace(b"abXc", b"ab\x81\xdb").replace(b"unYx", b"un\xffx")
        tl.write_file(z, data)
        idx, _ = self.build([z])
        got = self.mounted_tree(idx)
        self.assertEqual(sorted(got), sorted([
            "ab\u00fc\u2588.txt".encode(), b"un\xffx.txt", "utf8-\u00e9.txt".encode()]))
        # Debian's unzip 6.0 is no oracle here: it gives ISO-8859-1
        # approximations for CP437 names (0x81 -> 0xfc, 0xdb -> 0xa6) and drops
        # the 0xff byte of the Unix name. Where Latin-1 can say it, it agrees.
        x = self.scratch("unzip")
        unzip_into([z], x)
        names = sorted(os.listdir(os.fsencode(x)))
        self.assertIn("utf8-\u00e9.txt".encode(), names)
        dos = [n for n in names if n.startswith(b"ab")][0]
        self.assertEqual(dos[:3].decode("latin-1"), "ab\u00fc")

    def test_zips_and_tars_union_in_order(self):
        d = self.scratch("union")
        tsrc = os.path.join(d, "t")
        os.makedirs(os.path.join(tsrc, "a"))
        with open(os.path.join(tsrc, "a", "text.txt"), "wb") as f:
            f.write(b"from the tar\n")
        with open(os.path.join(tsrc, "only-tar"), "wb") as f:
            f.write(b"tar\n")
        t = os.path.join(d, "x.tar")
        subprocess.run(["tar", "-cf", t, "-C", tsrc, "."], check=True)
        z = self.infozip("u.zip")
        # Tar then zip: the zip's a/text.txt wins; zip then tar: the tar's.
        idx, _ = self.build([t, z])
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt):
            self.assertEqual(tl.read_file(os.path.join(mnt, "a/text.txt")),
                             self.files["a/text.txt"])
            self.assertEqual(tl.read_file(os.path.join(mnt, "only-tar")), b"tar\n")
        idx2, _ = self.build([z, t])
        with tl.Mount(idx2, mnt):
            self.assertEqual(tl.read_file(os.path.join(mnt, "a/text.txt")),
                             b"from the tar\n")
            self.assertEqual(tl.read_file(os.path.join(mnt, "top.dat")),
                             self.files["top.dat"])
        # The same index built bounded (spilled) is the same.
        idx3, _ = self.build([t, z], "--memory", "1")
        self.assertEqual(tl.ls_json(idx3), tl.ls_json(idx))
        # A directory given: its *.tar and *.zip.
        idx4, _ = self.build([d])
        self.assertIn(b"a/text.txt", tl.index_entries(idx4))

    def test_index_add_a_zip(self):
        d = self.scratch("add")
        with open(os.path.join(d, "one.txt"), "wb") as f:
            f.write(b"one\n")
        t = os.path.join(d, "one.tar")
        subprocess.run(["tar", "-cf", t, "-C", d, "one.txt"], check=True)
        idx, _ = self.build([t])
        z = self.infozip("add.zip")
        tl.run_shardfs("index", "add", "--quiet", idx, z, check=0)
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt):
            self.assertEqual(tl.read_file(os.path.join(mnt, "one.txt")), b"one\n")
            for n, data in self.files.items():
                self.assertEqual(tl.read_file(os.path.join(mnt, n)), data, n)

    def test_ls_stat_show_the_method_and_compressed_range(self):
        z = self.infozip("ls.zip")
        idx, _ = self.build([z])
        e = tl.index_entries(idx)[b"a/text.txt"]
        _, data_at, comp = member_info(z, "a/text.txt")
        self.assertEqual((e["method"], e["compressed_offset"], e["compressed_size"], e["offset"]),
                         ("deflate", data_at, comp, data_at))
        self.assertEqual(e["crc32"], "%08x" % zlib.crc32(self.files["a/text.txt"]))
        p = tl.run_shardfs("stat", idx, "a/text.txt", check=0)
        self.assertIn(b"method: deflate, %d compressed bytes at byte %d" % (comp, data_at),
                      p.stdout)
        info, _ = tl.index_info(idx)
        self.assertEqual(info["schema_version"], 3)
        # A stored-only zip keeps the schema of a plain tar index.
        idx2, _ = self.build([self.infozip("st.zip", "-0")])
        info2, _ = tl.index_info(idx2)
        self.assertEqual(info2["schema_version"], 1)

    def test_verify_against_the_source(self):
        z = self.infozip("v.zip")
        idx, _ = self.build([z])
        for extra in ((), ("--full",)):
            p = tl.run_shardfs("verify", *extra, idx, self.src)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_verify_first_mount_option(self):
        z = self.infozip("vf.zip")
        idx, _ = self.build([z])
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt, options="verify=first"):
            for n, data in self.files.items():
                self.assertEqual(tl.read_file(os.path.join(mnt, n)), data, n)

    def test_views_and_rank_exports(self):
        z = self.infozip("views.zip")
        idx, _ = self.build([z])
        tl.view_create(idx, "cut", "--exclude", "top.dat", check=0)
        want = {n: d for n, d in self.files.items() if n != "top.dat"}
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt, options="view=cut"):
            self.assertFalse(os.path.exists(os.path.join(mnt, "top.dat")))
            for n, data in want.items():
                self.assertEqual(tl.read_file(os.path.join(mnt, n)), data, n)
        out = os.path.join(self.scratch("export"), "rank0")
        tl.run_shardfs("view", "export", idx, "cut", "--format", "index", "--out", out, check=0)
        e = tl.index_entries(out)
        self.assertEqual(e[b"a/text.txt"]["method"], "deflate")
        with tl.Mount(out, mnt):
            for n, data in want.items():
                self.assertEqual(tl.read_file(os.path.join(mnt, n)), data, n)

    def test_remote_zip_through_the_chunk_cache(self):
        import remote_servers as rs
        served = self.scratch("served")
        shutil.copy(self.infozip("remote.zip"), os.path.join(served, "remote.zip"))
        with rs.Nginx(served) as web:
            url = web.url + "/remote.zip"
            idx, _ = self.build([url])
            self.assertEqual(tl.index_entries(idx)[b"a/text.txt"]["method"], "deflate")
            mnt = self.scratch("mnt")
            with tl.Mount(idx, mnt, options="cache_dir=%s" % self.scratch("cache")):
                for n, data in self.files.items():
                    with open(os.path.join(mnt, n), "rb", buffering=0) as f:
                        self.assertEqual(f.read(), data, n)
                x = self.scratch("unzip")
                unzip_into([os.path.join(served, "remote.zip")], x)
                want = tree(x)
                got = tree(mnt)
                self.assertEqual({p: w.sha256 for p, w in want.items()},
                                 {p: g.sha256 for p, g in got.items()})

    def test_kernel_mount_refuses_a_zip(self):
        z = self.infozip("k.zip")
        idx, _ = self.build([z])
        mnt = self.scratch("mnt")
        p = tl.run_shardfs("mount", "--kernel", idx, mnt, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"zip archives are not supported by the kernel mount", p.stderr)
        self.assertFalse(tl.is_mounted(mnt))


if __name__ == "__main__":
    tl.main()
