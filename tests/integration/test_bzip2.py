#!/usr/bin/env python3
"""bzip2-compressed tar shards (.tar.bz2): `index build` decodes the stream
block by block and records a seek point per block, at the bit where it
starts; the mount decodes one block per read. Trees from bzip2 (levels 9
and 1), pbzip2 (a stream per block), lbzip2 and concatenated files equal
GNU tar's own extraction (`tar -xjf`); random reads across block boundaries
under 16 concurrent readers are checked byte for byte; a corrupt or
truncated block gives EIO and a log line naming the shard and the offset,
never wrong bytes; damaged files are refused at build time; a remote shard
over HTTP reads through the chunk cache; the schema version is 5 with a
bzip2 shard (`index add` included). The tree holds a
member whose blocks carry a false block magic (its bytes spell the magic in
the block's symbol map): the build must skip it."""

import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers as rs  # noqa: E402
import shardfs_testlib as tl  # noqa: E402
import test_compressed_tar as ct  # noqa: E402
import test_tar_semantics as ts  # noqa: E402


def false_magic_bytes(n, seed):
    """n bytes, no byte twice in a row, from the alphabet whose bzip2 symbol
    map is the block magic 0x314159265359 (ranges 0x3141, then the maps
    0x5926 and 0x5359 of ranges 2 and 3): a block of only these bytes holds
    a false magic 105 bits after its own."""
    alphabet = [0x20 + i for i in range(16) if 0x5926 & (0x8000 >> i)]
    alphabet += [0x30 + i for i in range(16) if 0x5359 & (0x8000 >> i)]
    alphabet += [0x70, 0x90, 0xf0]
    rnd = random.Random(seed)
    out = bytearray()
    prev = -1
    while len(out) < n:
        c = rnd.choice(alphabet)
        if c != prev:
            out.append(c)
            prev = c
    return bytes(out)


# (name, compress command with {tar} and {out})
CODECS = [
    ("bzip2", "bzip2 -c {tar} > {out}"),
    ("bzip2-1", "bzip2 -1 -c {tar} > {out}"),
    ("pbzip2", "pbzip2 -p2 -c {tar} > {out}"),
    ("lbzip2", "lbzip2 -n 2 -c {tar} > {out}"),
    ("concat", "head -c 1000000 {tar} | bzip2 -3 -c > {out}; "
               "tail -c +1000001 {tar} | bzip2 -c >> {out}"),
]


class Bzip2TarTest(tl.ScratchTestCase):
    PREFIX = "shardfs-bz2-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        ct.make_tree(cls.src, 7)
        fm = os.path.join(cls.src, "c", "false-magic.bin")
        tl.write_file(fm, false_magic_bytes(600000, 3))
        os.utime(fm, (1600000000, 1600000000))
        cls.tar = os.path.join(cls.tmp, "plain.tar")
        subprocess.run(["tar", "--format=gnu", "-cf", cls.tar, "-C", cls.src, "."], check=True)
        cls.files = tl.regular_files(cls.src)
        # Level 1 (blocks of 100 kB, so most reads cross a block boundary),
        # compressed once: most tests take a copy of it.
        cls.level1 = os.path.join(cls.tmp, "level1.tar.bz2")
        with open(cls.level1, "wb") as out:
            subprocess.run(["bzip2", "-1", "-c", cls.tar], check=True, stdout=out)

    def compress(self, d, cmd, name="shard.tar.bz2"):
        out = os.path.join(d, name)
        subprocess.run(cmd.format(tar=self.tar, out=out), shell=True, check=True)
        return out

    def level1_copy(self, d, name="shard.tar.bz2"):
        """A copy of the class's level-1 .tar.bz2 in d, free to damage."""
        out = os.path.join(d, name)
        shutil.copyfile(self.level1, out)
        return out

    def extract(self, d, shard):
        x = os.path.join(d, "x")
        os.mkdir(x)
        subprocess.run(["tar", "-xjf", shard, "-C", x], check=True)
        want = tl.walk_reference(x)
        del want[b""]
        return want

    def test_writers_match_gnu_tar(self):
        for name, cmd in CODECS:
            with self.subTest(writer=name):
                d = self.scratch(name)
                # `bzip2 -1` made the class's level-1 shard already: a copy.
                shard = self.level1_copy(d) if name == "bzip2-1" else self.compress(d, cmd)
                want = self.extract(d, shard)
                idx = os.path.join(d, "idx")
                build = tl.build_index([shard], idx)
                self.assertNotIn("sequentially", build.stderr.decode())
                info = tl.run_shardfs("ls", "--json", idx, check=0)
                self.assertIn(b'"bzip2"', info.stdout)
                mnt = os.path.join(d, "mnt")
                os.mkdir(mnt)
                with tl.Mount(idx, mnt, options="verify=first"):
                    got = tl.walk_reference(mnt)
                del got[b""]
                ts.TarSemanticsTest.compare(self, want, got)

    def test_random_reads_16_readers(self):
        d = self.scratch("random")
        shard = self.level1_copy(d)
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx)
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        for opts in (None, "decode_cache=0"):
            with self.subTest(options=opts):
                with tl.Mount(idx, mnt, options=opts):
                    problems = tl.random_range_reads(mnt, self.files, 400000)
                self.assertEqual(problems, [])

    def damaged_mount(self, name, damage):
        """Indexes a good .tar.bz2 (level 1), damages it, reads every file:
        each read gives the right bytes or EIO, never others; returns (EIO
        count, daemon log)."""
        d = self.scratch(name)
        shard = self.level1_copy(d)
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx)
        damage(shard)
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt, options="decode_cache=0") as m:
            eio = tl.read_all_right_or_eio(self, mnt, self.files)
            log = m.stderr()
        return eio, log

    def test_corrupt_block_gives_eio(self):
        def flip(path):
            size = os.path.getsize(path)
            with open(path, "r+b") as fh:
                fh.seek(size // 2)
                b = fh.read(1)
                fh.seek(size // 2)
                fh.write(bytes([b[0] ^ 0x10]))
        eio, log = self.damaged_mount("corrupt", flip)
        self.assertGreater(eio, 0)
        self.assertRegex(log, r"shard \S*shard\.tar\.bz2: compressed data at byte \d+")

    def test_truncated_gives_eio(self):
        def cut(path):
            os.truncate(path, os.path.getsize(path) * 2 // 3)
        eio, log = self.damaged_mount("truncated", cut)
        self.assertGreater(eio, 0)
        self.assertRegex(log, r"shard \S*shard\.tar\.bz2: size is \d+ bytes")

    def test_zeroed_blocks_give_eio(self):
        # The size unchanged, the blocks' bits gone from a third on.
        def zero(path):
            size = os.path.getsize(path)
            with open(path, "r+b") as fh:
                fh.seek(size // 3)
                fh.write(bytes(size // 3))
        eio, log = self.damaged_mount("zeroed", zero)
        self.assertGreater(eio, 0)
        self.assertRegex(log, r"shard \S*shard\.tar\.bz2: compressed data at byte \d+")

    def test_remote_shard_over_http(self):
        # The chunk fetcher reads the compressed bytes; blocks decode above it.
        d = self.scratch("remote")
        served = os.path.join(d, "served")
        os.mkdir(served)
        shard = self.compress(served, "pbzip2 -p2 -1 -c {tar} > {out}")
        want = self.extract(d, shard)
        with rs.Nginx(served) as web:
            idx = os.path.join(d, "idx")
            tl.build_index([web.url + "/" + os.path.basename(shard)], idx)
            mnt = os.path.join(d, "mnt")
            os.mkdir(mnt)
            with tl.Mount(idx, mnt, options="verify=first"):
                got = tl.walk_reference(mnt)
        del got[b""]
        ts.TarSemanticsTest.compare(self, want, got)

    def test_schema_version_and_index_add(self):
        # 5 with a bzip2 shard, 4 without; `index add` never lowers it.
        d = self.scratch("schema")
        bz = self.level1_copy(d)
        gz = os.path.join(d, "other.tar.gz")
        extra = os.path.join(d, "extra")
        os.mkdir(extra)
        tl.write_file(os.path.join(extra, "new.txt"), b"new file\n" * 1000)
        subprocess.run("tar -C %s -cf - . | gzip -c > %s" % (extra, gz), shell=True, check=True)
        for first, then in ((gz, bz), (bz, gz)):
            with self.subTest(first=os.path.basename(first)):
                idx = self.scratch("idx") + "/idx"
                tl.build_index([first], idx)
                self.assertEqual(tl.index_info(idx)[0]["schema_version"],
                                 5 if first == bz else 4)
                tl.run_shardfs("index", "add", idx, then, check=0)
                self.assertEqual(tl.index_info(idx)[0]["schema_version"], 5)
                mnt = self.scratch("mnt")
                with tl.Mount(idx, mnt):
                    self.assertEqual(tl.read_file(os.path.join(mnt, "new.txt")),
                                     b"new file\n" * 1000)
                    self.assertEqual(tl.read_file(os.path.join(mnt, "big.bin")),
                                     self.files["big.bin"])

    def test_build_refuses_damage(self):
        d = self.scratch("refuse")
        good = self.level1_copy(d, "good.tar.bz2")
        data = tl.read_file(good)
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x10
        crc = bytearray(data)
        crc[-2] ^= 0x01  # In the stream's combined CRC.
        cases = [("garbage", data + b"trailing garbage", r"not a bzip2 stream header"),
                 ("truncated", data[:len(data) * 2 // 3], r"truncated|does not|end"),
                 ("flipped", bytes(flipped), r"bzip2 block at bit \d+"),
                 ("crc", bytes(crc), r"combined CRC")]
        for name, content, why in cases:
            with self.subTest(damage=name):
                shard = os.path.join(d, name + ".tar.bz2")
                tl.write_file(shard, content)
                idx = os.path.join(d, "idx-" + name)
                r = tl.build_index([shard], idx, check=None)
                err = r.stderr.decode()
                self.assertNotEqual(r.returncode, 0, err)
                self.assertRegex(err, name + r"\.tar\.bz2: at compressed byte \d+: ")
                self.assertRegex(err, why)
                self.assertFalse(os.path.exists(idx))


if __name__ == "__main__":
    tl.main()
