#!/usr/bin/env python3
"""Three ranks of one ImageFolder tree (4 classes of 26 images in 5 shards,
every shard holding images of every class): each rank's FUSE mount
(`-o rank=K,world=3`) shows n // 3 images, counted by torchvision's
ImageFolder over the mount (a legacy client that knows nothing of shardfs)
and by a walk, so a DDP job's ranks take as many steps; each image reads as
the source's; no image is on two ranks and their union is the tree but for
the n % 3 trimmed; `shardfs.Index(idx, rank=K, world=3)` lists what the
mount shows, and so does a mount of `view export --rank K --world 3`; more
ranks than images is refused. A manifest of the same shards in two
partitions splits the same way (worlds 2, 3, 4 and 8: fewer shards than
ranks too), each rank's run of the rule index/rank_partition.h states; its
rank mounts list what `shardfs.Index` lists; the package's datasets over it
pad or, with drop_last, trim to equal counts. Runs under the interpreter the
package was built for, with Debian's torchvision: fails, never skips,
without them."""

import errno
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

CLASSES, PER_CLASS, SHARDS, WORLD = 4, 26, 5, 3


class RankSplitTest(tl.ScratchTestCase):
    PREFIX = "shardfs-rank-split-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        rnd = random.Random(17)
        cls.src = os.path.join(cls.tmp, "src")
        members = [[] for _ in range(SHARDS)]
        for c in range(CLASSES):
            os.makedirs(os.path.join(cls.src, "c%d" % c))
            for i in range(PER_CLASS):
                rel = os.path.join("c%d" % c, "img%04d.JPEG" % i)
                tl._write(os.path.join(cls.src, rel), rnd.randbytes(rnd.randrange(50, 6000)))
                members[(i + c) % SHARDS].append(rel)
        cls.shards = [tl.tar_create(os.path.join(cls.tmp, "part-%d.tar" % s), cls.src, m)
                      for s, m in enumerate(members)]
        cls.idx = os.path.join(cls.tmp, "idx")
        tl.build_index(cls.shards, cls.idx)
        cls.files = {os.fsencode(p) for m in members for p in m}
        parts = [os.path.join(cls.tmp, "part-a"), os.path.join(cls.tmp, "part-b")]
        tl.build_index(cls.shards[:2], parts[0])
        tl.build_index(cls.shards[2:], parts[1])
        cls.manifest = os.path.join(cls.tmp, "data.manifest")
        tl.run_shardfs("index", "manifest", "--out", cls.manifest, *parts, check=0)

    def mount_rank(self, idx, opts):
        """(relative paths torchvision's ImageFolder finds, files a walk finds)
        under a mount of `idx` with -o `opts`; every file read and compared
        with the source."""
        import torchvision
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt, options=opts):
            folder = torchvision.datasets.ImageFolder(mnt)
            self.assertEqual(folder.classes, ["c%d" % c for c in range(CLASSES)], opts)
            seen = {os.fsencode(os.path.relpath(p, mnt)) for p, _ in folder.samples}
            walked = set()
            for d, _, names in os.walk(mnt):
                for name in names:
                    rel = os.path.relpath(os.path.join(d, name), mnt)
                    self.assertEqual(tl.read_file(os.path.join(mnt, rel)),
                                     tl.read_file(os.path.join(self.src, rel)), rel)
                    walked.add(os.fsencode(rel))
        return seen, walked

    def test_three_ranks_have_equal_counts(self):
        import shardfs
        n = len(self.files)
        owner = {}
        for k in range(WORLD):
            seen, walked = self.mount_rank(self.idx, "rank=%d,world=%d,seed=2" % (k, WORLD))
            self.assertEqual(len(seen), n // WORLD, "rank %d: ImageFolder's count" % k)
            self.assertEqual(seen, walked, "rank %d" % k)
            for p in seen:
                self.assertNotIn(p, owner, "%r on ranks %s and %d" % (p, owner.get(p), k))
                owner[p] = k
            # The Python package's reader gives the same split.
            with shardfs.Index(self.idx, rank=k, world=WORLD, seed=2) as index:
                listed = {os.fsencode(os.path.join(d, f)) for d, _, fs in index.walk()
                          for f in fs}
            self.assertEqual(listed, seen, "rank %d: Index(rank=) vs the mount" % k)
            # So does an export of the rank's share.
            out = os.path.join(self.tmp, "rank%d.idx" % k)
            tl.run_shardfs("view", "export", self.idx, "default", "--format", "index", "--out",
                           out, "--rank", k, "--world", WORLD, "--seed", 2, check=0)
            self.assertEqual(self.mount_rank(out, None), (seen, walked), "rank %d export" % k)
        self.assertTrue(set(owner) <= self.files)
        self.assertEqual(len(self.files - set(owner)), n % WORLD, "trimmed")
        # Another seed: other images on each rank, as many.
        other, _ = self.mount_rank(self.idx, "rank=0,world=%d,seed=3" % WORLD)
        self.assertEqual(len(other), n // WORLD)
        self.assertNotEqual(other, {p for p, k in owner.items() if k == 0})

    def test_a_manifest_splits_by_samples(self):
        import shardfs
        import shardfs.torch
        n = len(self.files)
        for world in (2, 3, 4, 8):
            rule, per_rank, total = tl.rank_split(self.manifest, SHARDS, world, seed=4)
            self.assertEqual((per_rank, total), (n // world, n))
            owner = {}
            for k in range(world):
                with shardfs.Index(self.manifest, rank=k, world=world, seed=4) as index:
                    listed = {os.fsencode(p) for p in index.files()}
                self.assertEqual(len(listed), n // world, "world %d rank %d" % (world, k))
                self.assertEqual(listed, {p for p, r in rule.items() if r == k},
                                 "world %d rank %d vs the rule" % (world, k))
                owner.update((p, k) for p in listed)
                if world == 8:  # The mount agrees, with fewer shards than ranks.
                    mnt = self.scratch("mnt")
                    opts = "rank=%d,world=%d,seed=4" % (k, world)
                    with tl.Mount(self.manifest, mnt, options=opts):
                        walked = {os.fsencode(os.path.relpath(os.path.join(d, f), mnt))
                                  for d, _, fs in os.walk(mnt) for f in fs}
                    self.assertEqual(walked, listed, "world 8 rank %d: mount vs Index" % k)
            self.assertEqual(len(owner), n - n % world, "world %d: a file on two ranks" % world)
            # The package's datasets: ceil(n / world) each, padded with the
            # rank's own samples, every sample on some rank; n // world each
            # with drop_last.
            for drop_last in (False, True):
                seen = set()
                for k in range(world):
                    ds = shardfs.torch.ImageFolder(self.manifest, rank=k, world=world, seed=4,
                                                   drop_last=drop_last)
                    want = n // world if drop_last else -(-n // world)
                    self.assertEqual(len(ds), want, "world %d rank %d" % (world, k))
                    seen |= {p for p, _ in ds.samples}
                self.assertEqual(len(seen), n - n % world if drop_last else n)

    def test_more_ranks_than_images_refused(self):
        n = len(self.files)
        mnt = self.scratch("mnt")
        p = tl.run_shardfs("mount", "-o", "rank=0,world=%d" % (n + 1), self.idx, mnt, timeout=30)
        try:
            self.assertNotEqual(p.returncode, 0)
            self.assertFalse(os.path.ismount(mnt))
            self.assertIn("%d samples cannot give each of %d ranks one; use world <= %d"
                          % (n, n + 1, n), p.stderr.decode())
        finally:
            tl.unmount(mnt)
        import shardfs
        with self.assertRaisesRegex(OSError, "%d samples cannot give each" % n) as cm:
            shardfs.Index(self.idx, rank=0, world=n + 1)
        self.assertEqual(cm.exception.errno, errno.EINVAL)


if __name__ == "__main__":
    tl.main()
