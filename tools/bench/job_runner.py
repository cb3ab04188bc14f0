"""Runs a distributed training job of job_rank.py on this node and follows its epochs: what
`shardfs_bench.py --job` measures and tests/integration/test_distributed_job.py asserts.

run_job() starts WORLD ranks (torch.distributed over gloo on 127.0.0.1, a spare port), each a
process of `python` running job_rank.py with the given arguments; after each epoch the ranks
meet and rank 0 waits for this process's go (job_rank.meet), so that what the storage served
in each epoch (`served()`, e.g. a counting proxy's bytes) is read between epochs. Stops only
the ranks it started, by PID, also on failure. Python 3 standard library only.
"""

import json
import os
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_RANK = os.path.join(HERE, "job_rank.py")


class JobFailed(Exception):
    pass


def spare_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(python, world, args, scratch, env=None, served=None, epochs=2, timeout=300.0):
    """Runs job_rank.py with `args` (a list) on `world` ranks. Returns ([per rank: its
    rank-R.json], [per epoch: served() at its end minus at its start], seconds in all).
    Raises JobFailed with the failing rank's log."""
    os.makedirs(scratch, exist_ok=True)
    out = os.path.join(scratch, "out")
    sync = os.path.join(scratch, "sync")
    os.makedirs(out)
    os.makedirs(sync)
    env = dict(env if env is not None else os.environ, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(spare_port()), WORLD_SIZE=str(world))
    argv = [python, JOB_RANK, "--out", out, "--sync", sync, "--epochs", str(epochs)] + args
    logs, procs = [], []
    start = time.monotonic()
    try:
        for r in range(world):
            logs.append(open(os.path.join(out, f"rank-{r}.log"), "w+"))
            procs.append(subprocess.Popen(argv, env=dict(env, RANK=str(r)),
                                          stdin=subprocess.DEVNULL, stdout=logs[-1],
                                          stderr=subprocess.STDOUT))
        per_epoch = _follow(procs, logs, sync, epochs, served, start + timeout)
        for r, p in enumerate(procs):
            if p.returncode != 0:
                raise JobFailed(f"rank {r} exited {p.returncode}:\n{_tail(logs[r])}")
        results = []
        for r in range(world):
            with open(os.path.join(out, f"rank-{r}.json")) as f:
                results.append(json.load(f))
        return results, per_epoch, time.monotonic() - start
    finally:
        for p in procs:  # Only the ranks started here, by PID.
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
        for f in logs:
            f.close()


def _tail(f):
    f.flush()
    f.seek(0)
    return f.read()[-4000:]


def _follow(procs, logs, sync, epochs, served, deadline):
    per_epoch = []
    before = served() if served else 0
    for epoch in range(epochs):
        done = os.path.join(sync, f"done-{epoch}")
        while not os.path.exists(done):
            for r, p in enumerate(procs):
                if p.poll() is not None and p.returncode != 0:
                    raise JobFailed(f"rank {r} exited {p.returncode}:\n{_tail(logs[r])}")
            if time.monotonic() > deadline:
                raise JobFailed(f"epoch {epoch} did not end in time:\n{_tail(logs[0])}")
            time.sleep(0.02)
        now = served() if served else 0
        per_epoch.append(now - before)
        before = now
        with open(os.path.join(sync, f"go-{epoch}"), "w") as f:
            f.write("go\n")
    for p in procs:
        p.wait(timeout=max(1.0, deadline - time.monotonic()))
    return per_epoch


def chunk_files(cache_root):
    """(count, bytes) of the chunk files under `cache_root` (every cache directory in it)."""
    n = size = 0
    for d, _, fs in os.walk(cache_root):
        for f in fs:
            if f.endswith(".chunk"):
                n += 1
                size += os.lstat(os.path.join(d, f)).st_size
    return n, size
