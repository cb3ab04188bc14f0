#!/usr/bin/env python3
"""pack --shuffle SEED and the order of --from-list: samples in a seeded
order (so that every shard holds samples of nearly every class) or in the
list's order, each sample whole and a directory before what it holds, with
the index, verify and the mount unchanged.

The references are the loose tree (os.walk, sha256, a mount of the index
against it), the shards' member order as Python's tarfile reads it, the
sample key rule (directory plus name up to the first dot), and an
unshuffled pack of the same tree for what must not change; never the order
pack itself reports."""
import collections
import hashlib
import os
import random
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

CLASSES = 20
SAMPLES = 30  # Per class, a .jpg and a .json each.
MAX_FILES = "120"  # Members per shard: 60 samples.


def make_tree(parent):
    """parent/src: CLASSES class directories of SAMPLES samples, plus a hard
    link across classes, a symlink and an empty directory."""
    rnd = random.Random(7)
    src = os.path.join(parent, "src")
    for c in range(CLASSES):
        d = os.path.join(src, "cls%02d" % c)
        os.makedirs(d)
        for i in range(SAMPLES):
            for ext in ("jpg", "json"):
                tl._write(os.path.join(d, "s%03d.%s" % (i, ext)),
                          rnd.randbytes(rnd.randrange(20, 400)))
    os.link(os.path.join(src, "cls01", "s000.jpg"), os.path.join(src, "cls00", "s000.link"))
    os.symlink("s001.jpg", os.path.join(src, "cls02", "s001.sym"))
    os.makedirs(os.path.join(src, "empty", "inner"))
    return src


def sample_key(name):
    """pack's (and WebDataset's) sample of a member: its directory plus the
    name up to the first dot."""
    d, base = os.path.split(name)
    return os.path.join(d, base.split(".", 1)[0])


def shard_members(out):
    """[(shard number, tarfile member)] of every shard of `out`, in order."""
    got = []
    for i, n in enumerate(tl.shards_of(out)):
        with tarfile.open(os.path.join(out, n)) as tf:
            got += [(i, m) for m in tf.getmembers()]
    return got


def path_of(m):
    return "" if m.name in (".", "./") else m.name.rstrip("/")


def key_runs(members):
    """The sample keys of the non-directory members, one per run of equal
    keys, with the shard of each run."""
    runs = []
    for shard, m in members:
        if m.isdir():
            continue
        k = sample_key(path_of(m))
        if not runs or runs[-1][0] != k:
            runs.append((k, shard))
    return runs


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class PackShuffleTest(tl.ScratchTestCase):
    PREFIX = "shardfs-pack-shuffle-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = make_tree(cls.tmp)
        cls.plain = os.path.join(cls.tmp, "plain")
        tl.pack(cls.src, cls.plain, "--max-files", MAX_FILES)
        cls.shuffled = os.path.join(cls.tmp, "shuffled")
        tl.pack(cls.src, cls.shuffled, "--max-files", MAX_FILES, "--shuffle", "42")

    def classes_per_shard(self, out):
        per = collections.defaultdict(set)
        for shard, m in shard_members(out):
            if not m.isdir():
                per[shard].add(path_of(m).split("/")[0])
        return [len(per[s]) for s in sorted(per)]

    def test_every_shard_holds_nearly_every_class(self):
        mixed = self.classes_per_shard(self.shuffled)
        plain = self.classes_per_shard(self.plain)
        self.assertGreater(len(mixed), 8, mixed)
        # Every full shard (all but the last) of 60 samples out of 20 classes.
        self.assertGreaterEqual(min(mixed[:-1]), 15, mixed)
        # In tree order, a shard of 60 samples spans 2 or 3 classes of 30.
        self.assertLessEqual(max(plain), 3, plain)

    def test_samples_whole_and_directories_first(self):
        members = shard_members(self.shuffled)
        runs = key_runs(members)
        keys = [k for k, _ in runs]
        self.assertEqual(len(keys), len(set(keys)), "a sample's files are not adjacent")
        self.assertEqual(sorted(keys), sorted(k for k, _ in key_runs(shard_members(self.plain))))
        self.assertNotEqual(keys, sorted(keys))
        seen = set()
        for _, m in members:
            p = path_of(m)
            if p:
                self.assertIn(os.path.dirname(p), seen, "%s before its directory" % p)
            seen.add(p)

    def test_index_verify_and_mount_as_without_shuffle(self):
        drop = ("shard", "shard_id", "offset")  # Where the bytes are: all that may differ.
        self.assertEqual(tl.ls_json(os.path.join(self.shuffled, "index"), drop=drop),
                         tl.ls_json(os.path.join(self.plain, "index"), drop=drop))
        v = tl.run_shardfs("verify", "--full", os.path.join(self.shuffled, "index"), self.src)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        tl.require_fuse()
        mnt = self.scratch("mnt")
        with tl.Mount(os.path.join(self.shuffled, "index"), mnt):
            got = tl.walk_reference(mnt)
        tl.assert_same_tree(self, tl.walk_reference(self.src), got)

    def test_same_seed_same_bytes_other_seed_other_order(self):
        again = os.path.join(self.scratch("again"), "out")
        tl.pack(self.src, again, "--max-files", MAX_FILES, "--shuffle", "42", "-j", "1")
        names = tl.shards_of(self.shuffled)
        self.assertEqual(tl.shards_of(again), names)
        for n in names:
            self.assertEqual(sha256(os.path.join(again, n)),
                             sha256(os.path.join(self.shuffled, n)), n)
        other = os.path.join(self.scratch("other"), "out")
        tl.pack(self.src, other, "--max-files", MAX_FILES, "--shuffle", "43")
        self.assertNotEqual(key_runs(shard_members(other)), key_runs(shard_members(self.shuffled)))
        top = os.path.join(self.scratch("top"), "out")
        tl.pack(self.src, top, "--max-files", MAX_FILES, "--shuffle", "18446744073709551615")

    def test_build_options_record_the_seed(self):
        info, _ = tl.index_info(os.path.join(self.shuffled, "index"))
        self.assertIn(" shuffle=42", info["build_options"])
        info, _ = tl.index_info(os.path.join(self.plain, "index"))
        self.assertIn(" shuffle=no", info["build_options"])

    def test_from_list_order_is_kept(self):
        listing = os.path.join(self.scratch("list"), "all.txt")
        tl.run_shardfs("pack", self.src, "--list-only", listing, check=0)
        with open(listing) as f:
            lines = f.read().splitlines()
        # Samples in a random order, their files in reverse order, and one
        # class directory as a whole line among them.
        by_key = collections.defaultdict(list)
        for line in lines:
            if not line.startswith("cls05/"):
                by_key[sample_key(line)].append(line)
        order = sorted(by_key)
        random.Random(3).shuffle(order)
        wanted = []
        for k in order[:100] + ["cls05"] + order[100:]:
            wanted += ["cls05"] if k == "cls05" else sorted(by_key[k], reverse=True)
        with open(listing, "w") as f:
            f.write("\n".join(wanted) + "\n")
        out = os.path.join(self.scratch("listed"), "out")
        tl.pack(self.src, out, "--max-files", MAX_FILES, "--from-list", listing)
        want_keys = []
        for line in wanted:
            below = [sample_key(p) for p in lines if p.startswith("cls05/")]
            for k in (sorted(set(below)) if line == "cls05" else [sample_key(line)]):
                if k not in want_keys and not k.startswith("empty/"):
                    want_keys.append(k)
        self.assertEqual([k for k, _ in key_runs(shard_members(out))], want_keys)
        v = tl.run_shardfs("verify", "--full", os.path.join(out, "index"), self.src)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # With --shuffle the list says only what is packed: the same shards
        # as shuffling the whole tree.
        both = os.path.join(self.scratch("both"), "out")
        tl.pack(self.src, both, "--max-files", MAX_FILES, "--from-list", listing,
                "--shuffle", "42")
        names = tl.shards_of(self.shuffled)
        self.assertEqual(tl.shards_of(both), names)
        for n in names:
            self.assertEqual(sha256(os.path.join(both, n)),
                             sha256(os.path.join(self.shuffled, n)), n)

    def test_parts_shuffled_union_exact(self):
        out = os.path.join(self.scratch("parts"), "out")
        for k in range(3):
            tl.pack(self.src, out, "--part", "%d/3" % k, "--max-files", "40", "--shuffle", "42")
        parts = [os.path.join(out, "part-%d" % k) for k in range(3)]
        whole = [k for k, _ in key_runs(shard_members(self.shuffled))]
        seen = {}
        for k, part in enumerate(parts):
            keys = [key for key, _ in key_runs(shard_members(part))]
            mine = set(keys)
            self.assertEqual(len(keys), len(mine), "part %d: a sample split" % k)
            # The part's samples in the order the whole tree's shuffle gives them.
            self.assertEqual(keys, [key for key in whole if key in mine], "part %d" % k)
            self.assertGreater(len({key.split("/")[0] for key in keys[:20]}), 3, keys[:20])
            for e in tl.ls_json(os.path.join(part, "index")):
                if e["type"] != "dir":
                    self.assertNotIn(e["path"], seen, "in two parts")
                    seen[e["path"]] = k
        man = os.path.join(self.scratch("manifest"), "train.manifest")
        tl.run_shardfs("index", "manifest", "--out", man,
                       *[os.path.join(p, "index") for p in parts], check=0)
        v = tl.run_shardfs("verify", "--full", man, self.src)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_bad_seed_is_a_usage_error_and_writes_nothing(self):
        for args in (["--shuffle", "abc"], ["--shuffle", "-1"], ["--shuffle=-1"],
                     ["--shuffle", ""], ["--shuffle", "1.5"],
                     ["--shuffle", "18446744073709551616"]):
            out = os.path.join(self.scratch("bad"), "out")
            p = tl.pack(self.src, out, *args, check=None)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(b"--shuffle: bad seed", p.stderr, args)
            self.assertFalse(os.path.exists(out), args)
        listing = os.path.join(self.scratch("list"), "l.txt")
        p = tl.run_shardfs("pack", self.src, "--list-only", listing, "--shuffle", "1")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertFalse(os.path.exists(listing))

    def test_help_names_shuffle(self):
        p = tl.run_shardfs("pack", "--help", check=0)
        self.assertIn(b"--shuffle", p.stdout)
        self.assertIn(b"samples in its order", p.stdout)


if __name__ == "__main__":
    tl.main()
