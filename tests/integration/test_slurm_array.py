"""index build --part K/N and pack --part K/N as real Slurm job arrays.

A single-node Slurm of the test's own (slurm_testlib: its own munged,
slurmctld and slurmd, all in a temporary folder) runs

    sbatch --wait --array=0-3 job.sh

where job.sh is what a user would write:

    shardfs index build --part $SLURM_ARRAY_TASK_ID/4 --out parts/part-$SLURM_ARRAY_TASK_ID shards/*.tar

over 12 small shards. Every task must succeed; each part must say which part
it is and hold its contiguous run of the shard list; the parts' shard lists,
joined in order, must be the whole list; the parts' trees, joined with later
parts winning on equal paths, must list as the single index of all 12 shards
does; and `shardfs index manifest` of the 4 parts must list (ls -R, its
JSON), stat and, mounted, read exactly as that single index.

The same Slurm then runs a packing array, `sbatch --wait --array=0-2`:

    shardfs pack --part $SLURM_ARRAY_TASK_ID/3 --out packed src

over a loose tree of samples; `index manifest packed/part-*/index` of the
three parts must `verify` identical to the source. A Slurm that cannot
start fails the test with its logs; nothing skips. Every daemon started is
stopped by its PID, also on failure."""
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import shardfs_testlib as tl  # noqa: E402
import slurm_testlib  # noqa: E402

SHARDS = 12
PARTS = 4
# sbatch --wait polls the controller at growing intervals: the array of
# four ~0.1 s tasks ends well within this.
JOB_TIMEOUT = 40

JOB_SCRIPT = """#!/bin/sh
#SBATCH --job-name=shardfs-index
set -e
"$SHARDFS" index build --quiet --part "$SLURM_ARRAY_TASK_ID/{parts}" \\
    --out "parts/part-$SLURM_ARRAY_TASK_ID" shards/*.tar
echo "part $SLURM_ARRAY_TASK_ID built"
"""

PACK_PARTS = 3
PACK_SCRIPT = """#!/bin/sh
#SBATCH --job-name=shardfs-pack
set -e
"$SHARDFS" pack --quiet --part "$SLURM_ARRAY_TASK_ID/{parts}" --max-files 8 --out packed src
echo "part $SLURM_ARRAY_TASK_ID packed"
"""


def write_shards(shard_dir):
    """SHARDS tar shards: each its own samples under train/c<i%3>/, plus one
    path (train/labels.txt) in shards 0, 5 and 11, so that a later shard,
    in a later part, replaces what an earlier part holds."""
    os.makedirs(shard_dir)
    paths = []
    for i in range(SHARDS):
        path = os.path.join(shard_dir, "shard-%03d.tar" % i)
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            members = [("train/c%d/s%03d_%d.bin" % (i % 3, i, j), os.urandom(100 + 37 * j))
                       for j in range(4)]
            if i in (0, 5, SHARDS - 1):
                members.append(("train/labels.txt", b"labels from shard %d\n" % i))
            for name, data in members:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                ti.mtime = tl.BASE_TIME_S + i
                ti.mode = 0o644
                tar.addfile(ti, io.BytesIO(data))
        paths.append(path)
    return paths


def entries_without_inodes(idx):
    """ls -R --json of an index: {path: entry}, without what only numbers
    the index's own tables (inodes, shard ids)."""
    out = {}
    for path, e in tl.index_entries(idx).items():
        e = dict(e)
        for k in ("inode", "shard_id"):
            e.pop(k, None)
        out[path] = e
    return out


class SlurmArrayTest(unittest.TestCase):
    def test_part_usage_errors(self):
        """What a job script with a wrong --part gets: exit 2, the value and
        the reason, and no index."""
        tmp = tempfile.mkdtemp(prefix="shardfs-part-")
        try:
            shards = write_shards(os.path.join(tmp, "shards"))
            out = os.path.join(tmp, "part")
            for value, reason in (("/4", "no part number"), ("4/4", "K must be below N"),
                                  ("1/0", "N must be at least 1"), ("1", "expected K/N"),
                                  ("a/4", "decimal")):
                p = tl.run_shardfs("index", "build", "--part", value, "--out", out, *shards,
                                   check=2)
                self.assertIn(("--part %s: " % value).encode(), p.stderr)
                self.assertIn(reason.encode(), p.stderr)
                self.assertFalse(os.path.exists(out))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_parts_cut_from_different_lists_are_warned_of(self):
        """index manifest compares the parts' partition_shards: parts 0/2 and
        1/2 of lists of 6 and 12 shards hold shards of neither list whole."""
        tmp = tempfile.mkdtemp(prefix="shardfs-part-")
        try:
            shards = write_shards(os.path.join(tmp, "shards"))
            parts = []
            for k, listed in ((0, shards[:6]), (1, shards)):
                parts.append(os.path.join(tmp, "part-%d" % k))
                tl.build_index(listed, parts[-1], "--part", "%d/2" % k)
            man = os.path.join(tmp, "m.manifest")
            r = tl.run_shardfs("index", "manifest", "--out", man, *parts, check=0)
            self.assertIn(b"shard lists of different lengths (6, 12 shards)", r.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_index_build_parts_as_a_slurm_job_array(self):
        started = time.monotonic()
        tmp = tempfile.mkdtemp(prefix="shardfs-slurm-")
        try:
            os.chmod(tmp, 0o711)  # munged checks every directory above its socket
            self._run(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        elapsed = time.monotonic() - started
        print("slurm array test: %.1f s" % elapsed, file=sys.stderr)
        self.assertLess(elapsed, 60, "the Slurm array test must stay well under a minute")

    def _run(self, tmp):
        work = os.path.join(tmp, "work")
        shards = write_shards(os.path.join(work, "shards"))
        os.makedirs(os.path.join(work, "parts"))
        os.makedirs(os.path.join(work, "out"))
        script = os.path.join(work, "job.sh")
        with open(script, "w") as f:
            f.write(JOB_SCRIPT.format(parts=PARTS))

        with slurm_testlib.SingleNodeSlurm(os.path.join(tmp, "slurm")) as slurm:
            slurm.env["SHARDFS"] = os.path.abspath(tl.SHARDFS)
            try:
                p = slurm.run(["sbatch", "--wait", "--parsable", "--array=0-%d" % (PARTS - 1),
                               "--chdir", work, "--output", os.path.join(work, "out/%A_%a.out"),
                               script], timeout=JOB_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.fail("sbatch --wait: the array did not finish within %d s\n%s" % (
                    JOB_TIMEOUT, slurm.logs()))
            outputs = {}
            for name in sorted(os.listdir(os.path.join(work, "out"))):
                with open(os.path.join(work, "out", name), "rb") as f:
                    outputs[name] = f.read().decode(errors="replace")
            shown = "\n".join("---- %s ----\n%s" % kv for kv in outputs.items())
            self.assertEqual(p.returncode, 0, "sbatch --wait exited %d: %s\n%s\n%s" % (
                p.returncode, p.stderr.decode(errors="replace"), shown, slurm.logs()))
            job = p.stdout.decode().strip().split(";")[0]
            self.assertTrue(job.isdigit(), "sbatch --parsable printed %r" % p.stdout)

            # Every task ran and exited 0 (no slurmdbd, so no sacct: the
            # controller's records and the tasks' own output say it).
            records = slurm.job_records(job)
            tasks = {r.get("ArrayTaskId"): r for r in records}
            self.assertEqual(sorted(tasks), [str(k) for k in range(PARTS)], records)
            for k, r in tasks.items():
                self.assertEqual((r["JobState"], r["ExitCode"]), ("COMPLETED", "0:0"),
                                 "task %s: %s\n%s" % (k, r, shown))
            for k in range(PARTS):
                out = outputs.get("%s_%d.out" % (job, k), "")
                self.assertIn("part %d built" % k, out, shown)
            self._run_pack_array(slurm, work)

        self._check_parts(work, shards)
        self._check_packed(work)

    def _run_pack_array(self, slurm, work):
        src = tl.make_pack_samples(work)  # work/src
        script = os.path.join(work, "pack.sh")
        with open(script, "w") as f:
            f.write(PACK_SCRIPT.format(parts=PACK_PARTS))
        logs = os.path.join(work, "pack-out")
        os.makedirs(logs)
        try:
            p = slurm.run(["sbatch", "--wait", "--parsable", "--array=0-%d" % (PACK_PARTS - 1),
                           "--chdir", work, "--output", os.path.join(logs, "%A_%a.out"), script],
                          timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail("sbatch --wait: the packing array did not finish within %d s\n%s" % (
                JOB_TIMEOUT, slurm.logs()))
        outputs = {}
        for name in sorted(os.listdir(logs)):
            with open(os.path.join(logs, name), "rb") as f:
                outputs[name] = f.read().decode(errors="replace")
        shown = "\n".join("---- %s ----\n%s" % kv for kv in outputs.items())
        self.assertEqual(p.returncode, 0, "sbatch --wait exited %d: %s\n%s\n%s" % (
            p.returncode, p.stderr.decode(errors="replace"), shown, slurm.logs()))
        job = p.stdout.decode().strip().split(";")[0]
        tasks = {r.get("ArrayTaskId"): r for r in slurm.job_records(job)}
        self.assertEqual(sorted(tasks), [str(k) for k in range(PACK_PARTS)], tasks)
        for k, r in tasks.items():
            self.assertEqual((r["JobState"], r["ExitCode"]), ("COMPLETED", "0:0"),
                             "task %s: %s\n%s" % (k, r, shown))
        for k in range(PACK_PARTS):
            self.assertIn("part %d packed" % k, outputs.get("%s_%d.out" % (job, k), ""), shown)

    def _check_packed(self, work):
        """The packing array's parts, joined by a manifest, are the source."""
        packed = os.path.join(work, "packed")
        self.assertEqual(sorted(os.listdir(packed)), ["part-%d" % k for k in range(PACK_PARTS)])
        files = set()
        for k in range(PACK_PARTS):
            idx = os.path.join(packed, "part-%d" % k, "index")
            info, _ = tl.index_info(idx)
            self.assertEqual(info.get("partition"), "%d/%d" % (k, PACK_PARTS), info)
            mine = {e["path"] for e in tl.ls_json(idx) if e["type"] != "dir"}
            self.assertTrue(mine, "part %d holds files" % k)
            self.assertFalse(files & mine, "part %d repeats files of another part" % k)
            files |= mine
        man = os.path.join(work, "packed.manifest")
        r = tl.run_shardfs("index", "manifest", "--out", man,
                           *[os.path.join(packed, "part-%d" % k, "index")
                             for k in range(PACK_PARTS)], check=0)
        self.assertNotIn(b"warning", r.stderr, r.stderr)
        v = tl.run_shardfs("verify", "--full", man, os.path.join(work, "src"))
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def _check_parts(self, work, shards):
        parts = [os.path.join(work, "parts", "part-%d" % k) for k in range(PARTS)]
        joined = []
        for k, part in enumerate(parts):
            info, shard_lines = tl.index_info(part)
            self.assertEqual(info.get("partition"), "%d/%d" % (k, PARTS), info)
            self.assertEqual(info.get("partition_shards"), SHARDS, info)
            first, last = k * SHARDS // PARTS, (k + 1) * SHARDS // PARTS
            got = [os.path.realpath(s["shard"]) for s in shard_lines]
            self.assertEqual(got, [os.path.realpath(s) for s in shards[first:last]],
                             "part %d holds shards [%d, %d)" % (k, first, last))
            joined += got
        self.assertEqual(joined, [os.path.realpath(s) for s in shards],
                         "the parts, in order, hold every shard once, in order")

        # The single index of all the shards, against the parts' trees
        # joined with later parts winning, as later shards do.
        whole = os.path.join(work, "whole")
        tl.build_index([os.path.join(work, "shards")], whole)
        want = entries_without_inodes(whole)
        union = {}
        for part in parts:
            for path, e in entries_without_inodes(part).items():
                if e["type"] == "dir" and path in union:
                    continue  # a directory several parts hold: compared below by name only
                union[path] = e
        self.assertEqual(sorted(union), sorted(want), "the same paths")
        for path, e in want.items():
            if e["type"] == "dir":
                # A part counts only its own subdirectories in nlink.
                self.assertEqual(union[path]["type"], "dir", path)
                continue
            self.assertEqual(union[path], e, path)
        self.assertEqual(union[b"train/labels.txt"]["shard"], want[b"train/labels.txt"]["shard"])
        self.assertTrue(want[b"train/labels.txt"]["shard"].endswith("shard-%03d.tar" % (SHARDS - 1)))
        self._check_manifest(work, parts, whole)

    def _check_manifest(self, work, parts, whole):
        """The manifest of the 4 parts lists, stats and reads as the single
        index of all 12 shards."""
        man = os.path.join(work, "train.manifest")
        r = tl.run_shardfs("index", "manifest", "--out", man, *parts, check=0)
        # All parts of one split, in order: nothing to warn about.
        self.assertNotIn(b"warning", r.stderr, r.stderr)

        # Every listed field but inode numbers and shard ids (numbered per
        # partition, then offset): the same shard, offset, size, mode, owner,
        # mtime, link count and checksum.
        self.assertEqual(entries_without_inodes(man), entries_without_inodes(whole))
        # ls -R as printed (no inode or shard column).
        self.assertEqual(tl.run_shardfs("ls", "-R", man, check=0).stdout,
                         tl.run_shardfs("ls", "-R", whole, check=0).stdout)
        # stat of every path, with the inode line left out.
        paths = sorted(tl.index_entries(whole))

        def stat_lines(idx):
            out = tl.run_shardfs("stat", idx, *paths, check=0).stdout.splitlines()
            return [line for line in out if not line.strip().startswith(b"inode:")]

        self.assertEqual(stat_lines(man), stat_lines(whole))
        man_info, _ = tl.index_info(man)
        whole_info, _ = tl.index_info(whole)
        for k in ("shards", "files", "dirs", "symlinks", "entries", "bytes"):
            self.assertEqual(man_info[k], whole_info[k], k)

        # Mounted, the two trees are the same names, metadata and bytes.
        tl.require_fuse()
        trees = []
        for idx in (man, whole):
            mnt = os.path.join(work, "mnt-" + os.path.basename(idx))
            os.mkdir(mnt)
            with tl.Mount(idx, mnt):
                tree = tl.walk_reference(mnt)
            trees.append({p: e._replace(ino=None) for p, e in tree.items()})
        self.assertEqual(trees[0], trees[1])
        self.assertEqual(len(trees[0]), len(paths) + 1)


if __name__ == "__main__":
    tl.main()
