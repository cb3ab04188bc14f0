#!/usr/bin/env python3
"""A real distributed training job over network storage: torch.distributed
(gloo on CPU) with 3 and with 4 ranks on this node, 2 forked (persistent) DataLoader
workers each, 2 epochs, one all-reduce per step (tools/bench/job_rank.py,
started by tools/bench/job_runner.py as shardfs_bench.py --job starts it), over shards
and index on the sshfs rig (netfs_testlib: sshd of its own, 1 ms round trip
through a delay proxy that counts the server's bytes).

Three ways to read, each run with 3 and with 4 ranks:
- the Python package: SampleDataset + JobSampler;
- the Python package: SampleStream;
- one shardfs mount of the index (on sshfs) that every rank of the node
  shares, with torch's DistributedSampler over its files.
Each run starts with an empty node-local cache ($XDG_CACHE_HOME, a folder of
this test). Asserted, per run:
- every rank ends (no all-reduce left waiting) with the same number of
  steps in each epoch;
- every sample read at least once per epoch across the ranks, and no more
  than padding allows (ceil(n / world) per rank);
- every item's bytes right (crc32 against the source);
- the server's bytes for epoch 1 at most 1.1x the shards' and the index's
  bytes (ssh framing included), and for epoch 2 at most 5% of the shards'
  bytes: the node-local cache holds them. Through the package, each reading
  process (each DataLoader worker) also checks every shard it opens on its
  own descriptor (the shard's fingerprint: its first and last 64 KiB, read
  from the server; the node-local cache is no witness of what the server
  holds now), and the ranks' shards change each epoch: those reads are
  allowed on top, at most FINGERPRINT_BYTES per shard and worker. One
  mount is one process: no allowance there.
"""
import os
import random
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
from netfs_testlib import NetFs  # noqa: E402

sys.path.insert(0, os.path.join(os.environ.get("SHARDFS_SOURCE_ROOT", ""), "tools", "bench"))
import job_runner  # noqa: E402

CLASSES = 16
PER_CLASS = 24
JPG_BYTES = 40_000
SHARDS = 6
RTT_MS = 1.0
JOB_TIMEOUT_S = 240
EPOCH1_MAX = 1.1   # Times the shards' and index's bytes.
EPOCH2_MAX = 0.05  # Times the shards' bytes.
FINGERPRINT_BYTES = 2 * 64 * 1024  # A shard's check: its first and last 64 KiB.
WORKERS = 2


def make_dataset(root, seed=3):
    """{key: crc32 of its .jpg}; CLASSES folders of PER_CLASS samples."""
    rnd = random.Random(seed)
    want = {}
    for c in range(CLASSES):
        d = os.path.join(root, f"c{c:02d}")
        os.makedirs(d)
        for i in range(PER_CLASS):
            key = f"c{c:02d}/{c:02d}{i:04d}"
            data = rnd.randbytes(JPG_BYTES + rnd.randrange(-5000, 5000))
            tl.write_file(os.path.join(root, key + ".jpg"), data)
            tl.write_file(os.path.join(root, key + ".json"), b'{"c": %d}' % c)
            want[key] = zlib.crc32(data)
    return want


def tree_bytes(path):
    total = 0
    for d, _, fs in os.walk(path):
        total += sum(os.lstat(os.path.join(d, f)).st_size for f in fs)
    return total


class DistributedJobTest(tl.ScratchTestCase):
    PREFIX = "shardfs-distributed-job-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.src = os.path.join(cls.tmp, "src")
        cls.want = make_dataset(cls.src)
        cls.netfs = NetFs(rtt_ms=RTT_MS)
        cls.netfs.__enter__()
        cls.addClassCleanup(cls.netfs.__exit__, None, None, None)
        export = cls.netfs.export
        os.mkdir(os.path.join(export, "shards"))
        names = [os.path.basename(p) for p in
                 tl.tar_into_shards(cls.src, os.path.join(export, "shards"), SHARDS)]
        cls.net = os.path.join(cls.tmp, "net")
        os.mkdir(cls.net)
        cls.netfs.mount(cls.net)
        cls.idx = os.path.join(cls.net, "data.idx")
        tl.build_index([os.path.join(cls.net, "shards", n) for n in names], cls.idx)
        cls.shard_bytes = tree_bytes(os.path.join(export, "shards"))
        cls.index_bytes = tree_bytes(os.path.join(export, "data.idx"))

    def run_job(self, mode, world, tree=None):
        """Runs the job; returns ([rank results], [server bytes per epoch])."""
        args = ["--mode", mode, "--workers", str(WORKERS)]
        args += ["--tree", tree] if tree else ["--index", self.idx]
        env = dict(os.environ, XDG_CACHE_HOME=self.xdg)
        try:
            results, epoch_bytes, _ = job_runner.run_job(
                sys.executable, world, args, self.scratch(f"{mode}-{world}"), env=env,
                served=self.netfs.proxy.bytes_down, timeout=JOB_TIMEOUT_S)
        except job_runner.JobFailed as e:
            self.fail(str(e))
        return results, epoch_bytes

    def check(self, label, world, results, epoch_bytes, checks=0):
        """`checks`: the processes that check each shard they open (0: one
        mount, whose daemon checked them before the job)."""
        n = len(self.want)
        allowance = FINGERPRINT_BYTES * SHARDS * checks
        per_rank = -(-n // world)
        print(f"\n{label}: steps per epoch {[r['steps'] for r in results]}, server bytes per "
              f"epoch {epoch_bytes} (shards {self.shard_bytes}, index {self.index_bytes}, "
              f"shard checks allowed {allowance})", file=sys.stderr)
        for epoch in range(2):
            steps = [r["steps"][epoch] for r in results]
            self.assertEqual(len(set(steps)), 1, (label, epoch, steps))
            counts = {}
            for r in results:
                self.assertEqual(len(r["items"][epoch]), per_rank, (label, epoch))
                self.assertEqual(r["all_reduced"][epoch], per_rank * world, (label, epoch))
                for key, crc in r["items"][epoch]:
                    self.assertEqual(crc, self.want[key], (label, key))
                    counts[key] = counts.get(key, 0) + 1
            self.assertEqual(set(counts), set(self.want), (label, epoch))
            self.assertEqual(sum(counts.values()) - n, per_rank * world - n, (label, epoch))
        self.assertLessEqual(epoch_bytes[0],
                             EPOCH1_MAX * (self.shard_bytes + self.index_bytes) + allowance,
                             (label, epoch_bytes, allowance))
        self.assertLessEqual(epoch_bytes[1], EPOCH2_MAX * self.shard_bytes + allowance,
                             (label, epoch_bytes, allowance))

    def fresh_cache(self, name):
        self.xdg = self.scratch(name)

    def test_python_package(self):
        for mode in ("sampler", "stream"):
            for world in (3, 4):
                with self.subTest(mode=mode, world=world):
                    self.fresh_cache(f"xdg-{mode}-{world}")
                    results, epoch_bytes = self.run_job(mode, world)
                    self.check(f"{mode}, {world} ranks x 2 workers", world, results, epoch_bytes,
                               checks=world * WORKERS)

    def test_one_mount_shared_by_the_ranks(self):
        for world in (3, 4):
            with self.subTest(world=world):
                self.fresh_cache(f"xdg-mount-{world}")
                mnt = self.scratch(f"mnt-{world}")
                env_before = os.environ.get("XDG_CACHE_HOME")
                os.environ["XDG_CACHE_HOME"] = self.xdg  # The daemon's cache root.
                try:
                    with tl.Mount(self.idx, mnt):
                        results, epoch_bytes = self.run_job("tree", world, tree=mnt)
                finally:
                    if env_before is None:
                        os.environ.pop("XDG_CACHE_HOME", None)
                    else:
                        os.environ["XDG_CACHE_HOME"] = env_before
                self.check(f"one mount, {world} ranks x 2 workers", world, results, epoch_bytes)


if __name__ == "__main__":
    tl.main()
