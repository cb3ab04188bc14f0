"""index build --memory: a build forced to spill (a tiny --memory) makes the
same index as the in-memory build, entry for entry (inode numbers, link
counts, modes, owners, mtimes, sizes, targets, where each file's bytes are)
and in its counts, on shards full of what tar replays in order; it leaves no
spill files behind, on success or when a corrupt shard fails the build."""
import io
import os
import random
import sys
import tarfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import shardfs_testlib as tl  # noqa: E402

def write_shard(path, rnd, files, n, flat):
    """A GNU tar: `flat` plain files under dirs of their own (many paths),
    then n random members over a few paths (replacements, links...)."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(flat):
            ti = tarfile.TarInfo("data/%s/%03d/f%04d" % (os.path.basename(path), i // 40, i))
            data = b"x" * rnd.randint(0, 40)
            ti.size = len(data)
            ti.mtime = rnd.randint(1, 2_000_000_000)
            tar.addfile(ti, io.BytesIO(data))
        tl.add_random_members(tar, rnd, n, files, cuts=(0.5, 0.7, 0.8), dangling_links=True)


def info(idx):
    objs = tl.json_lines(tl.run_shardfs("index", "info", "--json", idx, check=0).stdout)
    for o in objs:
        for k in ("index", "index_bytes", "path", "build_options"):
            o.pop(k, None)
    return objs


class BuildMemoryTest(tl.ScratchTestCase):
    PREFIX = "shardfs-build-memory-"

    def shards(self, seed, count=8, flat=400, n=120):
        d = self.scratch("shards")
        rnd = random.Random(seed)
        files = []
        paths = []
        for i in range(count):
            p = os.path.join(d, "s%02d.tar" % i)
            write_shard(p, rnd, files, n, flat)
            paths.append(p)
        return paths

    def build(self, shards, out, *extra):
        p = tl.run_shardfs("index", "build", "--out", out, *extra, *shards)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def test_spilled_build_equals_in_memory_build(self):
        for seed in (1, 2, 3):
            with self.subTest(seed=seed):
                shards = self.shards(seed)
                out = self.scratch("out")
                p = self.build(shards, os.path.join(out, "mem"))
                self.assertNotIn(b"chunks", p.stderr)
                p = self.build(shards, os.path.join(out, "spill"), "--memory", "64K")
                self.assertRegex(p.stderr, rb"spilled to disk, joined in \d\d+ chunks")
                self.build(shards, os.path.join(out, "spill2"), "--memory", "256K", "--jobs", "2")
                want = tl.ls_json(os.path.join(out, "mem"))
                self.assertGreater(len(want), 3000)
                for other in ("spill", "spill2"):
                    got = tl.ls_json(os.path.join(out, other))
                    self.assertEqual(len(want), len(got))
                    for w, g in zip(want, got):
                        self.assertEqual(w, g)
                    self.assertEqual(info(os.path.join(out, "mem")),
                                     info(os.path.join(out, other)))
                # Nothing but the three indexes: no spill files left.
                self.assertEqual(sorted(os.listdir(out)), ["mem", "spill", "spill2"])

    def test_the_report_is_the_same(self):
        shards = self.shards(7, count=3, flat=100)
        out = self.scratch("out")
        a = self.build(shards, os.path.join(out, "mem"))
        b = self.build(shards, os.path.join(out, "spill"), "--memory", "64K")

        def warnings(p):
            return [line for line in p.stderr.splitlines()
                    if b"indexed" not in line and b"entries/s" not in line
                    and b"chunks" not in line]
        self.assertEqual(warnings(a), warnings(b))
        self.assertTrue(any(b"could not be placed" in line for line in warnings(a)))

    def test_a_shard_the_walker_hands_to_libarchive_late(self):
        # A base-256 uid at the end: the header walker declines the shard
        # after reporting (and the build spilling) its other members, and
        # the scan starts over through libarchive; what was spilled first
        # must not count twice.
        d = self.scratch("late")
        shard = os.path.join(d, "late.tar")
        with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT) as tar:
            for i in range(1500):
                ti = tarfile.TarInfo("dir%d/f%04d" % (i % 7, i))
                ti.size = i % 5
                tar.addfile(ti, io.BytesIO(b"y" * ti.size))
            ti = tarfile.TarInfo("dir0/big-uid")
            ti.uid = 2 ** 30
            tar.addfile(ti)
        out = self.scratch("out")
        self.build([shard], os.path.join(out, "mem"))
        p = self.build([shard], os.path.join(out, "spill"), "--memory", "64K")
        self.assertIn(b"spilled to disk", p.stderr)
        want = tl.ls_json(os.path.join(out, "mem"))
        self.assertEqual(len(want), 1508)
        self.assertEqual(tl.ls_json(os.path.join(out, "spill")), want)
        self.assertEqual(sorted(os.listdir(out)), ["mem", "spill"])

    def test_nested_tars_spill_the_same(self):
        # index build --recursive (src/archive/nested_scan.h): the members of tars
        # inside the shards spill like any others, with the extension
        # stripped or not; the second shard is handed to libarchive late,
        # after its nested tars were expanded, and nothing counts twice.
        d = self.scratch("nested")
        rnd = random.Random(11)
        inner = self.shards(11, count=4, flat=150, n=80)
        outers = []
        for k in range(2):
            p = os.path.join(d, "outer%d.tar" % k)
            with tarfile.open(p, "w", format=tarfile.GNU_FORMAT) as tar:
                for j, ip in enumerate(inner):
                    tar.add(ip, arcname="%s.tar" % tl.random_replay_path(rnd) if j % 2 else "a.tar")
                    ti = tarfile.TarInfo(tl.random_replay_path(rnd))
                    ti.size = 3
                    tar.addfile(ti, io.BytesIO(b"abc"))
                if k == 1:
                    ti = tarfile.TarInfo("big-uid")
                    ti.uid = 2 ** 30
                    tar.addfile(ti)
            outers.append(p)
        for strip in ([], ["--strip-recursive-tar-extension"]):
            with self.subTest(strip=strip):
                out = self.scratch("out")
                a = self.build(outers, os.path.join(out, "mem"), "--recursive", *strip)
                b = self.build(outers, os.path.join(out, "spill"), "--recursive", *strip,
                               "--memory", "64K")
                self.assertRegex(b.stderr, rb"spilled to disk, joined in \d\d+ chunks")
                want = tl.ls_json(os.path.join(out, "mem"))
                self.assertGreater(len(want), 1000)
                self.assertEqual(tl.ls_json(os.path.join(out, "spill")), want)
                self.assertEqual(info(os.path.join(out, "mem")), info(os.path.join(out, "spill")))
                self.assertRegex(a.stderr, rb"8 nested archive\(s\) shown as directories, holding "
                                           rb"\d+ member")
                self.assertEqual([x for x in a.stderr.splitlines() if b"nested" in x],
                                 [x for x in b.stderr.splitlines() if b"nested" in x])
                self.assertEqual(sorted(os.listdir(out)), ["mem", "spill"])

    def test_a_corrupt_shard_leaves_nothing(self):
        shards = self.shards(5, count=4)
        bad = os.path.join(os.path.dirname(shards[0]), "zz-bad.tar")
        with open(shards[0], "rb") as f:
            data = bytearray(f.read())
        data[512 * 40:512 * 41] = b"\xff" * 512  # A header that is not one.
        with open(bad, "wb") as f:
            f.write(data)
        out = self.scratch("out")
        p = tl.run_shardfs("index", "build", "--out", os.path.join(out, "idx"), "--memory", "64K",
                           "--jobs", "1", *shards, bad)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(b"zz-bad.tar", p.stderr)
        self.assertEqual(os.listdir(out), [])

    def test_memory_needs_a_size(self):
        shards = self.shards(9, count=1, flat=10, n=10)
        out = self.scratch("out")
        for bad in ("0", "lots", "-5"):
            p = tl.run_shardfs("index", "build", "--out", os.path.join(out, "idx"),
                               "--memory", bad, *shards)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(b"--memory", p.stderr)
        self.assertEqual(os.listdir(out), [])


if __name__ == "__main__":
    tl.main()
