#!/usr/bin/env python3
"""The four-rank cluster rehearsal on one machine, at CI size.

320 small real JPEGs in 8 classes, in 12 GNU tar shards that each hold samples of every class,
are uploaded to one s3rver (SigV4 checked) and indexed by their s3:// URLs; a view leaves one
class out. Four rank mounts of that view (`-o view=v,rank=K,world=4`), each with its own
cache_dir, reach the store each through its own fault proxy (the daemon's AWS_ENDPOINT_URL_S3),
and four unmodified torchvision ImageFolder + torch DataLoader jobs (cluster_loader.py under
Debian's /usr/bin/python3, 2 workers each) read one epoch each, all started at one moment.
While they run, rank 2's path to the store is cut (connections refused and reset) for a few
seconds, then restored. Shown:
  - every rank sees the view's classes, in the same order (ImageFolder's class indices agree);
  - every rank reads the same number of samples (a DDP job's ranks take as many steps), no
    sample on two ranks, their union the view's files but for the trimmed rest, and every
    sample's bytes are the source file's (size and CRC-32 computed here from the source);
  - each rank's samples are the run of the job's sample order that index/rank_partition.h
    gives it (worked out here from `ls -R --json`), within at most shards/world + 2 shards;
  - each rank fetched only the shards its samples lie in (its proxy's paths, its per-shard
    stats), at most their bytes, and its proxy saw the requests `shardfs stats` counts;
  - the outage reached rank 2 (its fetcher retried) and healed without a remount: no read
    failed, its job finished with every sample correct; the other ranks read batches while it
    lasted (timestamps from one monotonic clock).
Everything is unmounted and stopped, by PID, on the way out (checked: no mount, daemon or
loader left). FUSE, node (s3rver) and torch are
required: the test fails, never skips, without them.
"""

import os
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_testlib as btl  # noqa: E402
import cluster_rig as rig  # noqa: E402
import remote_servers as rs  # noqa: E402
import shardfs_testlib as tl  # noqa: E402

CLASSES, PER_CLASS, SHARDS = 8, 40, 12
WORLD, SEED, VIEW, LEFT_OUT = 4, 3, "v", "c05"
OUTAGE_RANK, OUTAGE_S = 2, 2.5
WORKERS, BATCH, STEP_S = 2, 4, 0.2
CHUNK = 8 << 10
# Small chunks, so a rank's shards span many and its reads go on fetching through the epoch;
# no fetch-ahead, so the outage finds chunks still to fetch; a retry budget that outlasts it.
MOUNT_OPTIONS = "chunk_size=8K,fetch_ahead=0,cache_size=64M,retry_budget=30s,connect_timeout=2s"


def make_shards(tmp):
    """tmp/src/train/cNN/sNNNNN.jpg (real JPEGs, by cluster_loader.py) in SHARDS tar shards:
    sample i of class c goes to shard (i + 3c) % SHARDS, so each shard holds every class.
    Returns (src, shard paths)."""
    src = os.path.join(tmp, "src")
    rig.run_loader_tool(["jpegs", "--out", os.path.join(src, "train"), "--classes",
                         str(CLASSES), "--per-class", str(PER_CLASS), "--seed", "5"])
    members = [[] for _ in range(SHARDS)]
    for c in range(CLASSES):
        names = sorted(os.listdir(os.path.join(src, "train", "c%02d" % c)))
        for i, n in enumerate(names):
            members[(i + 3 * c) % SHARDS].append("train/c%02d/%s" % (c, n))
    out = os.path.join(tmp, "shards")
    os.mkdir(out)
    return src, [tl.tar_create(os.path.join(out, "train-%06d.tar" % s), src, members[s])
                 for s in range(SHARDS)]


class ClusterRehearsalTest(tl.ScratchTestCase):
    PREFIX = "shardfs-cluster-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        start = time.monotonic()
        cls.src, cls.shard_files = make_shards(cls.tmp)
        cls.source = {}  # path in the mount: (size, crc32) of the source file
        for c in range(CLASSES):
            d = os.path.join(cls.src, "train", "c%02d" % c)
            for n in os.listdir(d):
                with open(os.path.join(d, n), "rb") as f:
                    data = f.read()
                cls.source["train/c%02d/%s" % (c, n)] = (len(data), zlib.crc32(data))
        cls.run_rehearsal(cls.local_index)
        sys.stderr.write("cluster rehearsal: %.1f s in all\n" % (time.monotonic() - start))
        sys.stderr.write(rig.format_summary(cls.summary, CHUNK) + "\n")

    @classmethod
    def local_index(cls, s3):
        """The index the ranks mount: one local index of the shards' s3:// URLs. Another
        make_index (a partition manifest, an index by URL) is a drop-in for run_rehearsal."""
        return rig.build_s3_index(tl.SHARDFS, s3, "train/", os.path.join(cls.tmp, "v.idx"))

    @classmethod
    def run_rehearsal(cls, make_index):
        """The rehearsal over make_index(s3) (what mount, ls and view create take), once the
        shards are on the store: every fact the tests check is gathered into class
        attributes; the mounts and servers are gone after."""
        work = os.path.join(cls.tmp, "work")
        os.mkdir(work)
        with rs.S3Server() as s3:
            rig.upload_shards(s3, cls.shard_files, "train/")
            index = make_index(s3)
            tl.view_create(index, VIEW, "--exclude", LEFT_OUT, "-m", "one class out")
            cls.files = rig.view_files(tl.SHARDFS, index, VIEW)
            cls.shards = rig.shard_table(tl.SHARDFS, index)
            cls.rank_of, cls.per_rank, _ = tl.rank_split(index, len(cls.shards), WORLD, SEED,
                                                         view=VIEW)
            cls.bucket = s3.bucket
            with rig.Cluster(tl.SHARDFS, index, s3, work, world=WORLD, view=VIEW, seed=SEED,
                             options=MOUNT_OPTIONS) as cl:
                roots = [os.path.join(m, "train") for m in cl.mountpoints]
                with rig.LoaderJobs(roots, work, workers=WORKERS, batch=BATCH,
                                    step=STEP_S, seed=SEED) as jobs:
                    cls.ready = jobs.wait_ready(120)
                    jobs.go()
                    jobs.wait_for("batch", 60)  # Every rank is reading.
                    proxy = cl.proxies[OUTAGE_RANK]
                    cls.outage = [time.monotonic(), None]
                    proxy.down()
                    time.sleep(OUTAGE_S)
                    proxy.up()
                    cls.outage[1] = time.monotonic()
                    cls.done = jobs.wait_done(120)
                    cls.batches = [jobs.batches(k) for k in range(WORLD)]
                    cls.go_time = jobs.go_time
                cls.stats = [cl.stats(k) for k in range(WORLD)]
                # The same daemons from start to end: nothing was remounted.
                cls.daemons_alive = [m.proc is not None and m.proc.poll() is None
                                     for m in cl.mounts]
                cls.summary = rig.summarize(cls.files, cls.shards, cls.done, cls.stats,
                                            cl.proxies, cls.go_time, "train")
                cls.summary["outage"] = {"rank": OUTAGE_RANK,
                                         "from_s": cls.outage[0] - cls.go_time,
                                         "to_s": cls.outage[1] - cls.go_time}
                cls.summary["timeline"] = rig.timeline(cls.batches, cls.outage)

    def rank_samples(self, k):
        return ["train/" + r[0] for r in self.done[k]["samples"]]

    def test_every_rank_sees_the_views_classes(self):
        want = sorted({p.split("/")[1] for p in self.files})
        self.assertNotIn(LEFT_OUT, want)
        self.assertEqual(len(want), CLASSES - 1)
        for k, r in enumerate(self.ready):
            self.assertEqual(r["classes"], want, "rank %d's ImageFolder classes" % k)

    def test_equal_ranks_their_union_the_view_but_the_trimmed(self):
        owner = {}
        for k in range(WORLD):
            for p in self.rank_samples(k):
                self.assertNotIn(p, owner, "%s read by ranks %s and %d" % (p, owner.get(p), k))
                owner[p] = k
        want = {p for p in self.source if p.split("/")[1] != LEFT_OUT}
        self.assertEqual(set(self.files), want, "the view vs the source minus one class")
        n = len(self.files)  # A sample is one JPEG.
        self.assertEqual(self.per_rank, n // WORLD)
        trimmed = set(self.files) - set(owner)
        self.assertLessEqual(set(owner), set(self.files), "union of the samples vs the view")
        self.assertEqual(len(trimmed), n % WORLD, "trimmed: %r" % sorted(trimmed))
        for k in range(WORLD):
            self.assertEqual(self.ready[k]["dataset_samples"], len(self.rank_samples(k)))
            self.assertEqual(len(self.rank_samples(k)), n // WORLD, "rank %d's samples" % k)

    def test_every_sample_is_the_source_file(self):
        for k in range(WORLD):
            for rel, size, crc, _t in self.done[k]["samples"]:
                self.assertEqual((size, crc), self.source["train/" + rel],
                                 "rank %d: train/%s" % (k, rel))

    def test_ranks_take_runs_of_the_sample_order(self):
        for k in range(WORLD):
            want = {os.fsdecode(p) for p, r in self.rank_of.items() if r == k}
            self.assertEqual(set(self.rank_samples(k)), want, "rank %d vs the rule" % k)
        for r in self.summary["ranks"]:
            self.assertLessEqual(len(r["shard_ids"]), SHARDS // WORLD + 2,
                                 "rank %d's shards %r" % (r["rank"], r["shard_ids"]))

    def test_each_rank_fetches_only_its_own_shards(self):
        for r in self.summary["ranks"]:
            k = r["rank"]
            mine = {"/%s/train/%s" % (self.bucket, os.path.basename(self.shards[i][0]))
                    for i in r["shard_ids"]}
            self.assertTrue(r["proxy_paths"], "rank %d sent no request" % k)
            self.assertLessEqual(set(r["proxy_paths"]), mine, "rank %d's requests" % k)
            fetched = {s["shard_id"] for s in self.stats[k]["shards"] if s["bytes_fetched"] > 0}
            self.assertLessEqual(fetched, set(r["shard_ids"]), "rank %d's stats" % k)
            # The cache holds every chunk: nothing is fetched twice, so a rank fetches at
            # most its shards' bytes, and at least the bytes its job read.
            self.assertLessEqual(r["bytes_fetched"], r["shard_bytes"], "rank %d" % k)
            self.assertGreaterEqual(r["bytes_fetched"], r["view_bytes"], "rank %d" % k)
            # Every request the daemon counts went through its own proxy, but for attempts
            # refused during the outage; each chunk fetched is one request that reached it.
            if k != OUTAGE_RANK:
                self.assertEqual(r["requests"], r["proxy_requests"], "rank %d" % k)
            self.assertLessEqual(r["proxy_requests"], r["requests"], "rank %d" % k)
            self.assertGreaterEqual(r["proxy_requests"], r["chunks_fetched"], "rank %d" % k)
            self.assertGreaterEqual(r["proxy_bytes"], r["bytes_fetched"], "rank %d" % k)

    def test_outage_on_one_rank_heals_while_the_others_go_on(self):
        ranks = self.summary["ranks"]
        hit = ranks[OUTAGE_RANK]
        self.assertGreater(hit["retries"], 0, "the outage never reached rank %d's fetches: %r"
                           % (OUTAGE_RANK, hit))
        for r in ranks:
            self.assertEqual(r["fetch_errors"], 0, "rank %d: a read failed" % r["rank"])
            self.assertEqual(r["samples"], self.ready[r["rank"]]["dataset_samples"])
        self.assertEqual(self.daemons_alive, [True] * WORLD)
        t0, t1 = self.outage
        for k in range(WORLD):
            if k == OUTAGE_RANK:
                continue
            during = [b for b in self.batches[k] if t0 < b["t"] < t1]
            self.assertGreater(len(during), 0, "rank %d read no batch during rank %d's outage "
                               "(%.2f..%.2f s): %s" % (k, OUTAGE_RANK, t0 - self.go_time,
                                                        t1 - self.go_time,
                                                        self.summary["timeline"]))
        # Rank 2 went on after the outage, on the same mount.
        after = [b for b in self.batches[OUTAGE_RANK] if b["t"] > t1]
        self.assertGreater(len(after), 0, self.summary["timeline"])

    def test_nothing_left(self):
        self.assertEqual(btl.mounts_under(self.tmp), [])
        self.assertEqual(btl.processes_mentioning(self.tmp), [], "daemons or loaders left")


if __name__ == "__main__":
    tl.main()
