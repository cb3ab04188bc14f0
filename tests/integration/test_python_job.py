#!/usr/bin/env python3
"""shardfs.torch as a training job uses it: ranks x DataLoader workers x
epochs, in one process per test (the real distributed job, gloo over the
network rig: test_distributed_job.py).

The dataset is the case that broke ranks before: 20 classes of 12 samples
(a .jpg and a .json each), packed so that shards do not mix classes, into 5
shards and into 2 (fewer shards than ranks). For world 2, 3, 4 and 8:
- every rank's share (ImageFolder, SampleDataset with rank=, world=;
  JobSampler; SampleStream; EpochSampler) has the same length: ceil(n /
  world), or n // world with drop_last;
- the shares cover every sample (padding repeats only a rank's own
  samples; drop_last leaves out fewer than world);
- a rank's fixed share lies in a few long runs of its shards;
- JobSampler gives each rank other shards each epoch, the same in every
  process; SampleStream's workers read disjoint runs, start to end, and
  every rank's DataLoader makes the same number of batches.
Fewer samples than ranks is refused with a message that says why.
"""
import faulthandler
import os
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=<build>/src/python)


def stack_if_stuck(_worker):
    """A DataLoader worker that has not ended 90 s after it started prints
    every thread's stack and exits: the loader then fails at once, saying
    where the worker was, rather than after its timeout with no trace."""
    faulthandler.dump_traceback_later(90, exit=True)


CLASSES = 20
PER_CLASS = 12
WORLDS = (2, 3, 4, 8)


def make_classes(root, seed=7):
    rnd = random.Random(seed)
    for c in range(CLASSES):
        d = os.path.join(root, f"c{c:02d}")
        os.makedirs(d)
        for i in range(PER_CLASS):
            key = os.path.join(d, f"{c:02d}{i:04d}")
            tl.write_file(key + ".jpg", rnd.randbytes(rnd.randrange(200, 3000)))
            tl.write_file(key + ".json", b'{"c": %d}' % c)


def raw_loader(f):
    return f.read()


class JobTest(tl.ScratchTestCase):
    PREFIX = "shardfs-python-job-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        make_classes(cls.src)
        cls.indexes = {}
        for shards in (5, 2):
            d = os.path.join(cls.tmp, f"s{shards}")
            os.makedirs(d)
            paths = tl.tar_into_shards(cls.src, d, shards)
            cls.indexes[shards] = os.path.join(d, "idx")
            tl.build_index(paths, cls.indexes[shards])
        cls.keys = sorted(os.path.relpath(os.path.join(dp, f.split(".")[0]), cls.src)
                          for dp, _, fs in os.walk(cls.src) for f in fs if f.endswith(".jpg"))

    def check_shares(self, shares, n, world, drop_last, label):
        """Equal lengths; padding only from a rank's own share; the union
        every sample (drop_last: all but fewer than world)."""
        want = n // world if drop_last else -(-n // world)
        self.assertEqual([len(s) for s in shares], [want] * world, label)
        sets = [set(s) for s in shares]
        for r in range(world):
            for q in range(r):
                self.assertEqual(sets[r] & sets[q], set(), (label, r, q))
        union = set().union(*sets)
        if drop_last:
            self.assertGreater(len(union), n - world, label)
        else:
            self.assertEqual(len(union), n, label)

    def test_fixed_split_equal_counts(self):
        import shardfs.torch as st
        n = len(self.keys)
        for shards, idx in self.indexes.items():
            for world in WORLDS:
                for drop_last in (False, True):
                    label = (shards, world, drop_last)
                    parts = [st.SampleDataset(idx, rank=r, world=world, seed=3,
                                              drop_last=drop_last) for r in range(world)]
                    self.check_shares([p.keys for p in parts], n, world, drop_last, label)
                    union = set().union(*(p.keys for p in parts))
                    self.assertLessEqual(union, set(self.keys), label)
                    images = [st.ImageFolder(idx, loader=raw_loader, rank=r, world=world,
                                             seed=3, drop_last=drop_last)
                              for r in range(world)]
                    self.check_shares([[p for p, _ in im.samples] for im in images], n, world,
                                      drop_last, label)
                    self.assertEqual({len(im.classes) for im in images}, {CLASSES}, label)
                    # Locality: a rank's share is one run of the job's order,
                    # so it touches at most shards/world + 2 shards.
                    for p in parts:
                        touched = {s for s, _ in p.placements}
                        self.assertLessEqual(len(touched), shards // world + 2, label)
        # What an item holds: the rank's own bytes.
        part = st.SampleDataset(self.indexes[2], rank=5, world=8)
        for i in range(len(part)):
            item = part[i]
            with open(os.path.join(self.src, item["__key__"] + ".jpg"), "rb") as f:
                self.assertEqual(item["jpg"], f.read())

    def test_fewer_samples_than_ranks_refused(self):
        import shardfs.torch as st
        n = len(self.keys)
        with self.assertRaisesRegex(ValueError, f"{n} samples cannot be split into {n + 1} "):
            st.SampleDataset(self.indexes[2], rank=0, world=n + 1)
        with self.assertRaisesRegex(ValueError, "rank 4 of world 4"):
            st.SampleDataset(self.indexes[2], rank=4, world=4)
        with self.assertRaisesRegex(ValueError, "rank and world go together"):
            st.JobSampler(st.SampleDataset(self.indexes[2]), rank=1)

    def job_sampler_orders(self, idx, world, epoch, drop_last=False):
        import shardfs.torch as st
        ds = st.SampleDataset(idx)
        out = []
        for r in range(world):
            s = st.JobSampler(ds, rank=r, world=world, seed=11, drop_last=drop_last, block=8)
            s.set_epoch(epoch)
            out.append(list(s))
            self.assertEqual(len(s), len(out[-1]))
        return ds, out

    def test_job_sampler(self):
        n = len(self.keys)
        for shards, idx in self.indexes.items():
            for world in WORLDS:
                for drop_last in (False, True):
                    label = (shards, world, drop_last)
                    ds, e0 = self.job_sampler_orders(idx, world, 0, drop_last)
                    self.check_shares(e0, n, world, drop_last, label)
                    # A new assignment of shards to ranks each epoch (seeded
                    # shard order): over six epochs, not always the same.
                    assignments = {tuple(frozenset(s) for s in e0)}
                    for epoch in range(1, 6):
                        _, e = self.job_sampler_orders(idx, world, epoch, drop_last)
                        self.check_shares(e, n, world, drop_last, label)
                        assignments.add(tuple(frozenset(s) for s in e))
                    self.assertGreater(len(assignments), 1, label)
                    # Blocks of 8 neighbours: most steps stay in one shard.
                    for order in e0:
                        same = sum(ds.placements[a][0] == ds.placements[b][0]
                                   for a, b in zip(order, order[1:]))
                        self.assertGreaterEqual(same, (len(order) - 1) * 0.6, label)
        # The same in another process (another hash seed): no communication.
        script = (
            "import sys, shardfs.torch as st\n"
            "ds = st.SampleDataset(sys.argv[1])\n"
            "s = st.JobSampler(ds, rank=2, world=3, seed=11, block=8)\n"
            "s.set_epoch(1)\n"
            "print(list(s))\n")
        env = dict(os.environ, PYTHONHASHSEED="12345")
        p = subprocess.run([sys.executable, "-c", script, self.indexes[5]], env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        _, e1 = self.job_sampler_orders(self.indexes[5], 3, 1)
        self.assertEqual(p.stdout.strip(), str(e1[2]))

    def stream_epoch(self, idx, world, epoch, workers=2, batch=5):
        """Per rank: the keys its DataLoader yielded, by worker pid, and its
        batch count."""
        import torch.utils.data
        import shardfs.torch as st
        out = []
        for r in range(world):
            stream = st.SampleStream(idx, rank=r, world=world, seed=5, shuffle_buffer=16,
                                     decode=lambda item: (item["__key__"], os.getpid(),
                                                          len(item["jpg"])))
            stream.set_epoch(epoch)
            loader = torch.utils.data.DataLoader(
                stream, batch_size=batch, num_workers=workers, multiprocessing_context="fork",
                collate_fn=lambda b: b, timeout=120, worker_init_fn=stack_if_stuck)
            by_pid, batches = {}, 0
            for b in loader:
                batches += 1
                for key, pid, size in b:
                    by_pid.setdefault(pid, []).append(key)
                    self.assertEqual(size, os.path.getsize(os.path.join(self.src, key + ".jpg")))
            out.append((by_pid, batches, len(stream)))
        return out

    def test_sample_stream(self):
        n = len(self.keys)
        for shards, idx in self.indexes.items():
            for world in (3, 4):
                label = (shards, world)
                e0 = self.stream_epoch(idx, world, 0)
                shares = [[k for keys in by_pid.values() for k in keys] for by_pid, _, _ in e0]
                self.check_shares(shares, n, world, False, label)
                self.assertEqual(len({b for _, b, _ in e0}), 1, label)  # Equal steps.
                self.assertEqual({c for _, _, c in e0}, {-(-n // world)}, label)
                for by_pid, _, _ in e0:
                    self.assertEqual(len(by_pid), 2, label)
                    a, b = (set(v) for v in by_pid.values())
                    self.assertEqual(a & b, set(), label)  # No sample read by two workers.
                # Each epoch a new shard order across the job: over six
                # epochs, rank 0 does not always read the same samples.
                import shardfs.torch as st
                stream = st.SampleStream(idx, rank=0, world=world, seed=5)
                seen = set()
                for epoch in range(6):
                    stream.set_epoch(epoch)
                    seen.add(frozenset(stream.worker_share(0, 1)))
                self.assertGreater(len(seen), 1, label)

    def test_stream_epoch_reaches_persistent_workers(self):
        """set_epoch in the main process reaches workers started once
        (persistent_workers=True): each epoch its own order, every epoch the
        rank's whole share."""
        import torch.utils.data
        import shardfs.torch as st
        stream = st.SampleStream(self.indexes[5], rank=0, world=2, seed=5, shuffle_buffer=8,
                                 decode=lambda item: item["__key__"])
        loader = torch.utils.data.DataLoader(
            stream, batch_size=4, num_workers=2, multiprocessing_context="fork",
            persistent_workers=True, collate_fn=lambda b: b, timeout=120,
            worker_init_fn=stack_if_stuck)
        epochs = []
        for epoch in range(3):
            stream.set_epoch(epoch)
            epochs.append([k for batch in loader for k in batch])
            want = []
            for w in range(2):
                want += [stream.samples[i][0] for i in stream.worker_share(w, 2)]
            self.assertEqual(sorted(epochs[-1]), sorted(want), epoch)
        self.assertEqual(len({tuple(e) for e in epochs}), 3)

    def test_stream_workers_read_runs_in_order(self):
        """Each worker's share is a run of the job's order: its samples lie
        in at most two shards more than its share of them, each read by
        ascending offset."""
        import shardfs.torch as st
        stream = st.SampleStream(self.indexes[5], rank=1, world=2, seed=5)
        for w in range(2):
            share = stream.worker_share(w, 2)
            runs = 1 + sum(stream.placements[a][0] != stream.placements[b][0]
                           for a, b in zip(share, share[1:]))
            self.assertLessEqual(runs, 5 // 4 + 2)
            for a, b in zip(share, share[1:]):
                if stream.placements[a][0] == stream.placements[b][0]:
                    self.assertLess(stream.placements[a][1], stream.placements[b][1])

    def test_epoch_sampler_equal_counts(self):
        import shardfs.torch as st
        n = 241
        for world in WORLDS:
            for drop_last in (False, True):
                shares = []
                for r in range(world):
                    s = st.EpochSampler(n, seed=2, rank=r, world=world, drop_last=drop_last)
                    shares.append(list(s))
                    self.assertEqual(len(s), len(shares[-1]))
                want = n // world if drop_last else -(-n // world)
                self.assertEqual({len(s) for s in shares}, {want})
                union = set().union(*(set(s) for s in shares))
                self.assertEqual(len(union) == n, not drop_last or n % world == 0)


if __name__ == "__main__":
    tl.main()
