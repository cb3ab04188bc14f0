#!/usr/bin/env python3
"""One rank of a distributed training job (job_runner.py starts them: shardfs_bench.py --job,
tests/integration/test_distributed_job.py).

torch.distributed over gloo (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from
the environment), a DataLoader with --workers forked workers, --epochs
epochs, one all-reduce per step. What a rank reads, by --mode:
  sampler  shardfs.torch.SampleDataset over the whole index at --index, with
           shardfs.torch.JobSampler (set_epoch each epoch);
  stream   shardfs.torch.SampleStream over the index (set_epoch);
  tree     the .jpg files under --tree (loose files, or one shardfs mount
           that every rank of the node shares), torch's DistributedSampler
           over them.
Each item is (key, crc32 of the .jpg's bytes). After each epoch the ranks
meet at a barrier and rank 0 writes SYNC/done-E, then waits (bounded) for
SYNC/go-E from the test, which reads the server's byte count in between.
Writes OUT/rank-R.json: {"steps": [per epoch], "items": [[[key, crc], ...]
per epoch], "all_reduced": [per epoch: sum over ranks and steps of the
batch sizes], "seconds": [per epoch: from the barrier before it to this
rank's last step]}.
"""
import argparse
import datetime
import json
import os
import sys
import time
import zlib

import torch
import torch.distributed as dist
import torch.utils.data

GO_TIMEOUT_S = 120


def jpg_item(item):
    return item["__key__"], zlib.crc32(item["jpg"])


class JpgFiles(torch.utils.data.Dataset):
    """The .jpg files under `tree`, in name order: (key, crc32)."""

    def __init__(self, tree):
        self.tree = tree
        self.keys = sorted(
            os.path.relpath(os.path.join(d, f), tree)[:-len(".jpg")]
            for d, _, fs in os.walk(tree) for f in fs if f.endswith(".jpg"))

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        with open(os.path.join(self.tree, self.keys[i] + ".jpg"), "rb") as f:
            return self.keys[i], zlib.crc32(f.read())


def loader_of(a, rank, world):
    """(DataLoader, what takes set_epoch)."""
    # Persistent workers, as jobs keep them: started once, each opens the
    # index and its shards once for the whole job.
    common = dict(batch_size=a.batch, num_workers=a.workers, multiprocessing_context="fork",
                  collate_fn=lambda b: b, timeout=120, persistent_workers=a.workers > 0)
    if a.mode == "tree":
        ds = JpgFiles(a.tree)
        sampler = torch.utils.data.DistributedSampler(ds, num_replicas=world, rank=rank,
                                                      seed=a.seed)
        return torch.utils.data.DataLoader(ds, sampler=sampler, **common), sampler
    import shardfs.torch as st
    if a.mode == "sampler":
        ds = st.SampleDataset(a.index, extensions=("jpg",))
        sampler = st.JobSampler(ds, seed=a.seed)  # rank and world: torch.distributed's.
        common["collate_fn"] = lambda b: [jpg_item(x) for x in b]
        return torch.utils.data.DataLoader(ds, sampler=sampler, **common), sampler
    stream = st.SampleStream(a.index, seed=a.seed, shuffle_buffer=32, decode=jpg_item,
                             extensions=("jpg",))
    return torch.utils.data.DataLoader(stream, **common), stream


def meet(a, rank, epoch):
    """Every rank at a barrier; rank 0 tells the test and waits for its go."""
    dist.barrier()
    if rank == 0:
        with open(os.path.join(a.sync, f"done-{epoch}"), "w") as f:
            f.write("done\n")
        go = os.path.join(a.sync, f"go-{epoch}")
        end = time.monotonic() + GO_TIMEOUT_S
        while not os.path.exists(go):
            if time.monotonic() > end:
                raise SystemExit(f"rank 0: no go for epoch {epoch} within {GO_TIMEOUT_S} s")
            time.sleep(0.02)
    dist.barrier()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("sampler", "stream", "tree"), required=True)
    p.add_argument("--index")
    p.add_argument("--tree")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--out", required=True)
    p.add_argument("--sync", required=True)
    a = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=240))
    rank, world = dist.get_rank(), dist.get_world_size()
    loader, epochs_of = loader_of(a, rank, world)
    result = {"steps": [], "items": [], "all_reduced": [], "seconds": []}
    dist.barrier()
    for epoch in range(a.epochs):
        epochs_of.set_epoch(epoch)
        start = time.monotonic()
        steps, items, total = 0, [], 0
        for batch in loader:
            t = torch.tensor([len(batch)], dtype=torch.int64)
            dist.all_reduce(t)  # One collective per step: unequal steps would hang here.
            total += int(t.item())
            steps += 1
            items.extend(batch)
        result["seconds"].append(time.monotonic() - start)
        result["steps"].append(steps)
        result["items"].append(items)
        result["all_reduced"].append(total)
        meet(a, rank, epoch)
    with open(os.path.join(a.out, f"rank-{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
