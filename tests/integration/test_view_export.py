#!/usr/bin/env python3
"""`shardfs view export` and `shardfs view diff` end to end.

References: the shards themselves, read with Python's tarfile (member order,
names, data offsets, which of two same-path members extraction keeps), and the
mounted view read with os.walk, each file mapped to its shard with
`shardfs stat --json --view`. Export's shard list and keys must be what a
WebDataset-style reader of those shards needs to see exactly the mounted files."""

import io
import json
import os
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

# Members of each shard, in tar order: (name, data) for files, (name, None)
# for directories, (name, "->target") for symlinks. Offsets are not in name
# order, "train/s005.jpg" is in shard 0 and again in shard 1 (shard 1's
# wins), and shard 2 holds only "other/".
SHARDS = [
    [("train", None), ("train/s003.jpg", b"j3" * 300), ("train/s003.cls", b"3"),
     ("train/s001.jpg", b"j1" * 200), ("train/s001.json", b"{}"),
     ("train/s005.jpg", b"old5"), ("train/.hidden", b"h"), ("train/README", b"r"),
     ("train/sub", None), ("train/sub/a.b.c", b"abc"), ("train/link.jpg", "->s001.jpg")],
    [("val", None), ("val/v2.txt", b"v2"), ("val/v1.txt", b"v1"), ("val/v1.json", b"{1}"),
     ("train/s005.jpg", b"new5" * 50)],
    [("other", None), ("other/x.bin", b"x" * 1000)],
]


def sample_key(path):
    """The key rule of tools/builder/view_export.h: the basename loses everything
    from its first '.' after any leading dots."""
    d, _, base = path.rpartition("/")
    stem = len(base) - len(base.lstrip("."))
    dot = base.find(".", stem) if stem < len(base) else -1
    if dot >= 0:
        base = base[:dot]
    return d + "/" + base if d else base


def write_shard(path, members):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.mtime = tl.BASE_TIME_S
            if data is None:
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            elif isinstance(data, str):
                ti.type, ti.linkname = tarfile.SYMTYPE, data[2:]
                tf.addfile(ti)
            else:
                ti.size, ti.mode = len(data), 0o644
                tf.addfile(ti, io.BytesIO(data))


def tar_files(shard):
    """[(name, offset_data, data)] of the regular files of `shard`, in tar order."""
    out = []
    with tarfile.open(shard) as tf:
        for m in tf:
            if m.isreg():
                out.append((m.name, m.offset_data, tf.extractfile(m).read()))
    return out


class ViewExportTest(tl.ScratchTestCase):
    PREFIX = "shardfs-view-export-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.shards = []
        for i, members in enumerate(SHARDS):
            p = os.path.join(cls.tmp, "shard-%03d.tar" % i)
            write_shard(p, members)
            cls.shards.append(p)
        cls.idx = os.path.join(cls.tmp, "data.idx")
        tl.build_index(cls.shards, cls.idx)
        _, shard_lines = tl.index_info(cls.idx)
        cls.shard_paths = [s["shard"] for s in shard_lines]  # by shard id

    # -- helpers ------------------------------------------------------------

    def export(self, spec, fmt, *extra, check=0):
        return tl.run_shardfs("view", "export", self.idx, spec, "--format", fmt, *extra,
                              check=check)

    def export_keys(self, spec):
        out = self.export(spec, "keys").stdout.decode()
        return [(o["shard"], o["keys"]) for o in map(json.loads, out.splitlines())]

    def default_paths(self):
        """{inode: [paths]} of the default view (the tar paths)."""
        out = {}
        for path, obj in tl.index_entries(self.idx).items():
            out.setdefault(obj["inode"], []).append(os.fsdecode(path))
        return out

    def mounted_reference(self, spec):
        """Mounts `spec`, walks it, and maps each file to (shard, offset, tar
        path) with `stat --json --view`; checks each file's bytes against the
        tar member at that offset. Returns [(shard, keys in tar order)] in
        shard id order: what export must print."""
        mnt = os.path.join(self.tmp, "mnt-" + spec.replace("@", "-"))
        os.makedirs(mnt, exist_ok=True)
        tar_paths = self.default_paths()
        members = {p: {off: (name, data) for name, off, data in tar_files(p)}
                   for p in self.shard_paths}
        per_shard = {}
        with tl.Mount(self.idx, mnt, options="view=" + spec):
            rels = []
            for dirpath, _, files in os.walk(mnt):
                for f in files:
                    full = os.path.join(dirpath, f)
                    if not os.path.islink(full):
                        rels.append(os.path.relpath(full, mnt))
            self.assertTrue(rels)
            p = tl.run_shardfs("stat", "--json", "--view", spec, self.idx, *rels, check=0)
            stats = tl.json_lines(p.stdout)
            self.assertEqual([st["path"] for st in stats], [os.fsencode(r) for r in rels])
            for rel, st in zip(rels, stats):
                shard, off = st["shard"], st["offset"]
                name, data = members[shard][off]
                with open(os.path.join(mnt, rel), "rb") as fh:
                    self.assertEqual(fh.read(), data, rel)
                self.assertIn(name, tar_paths[st["inode"]], rel)
                per_shard.setdefault(shard, []).append((off, name))
        want = []
        for shard in self.shard_paths:
            if shard not in per_shard:
                continue
            keys = []
            for _, name in sorted(per_shard[shard]):
                if sample_key(name) not in keys:
                    keys.append(sample_key(name))
            want.append((shard, keys))
        return want

    def check_export_matches_mount(self, spec):
        want = self.mounted_reference(spec)
        self.assertEqual(self.export_keys(spec), want)
        shards = self.export(spec, "shards").stdout.decode().splitlines()
        self.assertEqual(shards, [s for s, _ in want])
        return want

    def diff_json(self, a, b):
        return json.loads(tl.run_shardfs("view", "diff", "--json", self.idx, a, b,
                                         check=0).stdout)

    # -- the default view ---------------------------------------------------

    def test_default_keys_follow_tar_order_and_extraction(self):
        # The reference from the shards alone: each file member extraction
        # keeps (the last member of its path), keyed in its shard's tar order.
        last = {}
        for shard in self.shard_paths:
            for name, off, _ in tar_files(shard):
                last[name] = (shard, off)
        want = []
        for shard in self.shard_paths:
            keys = []
            for name, off, _ in tar_files(shard):
                if last[name] == (shard, off) and sample_key(name) not in keys:
                    keys.append(sample_key(name))
            if keys:
                want.append((shard, keys))
        got = self.export_keys("default")
        self.assertEqual(got, want)
        self.assertEqual(got[0][1], ["train/s003", "train/s001", "train/.hidden", "train/README",
                                     "train/sub/a"])
        self.assertEqual(got[1][1], ["val/v2", "val/v1", "train/s005"])

    def test_default_export_matches_mount(self):
        want = self.check_export_matches_mount("default")
        self.assertEqual([s for s, _ in want], self.shard_paths)

    def test_out_file_is_what_stdout_prints(self):
        d = os.path.join(self.tmp, "out")
        os.makedirs(d, exist_ok=True)
        for fmt in ("shards", "keys"):
            out = os.path.join(d, "export." + fmt)
            with open(out, "w") as f:
                f.write("stale\n")
            p = self.export("default", fmt, "--out", out)
            self.assertEqual(p.stdout, b"")
            with open(out, "rb") as f:
                self.assertEqual(f.read(), self.export("default", fmt).stdout)
        self.assertEqual(sorted(os.listdir(d)), ["export.keys", "export.shards"])

    def test_diff_of_a_view_with_itself_is_empty(self):
        d = self.diff_json("default", "default")
        self.assertRegex(d["a"], r"^default@\d+$")
        self.assertEqual(d["a"], d["b"])
        for k in ("added", "removed", "renamed", "replaced"):
            self.assertEqual(d[k], [], k)
        p = tl.run_shardfs("view", "diff", self.idx, "default", "default", check=0)
        self.assertEqual(p.stdout.decode(), "%s -> %s: 0 added, 0 removed, 0 renamed, "
                         "0 replaced\n" % (d["a"], d["b"]))

    def test_errors_name_the_index_and_the_view(self):
        for argv in (["view", "export", self.idx, "nosuchview", "--format", "keys"],
                     ["view", "diff", self.idx, "default", "nosuchview"]):
            p = tl.run_shardfs(*argv, check=1)
            err = p.stderr.decode()
            self.assertIn(self.idx, err, argv)
            self.assertIn("nosuchview", err, argv)
            self.assertEqual(p.stdout, b"", argv)
        out = os.path.join(self.tmp, "never-written")
        self.export("nosuchview", "keys", "--out", out, check=1)
        self.assertFalse(os.path.exists(out))

    def test_usage_errors(self):
        tl.run_shardfs("view", "export", self.idx, "default", check=2)
        tl.run_shardfs("view", "export", self.idx, "default", "--format", "tar", check=2)
        tl.run_shardfs("view", "export", self.idx, "--format", "keys", check=2)
        tl.run_shardfs("view", "diff", self.idx, "default", check=2)
        tl.run_shardfs("view", "diff", "--bogus", self.idx, "default", "default", check=2)

    # -- named views and versions --------------------------------------------

    def make_view(self, idx, name, *args):
        return tl.run_shardfs("view", "create", idx, name, *args, check=0)

    def test_view_export_and_diff(self):
        rename = os.path.join(self.tmp, "rename.tsv")
        with open(rename, "w") as f:
            f.write("train/s001.jpg\tren/first.jpg\n")
        self.make_view(self.idx, "sel", "--exclude", "other", "--exclude", "*.cls",
                       "--exclude", "README", "--rename-map", rename)
        want = self.check_export_matches_mount("sel")
        # shard 2 held only other/; the renamed file keys by its tar path.
        self.assertEqual(want, [(self.shard_paths[0], ["train/s003", "train/s001",
                                                       "train/.hidden", "train/sub/a"]),
                                (self.shard_paths[1], ["val/v2", "val/v1", "train/s005"])])
        d = self.diff_json("default", "sel")
        self.assertRegex(d["b"], r"^sel@1$")
        self.assertEqual(d["removed"], ["other/", "other/x.bin", "train/README", "train/s003.cls"])
        self.assertEqual(d["added"], ["ren/"])
        self.assertEqual(d["renamed"], [{"from": "train/s001.jpg", "to": "ren/first.jpg"}])
        self.assertEqual(d["replaced"], [])
        text = tl.run_shardfs("view", "diff", self.idx, "default", "sel", check=0).stdout.decode()
        self.assertEqual(text.splitlines(), [
            "- other/", "- other/x.bin", "+ ren/", "- train/README",
            "R train/s001.jpg -> ren/first.jpg", "- train/s003.cls",
            "%s -> sel@1: 1 added, 4 removed, 1 renamed, 0 replaced" % d["a"]])
        # A second version from the first: only val/ kept.
        self.make_view(self.idx, "sel", "--from", "sel@1", "--include", "val")
        d = self.diff_json("sel@1", "sel")
        self.assertEqual((d["a"], d["b"]), ("sel@1", "sel@2"))
        self.assertEqual(d["added"], [])
        self.assertIn("ren/first.jpg", d["removed"])
        self.assertNotIn("val/v1.txt", d["removed"])
        self.check_export_matches_mount("sel@2")
        self.assertEqual(self.export("sel@2", "shards").stdout.decode().splitlines(),
                         [self.shard_paths[1]])

    def test_index_add_replaces_and_old_views_keep_their_tar_paths(self):
        import shutil
        d = os.path.join(self.tmp, "added")
        os.makedirs(d)
        shards = [shutil.copy(s, d) for s in self.shards]
        idx = os.path.join(d, "data.idx")
        tl.build_index(shards, idx)
        self.make_view(idx, "val", "--include", "val")
        extra = os.path.join(d, "shard-003.tar")
        write_shard(extra, [("val", None), ("val/v1.txt", b"v1 again"), ("val/v9.txt", b"9")])
        tl.run_shardfs("index", "add", idx, extra, check=0)
        diff = json.loads(tl.run_shardfs("view", "diff", "--json", idx, "default@1", "default",
                                         check=0).stdout)
        self.assertEqual((diff["a"], diff["b"]), ("default@1", "default@2"))
        self.assertEqual(diff["replaced"], ["val/v1.txt"])
        self.assertEqual(diff["added"], ["val/v9.txt"])
        self.assertEqual(diff["removed"], [])
        # val@1 was made from default@1: its v1.txt is the one in shard 1.
        _, lines = tl.index_info(idx)
        paths = [s["shard"] for s in lines]
        out = tl.run_shardfs("view", "export", idx, "val", "--format", "keys", check=0).stdout
        got = [(o["shard"], o["keys"]) for o in map(json.loads, out.decode().splitlines())]
        self.assertEqual(got, [(paths[1], ["val/v2", "val/v1"])])


if __name__ == "__main__":
    tl.main()
