#!/usr/bin/env python3
"""Sparse tar members through a real FUSE mount, compared byte for byte with
what GNU tar extracts from the same shards.

Every dialect GNU tar writes: old GNU ('S' headers, --format=gnu) and pax
GNU sparse 0.0, 0.1 and 1.0. Files with holes at the start, the middle and
the end, all holes, and a plain file beside them; read whole, in odd chunks
and at random offsets across holes and extents, with splice and without,
and with verify=always (the checksum covers the extents' bytes). `shardfs
verify` of the index against GNU tar's extraction, quick and --full. Then a
member of more than 8 GiB with a few KiB of data at 0, 4 GiB and 8.5 GiB (the
shard stays small): st_size, st_blocks and random reads against a model."""

import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

DIALECTS = {
    "oldgnu": ["--format=gnu"],
    "pax00": ["--format=posix", "--sparse-version=0.0"],
    "pax01": ["--format=posix", "--sparse-version=0.1"],
    "pax10": ["--format=posix", "--sparse-version=1.0"],
}
MOUNT_OPTIONS = [None, "kernel_open=0,splice=0,clone_fd=0", "verify=always"]
GIB = 1 << 30


def write_sparse(path, size, regions):
    """A file of `size` bytes with data `regions` [(offset, bytes)], holes
    elsewhere (truncate + writes)."""
    with open(path, "wb") as f:
        f.truncate(size)
        for off, data in regions:
            f.seek(off)
            f.write(data)


def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if p.returncode != 0:
        raise AssertionError("%r exited %d: %s" % (argv, p.returncode,
                                                   p.stderr.decode(errors="replace")[-3000:]))
    return p.stdout


class SparseDialectsTest(tl.ScratchTestCase):
    PREFIX = "shardfs-sparse-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        rnd = random.Random(11)
        rb = lambda n: bytes(rnd.getrandbits(8) for _ in range(n))  # noqa: E731
        src = os.path.join(cls.tmp, "src")
        os.mkdir(src)
        write_sparse(os.path.join(src, "middle.bin"), (1 << 20) + 123,
                     [(0, rb(5000)), (300000, rb(20000)), (700000, rb(4096))])
        write_sparse(os.path.join(src, "tail.bin"), 200000, [(150000, rb(50000))])
        write_sparse(os.path.join(src, "holes.bin"), 70000, [])
        write_sparse(os.path.join(src, "many.bin"), 4 << 20,
                     [(i * 65536 + 7, rb(1000)) for i in range(0, 64, 3)])
        with open(os.path.join(src, "plain.txt"), "wb") as f:
            f.write(rb(3000))
        names = sorted(os.listdir(src))
        cls.shards = []
        cls.ref = os.path.join(cls.tmp, "ref")
        os.mkdir(cls.ref)
        for dialect, fmt in DIALECTS.items():
            shard = os.path.join(cls.tmp, dialect + ".tar")
            run(["tar", "-cf", shard, "--sparse", *fmt, "--transform", "s,^," + dialect + "/,",
                 "-C", src, *names])
            # Precondition: tar stored the holes as holes.
            assert os.path.getsize(shard) < (6 << 20), shard
            run(["tar", "-xf", shard, "-C", cls.ref])
            cls.shards.append(shard)
        cls.idx = os.path.join(cls.tmp, "index")
        tl.build_index(cls.shards, cls.idx)
        cls.entries = {k.decode(): e for k, e in tl.index_entries(cls.idx).items()}
        cls.files = [os.path.join(d, n) for d in DIALECTS for n in names]

    def test_index_says_sparse(self):
        for path in self.files:
            e = self.entries[path]
            sparse = not path.endswith("plain.txt")
            self.assertEqual(e.get("sparse", False), sparse, path)
            if sparse:
                self.assertEqual(len(e["extents"]), e["extent_count"], path)
                self.assertEqual(sum(x[1] for x in e["extents"]), e["data_bytes"], path)
                self.assertLess(e["data_bytes"], e["size"], path)
        info, _ = tl.index_info(self.idx)
        self.assertEqual(info["schema_version"], 2)

    def verify_lines(self, src, *flags):
        """`shardfs verify INDEX SRC` lines that are not about mtimes (GNU
        tar gives the directories it makes the time of extraction)."""
        p = tl.run_shardfs("verify", *flags, self.idx, src)
        out = p.stdout.decode(errors="replace").splitlines()
        self.assertIn(p.returncode, (0, 1), p.stderr)
        return [line for line in out if not line.startswith("mtime differs")]

    def test_verify_compares_sparse_files_by_content(self):
        # GNU tar's extraction leaves holes where the shards have them.
        for flags in ((), ("--full",)):
            self.assertEqual(self.verify_lines(self.ref, *flags), [], flags)
        # A byte in a hole, and a byte in an extent, are found in both modes.
        src = os.path.join(self.tmp, "changed")
        shutil.copytree(self.ref, src)
        with open(os.path.join(src, "pax10", "middle.bin"), "r+b") as f:
            f.seek(100000)  # A hole of the shard.
            f.write(b"x")
        with open(os.path.join(src, "oldgnu", "tail.bin"), "r+b") as f:
            f.seek(150010)  # Inside its only extent.
            data = f.read(1)
            f.seek(150010)
            f.write(bytes([data[0] ^ 1]))
        try:
            quick = self.verify_lines(src)
            full = self.verify_lines(src, "--full")
        finally:
            shutil.rmtree(src, ignore_errors=True)
        self.assertIn("content differs: pax10/middle.bin: at byte 100000", quick)
        self.assertIn("content differs: pax10/middle.bin: at byte 100000", full)
        self.assertIn("content differs: oldgnu/tail.bin: at byte 150010", full)
        tail = [line for line in quick if "oldgnu/tail.bin" in line]
        self.assertEqual(len(tail), 1, quick)
        self.assertTrue(tail[0].startswith("content differs: oldgnu/tail.bin: xxh3 "), tail)
        self.assertEqual(len(quick), 2, quick)
        self.assertEqual(len(full), 2, full)

    def test_mount_matches_gnu_tar(self):
        mnt = os.path.join(self.tmp, "mnt")
        os.makedirs(mnt, exist_ok=True)
        for options in MOUNT_OPTIONS:
            with tl.Mount(self.idx, mnt, options=options):
                self.check_reads(mnt, "-o %s" % options)

    def test_kernel_mount_matches_gnu_tar(self):
        mnt = os.path.join(self.tmp, "kmnt")
        os.makedirs(mnt, exist_ok=True)
        with tl.KernelMount(self.idx, mnt, cache_dir=os.path.join(self.tmp, "images")) as m:
            self.assertEqual(m.fstype, "erofs", m.stderr)
            self.check_reads(mnt, "--kernel")

    def check_reads(self, mnt, how):
        """Every file read whole, at random offsets and in odd chunks, equals
        GNU tar's extraction; st_blocks counts the stored bytes."""
        rnd = random.Random(5)
        for path in self.files:
            label = "%s (%s)" % (path, how)
            with open(os.path.join(self.ref, path), "rb") as f:
                want = f.read()
            got_path = os.path.join(mnt, path)
            st = os.stat(got_path)
            self.assertEqual(st.st_size, len(want), label)
            e = self.entries[path]
            data = e.get("data_bytes", e["size"])
            # The kernel's EROFS counts a file's blocks from its size, holes
            # included (man page, "--kernel").
            blocks = len(want) if how == "--kernel" else data
            self.assertEqual(st.st_blocks, (blocks + 511) // 512, label)
            with open(got_path, "rb") as f:
                self.assertEqual(f.read(), want, label)
            fd = os.open(got_path, os.O_RDONLY)
            try:
                for _ in range(60):
                    off = rnd.randrange(0, len(want) + 10)
                    n = rnd.choice([1, 511, 4096, 65536, 200000, rnd.randrange(1, 300000)])
                    self.assertEqual(os.pread(fd, n, off), want[off:off + n],
                                     "%s at %d+%d" % (label, off, n))
                # Odd chunks from the start, across every boundary.
                chunks, pos = [], 0
                while True:
                    b = os.pread(fd, 12345, pos)
                    if not b:
                        break
                    chunks.append(b)
                    pos += len(b)
                self.assertEqual(b"".join(chunks), want, label)
            finally:
                os.close(fd)


class HugeSparseTest(unittest.TestCase):
    """A sparse member over 8 GiB: the shard and the index stay small."""

    def test_huge_sparse_member(self):
        tmp = tempfile.mkdtemp(prefix="shardfs-sparse-huge-")
        try:
            rnd = random.Random(3)
            regions = [(0, os.urandom(4096)), (4 * GIB, os.urandom(4096)),
                       (8 * GIB + GIB // 2, os.urandom(4096))]
            size = 8 * GIB + GIB // 2 + 4096
            src = os.path.join(tmp, "src")
            os.mkdir(src)
            write_sparse(os.path.join(src, "huge.bin"), size, regions)
            shard = os.path.join(tmp, "huge.tar")
            run(["tar", "-cf", shard, "--sparse", "--format=posix", "-C", src, "huge.bin"])
            self.assertLess(os.path.getsize(shard), 1 << 20)
            idx = os.path.join(tmp, "index")
            tl.build_index([shard], idx)
            (e,) = [x for x in tl.index_entries(idx).values() if x["type"] == "file"]
            self.assertTrue(e["sparse"])
            self.assertEqual(e["size"], size)
            self.assertEqual(e["data_bytes"], 3 * 4096)

            def want(off, n):
                n = max(0, min(n, size - off))
                out = bytearray(n)
                for r_off, r_data in regions:
                    lo, hi = max(off, r_off), min(off + n, r_off + len(r_data))
                    if lo < hi:
                        out[lo - off:hi - off] = r_data[lo - r_off:hi - r_off]
                return bytes(out)

            mnt = os.path.join(tmp, "mnt")
            os.mkdir(mnt)
            for options in (None, "kernel_open=0,splice=0,clone_fd=0", "verify=first"):
                with tl.Mount(idx, mnt, options=options):
                    p = os.path.join(mnt, "huge.bin")
                    st = os.stat(p)
                    self.assertEqual(st.st_size, size)
                    self.assertEqual(st.st_blocks, 3 * 4096 // 512)
                    fd = os.open(p, os.O_RDONLY)
                    try:
                        offsets = [0, 4095, 4096, 4 * GIB - 100, 4 * GIB + 4000,
                                   8 * GIB + GIB // 2 - 1, size - 10, size, size + 5]
                        offsets += [rnd.randrange(0, size) for _ in range(100)]
                        offsets += [r + rnd.randrange(-5000, 5000) for r, _ in regions
                                    for _ in range(10)]
                        for off in offsets:
                            off = max(0, off)
                            n = rnd.choice([1, 4096, 10000, 131072])
                            self.assertEqual(os.pread(fd, n, off), want(off, n),
                                             "at %d+%d (-o %s)" % (off, n, options))
                    finally:
                        os.close(fd)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    tl.main()
