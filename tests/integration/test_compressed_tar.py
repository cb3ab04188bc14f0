#!/usr/bin/env python3
"""Compressed tar shards (.tar.gz, .tar.zst, .tar.xz): `index build` decodes
the stream once and records seek points; the mount decodes one interval per
read. Every mounted tree is compared with GNU tar's own extraction (names,
types, modes, mtimes, owners, content) through test_tar_semantics's
comparison; random reads across seek points under 16 concurrent readers are
checked byte for byte; corrupt and truncated data give EIO and a log line,
never wrong bytes; the kernel path is refused with a message. bzip2 has its
own tests (test_bzip2.py)."""

import io
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers as rs  # noqa: E402
import shardfs_testlib as tl  # noqa: E402
import test_tar_semantics as ts  # noqa: E402


def make_tree(root, seed):
    """Files of assorted sizes (some compressible, some not), a symlink, a
    hard link, an empty file, a directory with its own mode."""
    rnd = random.Random(seed)
    os.makedirs(os.path.join(root, "a", "b"))
    os.makedirs(os.path.join(root, "c"))
    for i in range(120):
        n = rnd.choice([0, 1, 100, 511, 512, 4096, 70000, 300000])
        if rnd.random() < 0.5:
            data = rnd.randbytes(n)
        else:
            data = (b"line %d of file %d\n" % (i, n)) * (n // 20 + 1)
            data = data[:n]
        tl.write_file(os.path.join(root, ("a", "a/b", "c")[i % 3], "f%03d.bin" % i), data)
    tl.write_file(os.path.join(root, "big.bin"), rnd.randbytes(3 << 20))
    os.symlink("a/f000.bin", os.path.join(root, "link"))
    os.link(os.path.join(root, "big.bin"), os.path.join(root, "big-hard.bin"))
    os.chmod(os.path.join(root, "c"), 0o750)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (1600000000, 1600000000 + len(name)),
                     follow_symlinks=False)


# (name, compress command with {tar} and {out}, GNU tar's flag to read it)
CODECS = [
    ("gzip", "gzip -c {tar} > {out}", "-z"),
    ("pigz", "pigz -p 2 -b 128 -c {tar} > {out}", "-z"),
    ("gzip-concat", "head -c 1000000 {tar} | gzip -c > {out}; tail -c +1000001 {tar} | gzip -c >> {out}",
     "-z"),
    ("zstd", "zstd -q -c {tar} > {out}", "--zstd"),
    ("pzstd", "pzstd -q -p 2 -c {tar} > {out}", "--zstd"),
    ("xz", "xz -T2 --block-size=256KiB -c {tar} > {out}", "-J"),
]


class CompressedTarTest(tl.ScratchTestCase):
    PREFIX = "shardfs-ctar-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        make_tree(cls.src, 5)
        cls.tar = os.path.join(cls.tmp, "plain.tar")
        subprocess.run(["tar", "--format=gnu", "-cf", cls.tar, "-C", cls.src, "."], check=True)
        cls.compressed = {}  # {command: its output, made once}

    def compress(self, d, name, cmd):
        """d/shard.tar.NAME: the class's tar compressed by `cmd`, a copy of
        that command's first output (the same bytes; many tests run gzip, and
        each may damage its copy)."""
        out = os.path.join(d, "shard.tar." + name)
        first = self.compressed.get(cmd)
        if first is None:
            first = os.path.join(self.tmp, "compressed-%d" % len(self.compressed))
            subprocess.run(cmd.format(tar=self.tar, out=first), shell=True, check=True)
            self.compressed[cmd] = first
        shutil.copyfile(first, out)
        return out

    def extract(self, d, shard, flag):
        x = os.path.join(d, "x")
        os.mkdir(x)
        subprocess.run(["tar", flag, "-xf", shard, "-C", x], check=True)
        want = tl.walk_reference(x)
        del want[b""]
        return want

    def test_codecs_match_gnu_tar(self):
        for name, cmd, flag in CODECS:
            with self.subTest(codec=name):
                d = self.scratch(name)
                shard = self.compress(d, name, cmd)
                want = self.extract(d, shard, flag)
                idx = os.path.join(d, "idx")
                build = tl.build_index([shard], idx, "--seek-spacing", "256K")
                info = tl.run_shardfs("ls", "--json", idx, check=0)
                self.assertIn(b'"codec"', info.stdout)
                mnt = os.path.join(d, "mnt")
                os.mkdir(mnt)
                with tl.Mount(idx, mnt, options="verify=first"):
                    got = tl.walk_reference(mnt)
                del got[b""]
                ts.TarSemanticsTest.compare(self, want, got)
                if name == "zstd":
                    self.assertIn("only be read sequentially", build.stderr.decode())
                # Without verify=, a file inside one interval decodes only up
                # to its end, checked against its own checksum: every file
                # read in reverse stream order (so prefixes come short first
                # where they can) still equals GNU tar's.
                spans = sorted(((off, size, n) for n, (off, size) in
                                self.member_spans(shard, flag).items()), reverse=True)
                with tl.Mount(idx, mnt) as m:
                    for _, _, rel in spans:
                        self.assertEqual(tl.read_file(os.path.join(mnt, rel)),
                                         tl.read_file(os.path.join(self.src, rel)), rel)
                    st = json.loads(tl.run_shardfs("stats", "--json", mnt, check=0).stdout)
                    self.assertGreater(st["stream_intervals_prefix"], 0, st)
                    self.assertGreater(st["stream_reads_file_checked"], 0, st)
                    self.assertNotIn("differs", m.stderr())

    def test_random_reads_16_readers(self):
        d = self.scratch("random")
        shard = self.compress(d, "gz", "gzip -c {tar} > {out}")
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx, "--seek-spacing", "64K")
        files = tl.regular_files(self.src)
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            problems = tl.random_range_reads(mnt, files, 200000)
        self.assertEqual(problems, [])

    def corrupt_mount(self, name, damage):
        """Indexes a good .tar.gz, damages it with damage(path), reads every
        file: each read gives the right bytes or EIO, never others; returns
        (EIO count, daemon log)."""
        d = self.scratch(name)
        shard = self.compress(d, "gz", "gzip -c {tar} > {out}")
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx, "--seek-spacing", "64K")
        damage(shard)
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt, options="verify=first") as m:
            eio = tl.read_all_right_or_eio(self, mnt, tl.regular_files(self.src))
            log = m.stderr()
        return eio, log

    def test_corrupt_data_gives_eio(self):
        def flip(path):
            size = os.path.getsize(path)
            with open(path, "r+b") as fh:
                for off in range(size // 2, size // 2 + 4096, 64):
                    fh.seek(off)
                    b = fh.read(1)
                    fh.seek(off)
                    fh.write(bytes([b[0] ^ 0x5a]))
        eio, log = self.corrupt_mount("corrupt", flip)
        self.assertGreater(eio, 0)
        self.assertRegex(log, r"shard \S+shard\.tar\.gz")

    def test_damage_that_still_decodes_gives_eio_unverified(self):
        # Random bytes are kept in stored deflate blocks: a flipped byte
        # there still inflates, to wrong bytes of the right length. The
        # interval checksum catches it, without verify= (the mount default).
        d = self.scratch("stored")
        shard = self.compress(d, "gz", "gzip -c {tar} > {out}")
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx, "--seek-spacing", "256K")
        big = tl.read_file(os.path.join(self.src, "big.bin"))
        needle = big[1 << 20:(1 << 20) + 64]
        data = bytearray(tl.read_file(shard))
        at = data.find(needle)
        self.assertGreater(at, 0, "big.bin's bytes are not stored verbatim in the .gz")
        data[at + 10] ^= 0x01  # The shard then counts as damaged: all its reads fail.
        with open(shard, "r+b") as fh:
            fh.seek(at + 10)
            fh.write(bytes([data[at + 10]]))
        st = os.stat(shard)
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt, options="decode_cache=0") as m:
            with self.assertRaises(OSError) as cm:
                tl.read_file(os.path.join(mnt, "big.bin"))
            self.assertEqual(cm.exception.errno, 5)
            self.assertTrue(tl.wait_until(lambda: "checksum differs" in m.stderr()),
                            m.stderr()[-2000:])
            self.assertRegex(m.stderr(), r"shard \S+shard\.tar\.gz: seek point \d+ at compressed byte \d+")
        self.assertEqual(os.stat(shard).st_size, st.st_size)

    def member_spans(self, shard, flag):
        """{name: (decoded offset, size)} of the regular files of `shard`, from its
        uncompressed tar (GNU tar's -O decompression, read by Python's tarfile)."""
        raw = subprocess.run({"-z": ["gzip", "-dc", shard], "-J": ["xz", "-dc", shard],
                              "--zstd": ["zstd", "-qdc", shard]}[flag],
                             stdout=subprocess.PIPE, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
            return {m.name[2:] if m.name.startswith("./") else m.name: (m.offset_data, m.size)
                    for m in tf.getmembers() if m.isreg()}

    def test_a_small_file_decodes_only_up_to_its_end(self):
        # One interval for the whole tar: a read of a file decodes from the
        # seek point to that file's end and no further, and is checked
        # against the file's checksum; a later file decodes a longer prefix.
        d = self.scratch("prefix")
        shard = self.compress(d, "gz", "gzip -c {tar} > {out}")
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx, "--seek-spacing", "16M")
        spans = sorted((off, size, name) for name, (off, size) in
                       self.member_spans(shard, "-z").items() if size > 0)
        tar_size = os.path.getsize(self.tar)
        early = spans[len(spans) // 4]
        late = spans[3 * len(spans) // 4]
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            def stats():
                return json.loads(tl.run_shardfs("stats", "--json", mnt, check=0).stdout)
            for off, size, name in (early, late, early):
                self.assertEqual(tl.read_file(os.path.join(mnt, name)),
                                 tl.read_file(os.path.join(self.src, name)), name)
            st = stats()
            # early, then late (a longer prefix replaces it), then early again
            # (a hit, checked again): two decodes, neither whole.
            self.assertEqual(st["stream_intervals_whole"], 0, st)
            self.assertEqual(st["stream_intervals_prefix"], 2, st)
            self.assertEqual(st["decoded_bytes"], early[0] + early[1] + late[0] + late[1], st)
            # The longer prefix replaced the shorter one; neither is the whole stream.
            self.assertEqual(st["decoded_resident_bytes"], late[0] + late[1], st)
            self.assertEqual(st["decoded_resident_blocks"], 1, st)
            self.assertLess(late[0] + late[1], tar_size)
            self.assertGreaterEqual(st["stream_reads_file_checked"], 2, st)
            # The text form says it too.
            text = tl.run_shardfs("stats", mnt, check=0).stdout.decode()
            self.assertRegex(text, r"0 intervals decoded whole, 2 only up to a file's end")
            problems = tl.random_range_reads(mnt, tl.regular_files(self.src), 20000)
            self.assertEqual(problems, [])

    def test_damage_in_a_file_read_by_prefix_gives_eio(self):
        # A byte flipped in a stored deflate block still inflates, to wrong
        # bytes of the right length; the read that decoded only up to its
        # file's end has no interval checksum to catch it: the file's does.
        d = self.scratch("prefix-damage")
        shard = self.compress(d, "gz", "gzip -c {tar} > {out}")
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx, "--seek-spacing", "16M")
        spans = self.member_spans(shard, "-z")
        data = bytearray(tl.read_file(shard))
        victim, at = None, -1
        for name, (off, size) in sorted(spans.items()):
            if size == 70000:
                content = tl.read_file(os.path.join(self.src, name))
                at = data.find(content[30000:30064])
                if at > 0 and len(set(content[:4096])) > 200:  # Random bytes, stored verbatim.
                    victim = name
                    break
        self.assertIsNotNone(victim, "no random 70000-byte file stored verbatim in the .gz")
        with open(shard, "r+b") as fh:
            fh.seek(at + 7)
            fh.write(bytes([data[at + 7] ^ 0x01]))
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt) as m:
            with self.assertRaises(OSError) as cm:
                tl.read_file(os.path.join(mnt, victim))
            self.assertEqual(cm.exception.errno, 5)
            self.assertTrue(tl.wait_until(lambda: "differs from its checksum" in m.stderr()),
                            m.stderr()[-2000:])
            self.assertRegex(m.stderr(), r"shard \S+shard\.tar\.gz: seek point 0 at compressed "
                                         r"byte \d+: the file at decoded byte %d differs"
                                         % spans[victim][0])
            st = json.loads(tl.run_shardfs("stats", "--json", mnt, check=0).stdout)
            self.assertEqual(st["stream_intervals_whole"], 0, st)

    def test_truncated_gives_eio(self):
        def cut(path):
            os.truncate(path, os.path.getsize(path) // 2)
        eio, log = self.corrupt_mount("truncated", cut)
        self.assertGreater(eio, 0)
        self.assertIn("shard.tar.gz", log)

    def test_build_refuses_truncated(self):
        d = self.scratch("refuse")
        shard = self.compress(d, "gz", "gzip -c {tar} > {out}")
        os.truncate(shard, os.path.getsize(shard) // 2)
        r = tl.build_index([shard], os.path.join(d, "idx"), check=None)
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stderr.decode(), r"shard\.tar\.gz: at compressed byte \d+: truncated")
        self.assertFalse(os.path.exists(os.path.join(d, "idx")))

    def test_build_refuses_a_seek_spacing_no_read_could_use(self):
        # A mount decodes at most 64 MiB for one read, and a checkpoint may
        # wait up to twice the spacing for a full flush: a spacing past a
        # quarter of that made an index whose reads all failed (EIO).
        d = self.scratch("spacing")
        shard = self.compress(d, "gz", "gzip -c {tar} > {out}")
        r = tl.build_index([shard], os.path.join(d, "idx"), "--seek-spacing", "80M", check=None)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--seek-spacing", r.stderr.decode())
        self.assertFalse(os.path.exists(os.path.join(d, "idx")))
        tl.build_index([shard], os.path.join(d, "idx"), "--seek-spacing", "16M")

    def test_build_warns_of_a_deflate_block_no_read_can_decode(self):
        # One fixed-Huffman block of 66 MiB of zeros (matches of 258 at
        # distance 1): no block boundary inside it, so no seek point; a
        # mount refuses (EIO) every read of it, as of a huge zstd frame.
        d = self.scratch("block")
        n = 66 << 20
        info = tarfile.TarInfo("z.bin")
        info.size = n
        head = info.tobuf(format=tarfile.GNU_FORMAT)
        bits = [0, 0]  # Accumulator, count (LSB first).
        out = bytearray()

        def put(v, k):
            bits[0] |= v << bits[1]
            bits[1] += k
            while bits[1] >= 8:
                out.append(bits[0] & 0xFF)
                bits[0] >>= 8
                bits[1] -= 8

        def rev(code, k):
            return int(format(code, "0%db" % k)[::-1], 2)

        def lit(b):
            put(rev(0x30 + b, 8), 8) if b < 144 else put(rev(0x190 + b - 144, 9), 9)

        put(1, 1)
        put(1, 2)  # The final block, fixed Huffman codes.
        for b in head + b"\0":
            lit(b)
        q, r = divmod(n + 1024 - 1, 258)
        for _ in range(q):
            put(rev(0xC5, 8), 13)  # Length 258, then distance 1 (5 zero bits).
        for _ in range(r):
            lit(0)
        put(0, 7)  # End of block.
        put(0, (8 - bits[1]) % 8)
        data = head + bytes(n + 1024)
        shard = os.path.join(d, "block.tar.gz")
        with open(shard, "wb") as fh:
            fh.write(b"\x1f\x8b\x08\0\0\0\0\0\0\x03" + bytes(out) +
                     struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF))
        del data
        r = tl.build_index([shard], os.path.join(d, "idx"), check=0)
        self.assertRegex(r.stderr.decode(), r"block\.tar\.gz: gzip stream with \d+ decoded bytes "
                                             r"between two seek points")

    def test_kernel_mount_refused(self):
        d = self.scratch("kernel")
        shard = self.compress(d, "zst", "pzstd -q -p 2 -c {tar} > {out}")
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx)
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        r = tl.run_shardfs("mount", "--kernel", idx, mnt, check=None, timeout=60)
        if os.path.ismount(mnt):
            tl.kernel_unmount(mnt)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("zstd-compressed tar shard", r.stderr.decode())

    def test_index_add_and_verify(self):
        d = self.scratch("add")
        plain = os.path.join(d, "one.tar")
        os.makedirs(os.path.join(d, "extra"))
        tl.write_file(os.path.join(d, "extra", "new.txt"), b"new file\n" * 1000)
        subprocess.run(["tar", "-cf", plain, "-C", os.path.join(d, "extra"), "."], check=True)
        idx = os.path.join(d, "idx")
        tl.build_index([plain], idx)
        shard = self.compress(d, "xz", "xz -T2 --block-size=256KiB -c {tar} > {out}")
        tl.run_shardfs("index", "add", idx, shard, check=0)
        r = tl.run_shardfs("verify", "--full", idx, self.src, check=None)
        # The tree holds new.txt too; content compares equal (against the
        # checksums of the decoded stream: --full reads no compressed bytes).
        out = r.stdout.decode() + r.stderr.decode()
        self.assertIn("extra: new.txt", out)
        self.assertNotIn("content differs", out)
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            self.assertEqual(tl.read_file(os.path.join(mnt, "big.bin")),
                             tl.read_file(os.path.join(self.src, "big.bin")))
            self.assertEqual(tl.read_file(os.path.join(mnt, "new.txt")), b"new file\n" * 1000)

    def check_tree(self, mnt):
        """Every file under mount `mnt` reads as the source's; returns their
        paths (bytes, relative)."""
        seen = set()
        for dirpath, _, filenames in os.walk(mnt):
            for n in filenames:
                path = os.path.join(dirpath, n)
                if os.path.islink(path):
                    continue
                rel = os.path.relpath(path, mnt)
                self.assertEqual(tl.read_file(path), tl.read_file(os.path.join(self.src, rel)),
                                 rel)
                seen.add(os.fsencode(rel))
        return seen

    def test_views_and_ranks(self):
        d = self.scratch("views")
        shards = [self.compress(d, "gz", "gzip -c {tar} > {out}"),
                  self.compress(d, "zst", "pzstd -q -p 2 -c {tar} > {out}")]
        # Two shards of one tree: the second replaces every member, as tar would.
        idx = os.path.join(d, "idx")
        tl.build_index(shards, idx)
        tl.run_shardfs("view", "create", idx, "sub", "--include", "a/**", check=0)
        src_a = os.path.join(self.src, "a")
        # Every file lies in the second shard: two ranks split it by samples,
        # each reading its part of one compressed shard through its seek
        # points, with as many samples as the other; an odd one is trimmed.
        every = self.check_tree(self.src)
        n = len(tl.samples_of(every))
        ranks = []
        for opts in ("view=sub", "rank=0,world=2", "rank=1,world=2"):
            with self.subTest(opts=opts):
                mnt = self.scratch("mnt")
                with tl.Mount(idx, mnt, options=opts):
                    files = self.check_tree(mnt)
                    if opts == "view=sub":
                        self.assertEqual(sorted(os.listdir(mnt)), ["a"])
                        self.assertEqual(sorted(os.listdir(os.path.join(mnt, "a"))),
                                         sorted(os.listdir(src_a)))
                    else:
                        self.assertEqual(len(tl.samples_of(files)), n // 2, opts)
                        ranks.append(files)
        self.assertFalse(ranks[0] & ranks[1])
        trimmed = every - ranks[0] - ranks[1]
        self.assertEqual(len(tl.samples_of(trimmed)), n % 2)
        # An index of one rank's share carries its compressed shards' seek
        # points (without them every read of the export would fail).
        for rank in (0, 1):
            with self.subTest(export_rank=rank):
                out = os.path.join(d, "rank%d" % rank)
                tl.run_shardfs("view", "export", idx, "default", "--format", "index", "--out",
                               out, "--rank", str(rank), "--world", "2", check=0)
                mnt = self.scratch("export-mnt")
                with tl.Mount(out, mnt):
                    self.assertEqual(self.check_tree(mnt), ranks[rank])

    def test_remote_shard_over_http(self):
        # The chunk fetcher reads the compressed bytes; decoding sits above it.
        d = self.scratch("remote")
        served = os.path.join(d, "served")
        os.mkdir(served)
        shard = self.compress(served, "gz", "pigz -p 2 -c {tar} > {out}")
        want = self.extract(d, shard, "-z")
        with rs.Nginx(served) as web:
            idx = os.path.join(d, "idx")
            tl.build_index([web.url + "/" + os.path.basename(shard)], idx, "--seek-spacing",
                           "128K")
            mnt = os.path.join(d, "mnt")
            os.mkdir(mnt)
            with tl.Mount(idx, mnt, options="verify=first"):
                got = tl.walk_reference(mnt)
        del got[b""]
        ts.TarSemanticsTest.compare(self, want, got)


if __name__ == "__main__":
    tl.main()
