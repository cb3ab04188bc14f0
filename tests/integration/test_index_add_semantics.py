"""index add against index build: shards added one by one to an index make the
same tree as one build of all of them (names, types, modes, owners, mtimes,
sizes, link counts, symlink targets, where each file's bytes are), on random
shards full of what tar replays in order: replaced files, files replacing
directories and the reverse, symlinks, hard links to earlier shards' files,
re-described directories. The build's replay is checked against GNU tar
elsewhere (test_tar_semantics); here add must agree with it."""
import os
import random
import sys
import tarfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import shardfs_testlib as tl  # noqa: E402

def write_shard(path, rnd, earlier_files, n):
    """A GNU tar of n random members; earlier_files lists paths that may be
    hard link targets (they hold files in some earlier shard or this one)."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        tl.add_random_members(tar, rnd, n, earlier_files)


def tree(idx):
    """ls -R --json minus inode numbers (add and build number new entries
    differently) and shard paths, keyed by path; hard links as groups."""
    out = {}
    groups = {}
    for e in tl.ls_json(idx):
        inode = e.pop("inode")
        if e["type"] == "dir":
            # A directory no member describes takes its newest child's mtime
            # in a build; after index add it keeps the one it had (the index
            # does not record which directories were implied). Documented.
            e.pop("mtime_ns")
        groups.setdefault(inode, []).append(e["path"])
        out[e["path"]] = e
    links = sorted(sorted(g) for g in groups.values() if len(g) > 1)
    return out, links


class IndexAddSemanticsTest(tl.ScratchTestCase):
    PREFIX = "shardfs-add-sem-"

    def test_add_one_by_one_equals_one_build(self):
        for seed in range(int(os.environ.get("SHARDFS_ADD_SEEDS", "12"))):
            rnd = random.Random(seed)
            d = self.scratch("s%d" % seed)
            shards, files = [], []
            for i in range(rnd.randint(2, 4)):
                s = os.path.join(d, "s%d.tar" % i)
                write_shard(s, rnd, files, rnd.randint(3, 25))
                shards.append(s)
            full = os.path.join(d, "full.idx")
            step = os.path.join(d, "step.idx")
            tl.run_shardfs("index", "build", "--quiet", "--out", full, *shards, check=0)
            tl.run_shardfs("index", "build", "--quiet", "--out", step, shards[0], check=0)
            for s in shards[1:]:
                tl.run_shardfs("index", "add", "--quiet", step, s, check=0)
            want, want_links = tree(full)
            got, got_links = tree(step)
            self.assertEqual(sorted(got), sorted(want), "seed %d: paths" % seed)
            for p in want:
                self.assertEqual(got[p], want[p], "seed %d: %s" % (seed, p))
            self.assertEqual(got_links, want_links, "seed %d: hard link groups" % seed)
            # A build forced to spill at every possible cut (index build
            # --memory) makes the same index as the in-memory build.
            spilled = os.path.join(d, "spilled.idx")
            tl.run_shardfs("index", "build", "--quiet", "--memory", "1", "--out", spilled,
                           *shards, check=0)
            self.assertEqual(tl.ls_json(spilled), tl.ls_json(full), "seed %d: spilled" % seed)


if __name__ == "__main__":
    tl.main()
