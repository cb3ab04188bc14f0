#!/usr/bin/env python3
"""Per-rank partitions (`-o rank=K,world=N[,seed=S][,rank_dirs=prune|keep]`):
every rank of one world shows the same number of samples (the files of one
directory sharing a name up to the first '.'), n // N, each whole, with the
source's bytes; the ranks are pairwise disjoint and their union is the view
but for the n % N trimmed samples; which rank gets which sample follows the
rule index/rank_partition.h states (worked out here from `ls -R --json`);
symlinks go to splitmix64(seed ^ inode) % N; directories appear where
something below them does (every view directory with rank_dirs=keep);
another seed gives another partition; fewer samples than ranks is refused."""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

SHARDS = 16
CLASSES = 5
MASK64 = (1 << 64) - 1


def splitmix64(x, with_increment=True):
    z = ((x + 0x9E3779B97F4A7C15) if with_increment else x) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def make_sharded(root, seed=11):
    """root/src: train/cNN/sNNN.{jpg,cls} in 16 shards of uneven sizes, each
    shard holding samples of every class (so directories span shards), plus
    symlinks and an empty directory. Returns (src, shards)."""
    rnd = random.Random(seed)
    src = os.path.join(root, "src")
    members = [[] for _ in range(SHARDS)]
    sample = 0
    for s in range(SHARDS):
        for _ in range(2 + s % 5):  # Uneven: 2 to 6 samples per class.
            for c in range(CLASSES):
                d = os.path.join("train", "c%02d" % c)
                os.makedirs(os.path.join(src, d), exist_ok=True)
                stem = os.path.join(d, "s%04d" % sample)
                tl._write(os.path.join(src, stem + ".jpg"), rnd.randbytes(rnd.randrange(100, 9000)))
                tl._write(os.path.join(src, stem + ".cls"), b"%d\n" % c)
                members[s] += [stem + ".jpg", stem + ".cls"]
            sample += 1
    os.makedirs(os.path.join(src, "links"))
    for i in range(12):
        name = os.path.join("links", "l%02d" % i)
        os.symlink("../train/c00/s%04d.jpg" % i, os.path.join(src, name))
        members[i % SHARDS].append(name)
    os.makedirs(os.path.join(src, "empty", "inner"))
    members[3].append("empty")
    shard_dir = os.path.join(root, "shards")
    os.mkdir(shard_dir)
    shards = []
    for s in range(SHARDS):
        out = os.path.join(shard_dir, "part-%03d.tar" % s)
        tl.tar_create(out, src, members[s], extra=["--no-recursion"] if s != 3 else [])
        shards.append(out)
    return src, shards


class RankTest(tl.ScratchTestCase):
    PREFIX = "shardfs-view-ranks-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.src, cls.shards = make_sharded(cls.tmp)
        cls.idx = os.path.join(cls.tmp, "ranks.idx")
        tl.build_index(cls.shards, cls.idx)
        cls.tree = tl.tree_of_dir(cls.src)
        # A view without some sidecars, one class and some symlinks.
        cls.excludes = ["s00[0-3]?.cls", "c03", "l0[0-3]"]
        tl.view_create(cls.idx, "sub", *[a for g in cls.excludes for a in ("--exclude", g)])

    def view_facts(self, spec):
        """(tree, {path: shard_id} of files, {path: inode}) of the view."""
        tree, inodes = tl.ls_tree(self.idx, spec)
        p = tl.run_shardfs("ls", "-R", "--json", "--view", spec, self.idx, check=0)
        shard_of = {o["path"]: o["shard_id"] for o in tl.json_lines(p.stdout)
                    if o["type"] == "file"}
        return tree, shard_of, inodes

    def mount_rank(self, opts):
        mnt = self.scratch("mnt")
        with tl.Mount(self.idx, mnt, options=opts):
            return tl.tree_of_dir(mnt)

    def check_world(self, spec, world, seed, keep_dirs=False):
        """Mounts every rank of one world and checks the contract. Returns the
        partition: {file path: rank, None when trimmed}."""
        want = self.tree if spec == "default" else tl.apply_view(self.tree, excludes=self.excludes)
        listed, _, inodes = self.view_facts(spec)
        self.assertEqual(listed, tl.without_content(want), tl.diff_trees(
            tl.without_content(want), listed))
        view_dirs = {p for p, n in want.items() if n[0] == "dir"}
        leaves = {p for p, n in want.items() if n[0] != "dir"}
        ranks = []
        for k in range(world):
            opts = "view=%s,rank=%d,world=%d" % (spec, k, world)
            if seed is not None:
                opts += ",seed=%d" % seed
            if keep_dirs:
                opts += ",rank_dirs=keep"
            got = self.mount_rank(opts)
            ranks.append(got)
            for p, n in got.items():
                self.assertIn(p, want, "%s: %r is not in the view" % (opts, p))
                self.assertEqual(n, want[p], "%s: %r" % (opts, p))
            mine = {p for p, n in got.items() if n[0] != "dir"}
            dirs = {p for p, n in got.items() if n[0] == "dir"}
            if keep_dirs:
                self.assertEqual(dirs, view_dirs, opts)
            else:
                # Directories above this rank's files, and the view's
                # directories with nothing at all below them (every rank shows
                # those, so that the union over ranks is the view), with
                # their parents.
                need = {b""}
                empty = {d for d in view_dirs if d and not any(
                    q.startswith(d + b"/") for q in want)}
                for p in mine | empty:
                    d = p if p in empty else os.path.dirname(p)
                    while d:
                        need.add(d)
                        d = os.path.dirname(d)
                self.assertEqual(dirs, need, "%s: directories shown vs those above its files"
                                 % opts)
        owners = {}
        for k, got in enumerate(ranks):
            for p, n in got.items():
                if n[0] != "dir":
                    self.assertNotIn(p, owners, "%r shown by ranks %s and %d" % (
                        p, owners.get(p), k))
                    owners[p] = k
        model, q, n = tl.rank_split(self.idx, SHARDS, world, seed or 0, view=spec)
        files = {p for p in leaves if want[p][0] == "file"}
        self.assertEqual(set(model), files)
        trimmed = {p for p in files if model[p] is None}
        self.assertEqual(set(owners) | trimmed, leaves, "union over the ranks vs the view")
        self.assertFalse(set(owners) & trimmed, "a trimmed file is shown")
        self.assertEqual(len(tl.samples_of(trimmed)), n - q * world, "trimmed samples")
        for k, got in enumerate(ranks):
            mine = {p for p, node in got.items() if node[0] == "file"}
            self.assertEqual(len(tl.samples_of(mine)), q, "rank %d of %d: samples" % (k, world))
            self.assertEqual(mine, {p for p in files if model[p] == k},
                             "rank %d of %d seed %s vs the rule" % (k, world, seed))
        for sample, members in tl.samples_of(files).items():
            self.assertEqual(len({owners.get(m) for m in members}), 1,
                             "sample %r split between ranks" % (sample,))
        s = seed or 0
        for p in leaves:
            if want[p][0] == "symlink":
                ino = inodes[p]
                allowed = {splitmix64(s ^ ino) % world, splitmix64(s ^ ino, False) % world}
                self.assertIn(owners[p], allowed, "symlink %r (inode %d) on rank %d" % (
                    p, ino, owners[p]))
        return {p: owners.get(p) for p in files}

    def test_default_view_ranks(self):
        parts = [self.check_world("default", 3, seed) for seed in (None, 1, 2)]
        self.assertTrue(parts[0] != parts[1] or parts[0] != parts[2],
                        "seeds 0, 1 and 2 gave the same partition")
        self.check_world("default", 1, None)
        # More ranks than shards: each still gets its equal share.
        self.check_world("default", SHARDS + 2, 4)

    def test_named_view_ranks(self):
        p0 = self.check_world("sub", 4, 0)
        p7 = self.check_world("sub", 4, 7)
        p9 = self.check_world("sub", 4, 9)
        self.assertTrue(p0 != p7 or p0 != p9, "seeds 0, 7, 9 gave the same partition")
        self.assertEqual(self.check_world("sub", 4, 7), p7, "same seed, same partition")

    def test_keep_dirs(self):
        self.check_world("sub", 2, 5, keep_dirs=True)

    def test_bad_rank_options(self):
        mnt = self.scratch("mnt")
        for opts in ("rank=3,world=3", "rank=0,world=0", "rank=1", "rank=x,world=2",
                     "rank=0,world=2,rank_dirs=maybe"):
            p = tl.run_shardfs("mount", "-o", opts, self.idx, mnt, timeout=30)
            try:
                self.assertNotEqual(p.returncode, 0, "mount -o %s must be refused" % opts)
                self.assertFalse(os.path.ismount(mnt))
            finally:
                tl.unmount(mnt)

    def test_fewer_samples_than_ranks_refused(self):
        """A rank with no sample would train on an empty tree while the job
        waits for it: refused at mount, naming the index, the samples and
        the world."""
        _, _, n = tl.rank_split(self.idx, SHARDS, 1)
        mnt = self.scratch("mnt")
        p = tl.run_shardfs("mount", "-o", "rank=0,world=%d" % (n + 1), self.idx, mnt, timeout=30)
        try:
            self.assertNotEqual(p.returncode, 0)
            self.assertFalse(os.path.ismount(mnt))
            err = p.stderr.decode()
            self.assertIn("index %s: %d samples cannot give each of %d ranks one; use world <= %d"
                          % (self.idx, n, n + 1, n), err)
        finally:
            tl.unmount(mnt)
        with tl.Mount(self.idx, mnt, options="rank=%d,world=%d" % (n - 1, n)):
            got = tl.tree_of_dir(mnt)
        self.assertEqual(len(tl.samples_of(p for p, node in got.items() if node[0] == "file")), 1)


if __name__ == "__main__":
    tl.main()
