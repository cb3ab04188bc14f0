"""pack --part K/N: one task of a job array packs part K of N of a tree into
OUT/part-K (its own shards and index); `index manifest` of the parts reads
as the tree, which `verify` proves against the source and a mount shows.

Checked here, each against the source tree (never against pack's own
output): three parts of a tree with samples, hard links, symlinks and empty
directories, split by a scan in every task and by a list written once
(--list-only + --from-list); no sample split between parts; more parts than
units (empty parts); a part killed with SIGKILL half way leaves only a hidden
temporary directory, which no glob of the parts takes and a re-run removes
before completing; a file changed while a part reads it fails that part,
named, with nothing published; bad K/N values are usage errors."""
import os
import re
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))
import shardfs_testlib as tl  # noqa: E402


def make_tree(parent):
    """make_pack_samples' tree plus hard links (within a directory and across
    top-level directories), a symlink and empty directories."""
    src = tl.make_pack_samples(parent)
    os.link(os.path.join(src, "train", "s001.jpg"), os.path.join(src, "val", "linked.jpg"))
    os.link(os.path.join(src, "train", "s002.jpg"), os.path.join(src, "train", "zz.jpg"))
    os.symlink("../train/s003.jpg", os.path.join(src, "val", "sym.jpg"))
    os.makedirs(os.path.join(src, "empty", "inner"))
    os.makedirs(os.path.join(src, "zempty"))
    return src


def part_paths(part_dir):
    """The non-directory paths an index of one part holds."""
    return {e["path"] for e in tl.ls_json(os.path.join(part_dir, "index"))
            if e["type"] != "dir"}


def sample_of(path):
    """pack's sample of a path: its directory and its name up to the first '.'."""
    d, name = os.path.split(path)
    return (d, name.split(b".", 1)[0] + (b"." if b"." in name else b""))


class PackPartTest(tl.ScratchTestCase):
    PREFIX = "shardfs-pack-part-"

    def pack_parts(self, src, out, n, *extra):
        for k in range(n):
            tl.pack(src, out, "--part", "%d/%d" % (k, n), *extra)
        width = len(str(n - 1))
        parts = [os.path.join(out, "part-%0*d" % (width, k)) for k in range(n)]
        self.assertEqual(sorted(os.listdir(out)), [os.path.basename(p) for p in parts])
        for k, part in enumerate(parts):
            info, _ = tl.index_info(os.path.join(part, "index"))
            self.assertEqual(info.get("partition"), "%d/%d" % (k, n), info)
        return parts

    def check_union(self, src, out, parts, mount=False):
        """Every non-directory path in exactly one part, samples whole, and the
        manifest of the parts identical to the source (verify), mounted too."""
        seen = {}
        for k, part in enumerate(parts):
            for p in part_paths(part):
                self.assertNotIn(p, seen, "%r in parts %s and %d" % (p, seen.get(p), k))
                seen[p] = k
        by_sample = {}
        for p, k in seen.items():
            by_sample.setdefault(sample_of(p), set()).add(k)
        split = {s: ks for s, ks in by_sample.items() if len(ks) > 1}
        self.assertEqual(split, {}, "samples split between parts")

        man = os.path.join(self.scratch("manifest"), "train.manifest")
        globbed = sorted(os.path.join(out, n, "index") for n in os.listdir(out)
                         if n.startswith("part-"))
        tl.run_shardfs("index", "manifest", "--out", man, *globbed, check=0)
        v = tl.run_shardfs("verify", "--full", man, src)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        if mount:
            tl.require_fuse()
            mnt = self.scratch("mnt")
            with tl.Mount(man, mnt):
                got = tl.walk_reference(mnt)
            tl.assert_same_tree(self, tl.walk_reference(src), got)
        return seen

    def test_three_parts_of_a_scanned_tree(self):
        src = make_tree(self.scratch("tree"))
        out = os.path.join(self.scratch("out"), "packed")
        parts = self.pack_parts(src, out, 3, "--max-files", "4")
        seen = self.check_union(src, out, parts, mount=True)
        self.assertEqual(len(set(seen.values())), 3, "every part holds files")
        # The names of one file stay in one part, as one inode.
        self.assertEqual(seen[b"val/linked.jpg"], seen[b"train/s001.jpg"])
        self.assertEqual(seen[b"train/zz.jpg"], seen[b"train/s002.jpg"])

    def test_parts_of_a_list_written_once(self):
        src = tl.make_pack_samples(self.scratch("tree"))
        os.makedirs(os.path.join(src, "empty"))
        listing = os.path.join(self.scratch("list"), "files.txt")
        tl.run_shardfs("pack", src, "--list-only", listing, check=0)
        with open(listing, "rb") as f:
            lines = f.read().splitlines()
        want = sorted(p for p, e in tl.walk_reference(src, content=False).items()
                      if p and (e.type != "dir" or not os.listdir(os.path.join(
                          os.fsencode(src), p))))
        self.assertEqual(sorted(lines), want)
        out = os.path.join(self.scratch("out"), "packed")
        # Lines in any order give the same parts.
        shuffled = os.path.join(self.scratch("list"), "shuffled.txt")
        with open(shuffled, "wb") as f:
            f.write(b"\n".join(reversed(lines)) + b"\n")
        parts = self.pack_parts(src, out, 4, "--from-list", shuffled)
        self.check_union(src, out, parts)
        again = os.path.join(self.scratch("out"), "again")
        self.pack_parts(src, again, 4, "--from-list", listing)
        for k in range(4):
            self.assertEqual(part_paths(os.path.join(again, "part-%d" % k)),
                             part_paths(parts[k]), "part %d" % k)

    def test_more_parts_than_units(self):
        src = os.path.join(self.scratch("small"), "src")
        os.makedirs(os.path.join(src, "d"))
        tl._write(os.path.join(src, "d", "a.jpg"), b"a")
        tl._write(os.path.join(src, "d", "a.cls"), b"1")
        tl._write(os.path.join(src, "b.txt"), b"b")
        out = os.path.join(self.scratch("out"), "packed")
        # Two units ("b." and "d/a."), cut as index build cuts 2 shards: part
        # K takes [floor(2K/5), floor(2(K+1)/5)).
        for k in range(5):
            p = tl.run_shardfs("pack", src, "--out", out, "--part", "%d/5" % k, check=0)
            empty = 2 * k // 5 == 2 * (k + 1) // 5
            self.assertEqual(b"is empty" in p.stderr, empty, p.stderr)
        parts = [os.path.join(out, "part-%d" % k) for k in range(5)]
        self.check_union(src, out, parts)

    def make_many(self, per_dir=400):
        src = os.path.join(self.scratch("many"), "src")
        for d in range(5):
            os.makedirs(os.path.join(src, "d%02d" % d))
            for i in range(per_dir):
                tl._write(os.path.join(src, "d%02d" % d, "s%04d.jpg" % i), os.urandom(6000))
        return src

    def test_killed_part_publishes_nothing_and_rerun_completes(self):
        src = self.make_many()
        out = os.path.join(self.scratch("killed"), "out")
        tl.pack(src, out, "--part", "0/2", "--shard-size", "32K")
        hidden = re.compile(r"^\.part-1\.tmp-")

        def in_progress():
            tmp = [n for n in os.listdir(out) if hidden.match(n)]
            return len(tmp) == 1 and len(tl.shards_of(os.path.join(out, tmp[0]))) >= 10

        argv = [tl.SHARDFS, "pack", src, "--out", out, "--quiet", "--part", "1/2",
                "--shard-size", "32K"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            done = tl.wait_until(in_progress, timeout=60, interval=0.001)
            proc.send_signal(signal.SIGKILL)  # Only the pack we started.
        finally:
            proc.kill()
            proc.wait()
        self.assertTrue(done, "the part never wrote 10 shards")
        names = sorted(os.listdir(out))
        self.assertEqual(len(names), 2, names)
        self.assertEqual(names[1], "part-0")
        self.assertRegex(names[0], hidden, "only a hidden temporary directory is left")
        # Nothing that looks like a part: no part-1, and a glob of the parts
        # takes part 0 only, which alone is no copy of the source.
        man = os.path.join(self.scratch("man"), "m.manifest")
        tl.run_shardfs("index", "manifest", "--out", man, os.path.join(out, "part-0", "index"),
                       check=0)
        self.assertEqual(tl.run_shardfs("verify", man, src).returncode, 1)

        # The job array's re-run: the same command removes what the killed
        # task left (made on this host by a process that is gone) and completes.
        p = tl.pack(src, out, "--part", "1/2", "--shard-size", "32K")
        self.assertIn(b"removed: left by process %d of this host" % proc.pid, p.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["part-0", "part-1"])
        self.check_union(src, out, [os.path.join(out, "part-%d" % k) for k in range(2)])
        # A finished part is not packed again without --force; with it, it is.
        p = tl.pack(src, out, "--part", "1/2", check=1)
        self.assertIn(b"already exists", p.stderr)
        tl.pack(src, out, "--part", "1/2", "--force")
        self.assertEqual(sorted(os.listdir(out)), ["part-0", "part-1"])
        self.check_union(src, out, [os.path.join(out, "part-%d" % k) for k in range(2)])

    def test_file_changing_while_read_fails_the_part(self):
        src = os.path.join(self.scratch("changing"), "src")
        os.makedirs(os.path.join(src, "b"))
        for i in range(300):
            tl._write(os.path.join(src, "b", "f%03d.dat" % i), os.urandom(4096))
        os.makedirs(os.path.join(src, "a"))
        change = os.path.join(src, "a", "grow.bin")  # Unit "a/grow.": part 0 of 2.
        tl._write(change, os.urandom(16 << 20))
        stop = threading.Event()
        started = threading.Event()

        def rewriter():  # Same size, new bytes: a torn copy would look whole.
            with open(change, "r+b", buffering=0) as f:
                i = 0
                while not stop.is_set():
                    os.pwrite(f.fileno(), os.urandom(4096), (i * 4096) % (16 << 20))
                    i += 1
                    started.set()

        t = threading.Thread(target=rewriter)
        t.start()
        try:
            started.wait(10)
            out = os.path.join(self.scratch("changing-out"), "out")
            p = tl.pack(src, out, "--part", "0/2", check=1)
        finally:
            stop.set()
            t.join()
        self.assertRegex(p.stderr.decode(), r"a/grow\.bin: changed while being packed")
        self.assertEqual(os.listdir(out), [], "nothing published, no temporary directory left")

    def test_bad_part_values(self):
        src = tl.make_pack_samples(self.scratch("tree"))
        out = os.path.join(self.scratch("bad"), "out")
        for value, reason in (("/3", "no part number"), ("3/3", "K must be below N"),
                              ("1/0", "N must be at least 1"), ("1", "expected K/N"),
                              ("a/3", "decimal"), ("-1/3", "decimal")):
            p = tl.pack(src, out, "--part", value, check=2)
            self.assertIn(("--part %s: " % value).encode(), p.stderr)
            self.assertIn(reason.encode(), p.stderr)
            self.assertFalse(os.path.exists(out))
        idx = os.path.join(self.scratch("idx"), "out")
        tl.pack(src, idx)
        p = tl.run_shardfs("pack", "--from-index", os.path.join(idx, "index"), "--out", out,
                           "--part", "0/2", check=2)
        self.assertIn(b"--part", p.stderr)
        p = tl.run_shardfs("pack", src, "--list-only", os.path.join(out, "l"), "--part", "0/2",
                           check=2)
        self.assertIn(b"--list-only takes no", p.stderr)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    tl.main()
