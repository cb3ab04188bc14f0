"""`shardfs_bench.py --job`: a training job as a whole, ranks x forked DataLoader workers x
epochs, on network storage and on local disk.

Dataset: --samples samples in --classes class folders, each a .jpg of random bytes (--kib KiB
on average, incompressible) and a small .json, packed by `shardfs pack --shuffle` (every shard
holds samples of nearly every class) into --shards shards with their index. On the network
rig (the integration tests' sshfs over a loopback sshd behind a delay proxy of --rtt ms,
netfs_testlib.NetFs; its proxy counts the bytes the server sends) the loose tree and the pack
are copied into the server's export and read through sshfs; on local disk, from the work dir.

For each storage, each --worlds W and each --paths path: a job of W ranks (torch.distributed,
gloo, this node; job_rank.py started by job_runner.py), --workers forked DataLoader workers
each, --epochs epochs, --batch samples a step and one all-reduce per step. The paths:
  loose    torch's DistributedSampler over the loose .jpg files (the baseline);
  mount    one default `shardfs mount` of the index that the node's ranks share, with torch's
           DistributedSampler over its .jpg files;
  sampler  the Python package: SampleDataset + JobSampler;
  stream   the Python package: SampleStream.
Each job starts cold: page cache dropped (client and server share this kernel), an empty
node-local cache ($XDG_CACHE_HOME of the run), a fresh mount. Per epoch: samples/s of the job
(every rank's samples over the slowest rank's seconds) and per rank (the mean), the server's
bytes (network rig), and after the job the chunk files the node-local cache holds (what was
fetched once for the node). Every item is checked (crc32 of its bytes against the source's),
every rank must take the same number of steps and every sample be read each epoch, else the
row is FAILED and the exit status 1. Needs root (drop_caches; sshd and sshfs).

Usage (after `ninja -C build`):
    python3 tools/bench/shardfs_bench.py --job [--samples 2000] [--worlds 3,4] [--rtt 1]
        [--storage netfs,local] [--paths loose,mount,sampler,stream] [--json out.json]
"""

import argparse
import os
import platform
import random
import shutil
import subprocess
import sys
import zlib

from bench_args import (add_binary_args, add_json_arg, add_seed_arg, add_workdir_arg,
                        resolve_binaries, use_test_rig, write_report_json)
from bench_common import BenchError, fmt_bytes, log
from bench_mounts import Mount, run_in_scratch
from bench_workloads import can_drop_caches, drop_caches
import job_runner

PATHS = ("loose", "mount", "sampler", "stream")
STORAGES = ("netfs", "local")
MOUNT_TIMEOUT_S = 60


def parse_job_args(argv):
    ap = argparse.ArgumentParser(prog="shardfs_bench.py --job",
                                 description="A training job as a whole: ranks x workers x "
                                 "epochs, on network storage and local disk.")
    ap.add_argument("--job", action="store_true", required=True)
    ap.add_argument("--samples", type=int, default=2000, help="samples (2000)")
    ap.add_argument("--kib", type=int, default=40, help="mean .jpg size in KiB (40)")
    ap.add_argument("--classes", type=int, default=20, help="class folders (20)")
    ap.add_argument("--shards", type=int, default=8, help="shards, about (8)")
    ap.add_argument("--worlds", default="3,4", help="ranks per job, a list (3,4)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank (2)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs (2)")
    ap.add_argument("--batch", type=int, default=16, help="samples per step (16)")
    ap.add_argument("--rtt", type=float, default=1.0, help="network round trip in ms (1)")
    ap.add_argument("--storage", default="netfs,local", help="netfs, local or both")
    ap.add_argument("--paths", default=",".join(PATHS), help="what reads: " + ",".join(PATHS))
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                    else sys.executable, help="the ranks' interpreter, with torch")
    add_binary_args(ap)
    add_json_arg(ap)
    add_seed_arg(ap)
    add_workdir_arg(ap, "where the dataset and the runs go (/var/tmp/shardfs-bench-job-...)")
    a = ap.parse_args(argv)
    resolve_binaries(a)
    a.worlds = [int(x) for x in a.worlds.split(",") if x.strip()]
    a.paths = [x.strip() for x in a.paths.split(",") if x.strip()]
    a.storage = [x.strip() for x in a.storage.split(",") if x.strip()]
    bad = [x for x in a.paths if x not in PATHS] + [x for x in a.storage if x not in STORAGES]
    if bad or not a.worlds or min(a.worlds) < 1 or a.samples < max(a.worlds):
        ap.error(f"bad --paths, --storage or --worlds ({', '.join(bad) or 'worlds'})")
    a.workdir = a.workdir or f"/var/tmp/shardfs-bench-job-{a.samples}-{a.kib}-{a.seed}"
    return a


def make_dataset(a, root):
    """The loose tree under root/tree and its pack under root/pack; {key: crc32}."""
    tree = os.path.join(root, "tree")
    rnd = random.Random(a.seed)
    crcs = {}
    shutil.rmtree(tree, ignore_errors=True)
    for i in range(a.samples):
        c = i % a.classes
        key = f"c{c:03d}/{i:07d}"
        os.makedirs(os.path.join(tree, f"c{c:03d}"), exist_ok=True)
        size = max(1, int(a.kib * 1024 * rnd.uniform(0.5, 1.5)))
        data = rnd.randbytes(size)
        with open(os.path.join(tree, key + ".jpg"), "wb") as f:
            f.write(data)
        with open(os.path.join(tree, key + ".json"), "wb") as f:
            f.write(b'{"class": %d}' % c)
        crcs[key] = zlib.crc32(data)
    pack = os.path.join(root, "pack")
    shutil.rmtree(pack, ignore_errors=True)
    total = a.samples * a.kib * 1024
    shard_size = max(1 << 20, total // a.shards)
    subprocess.run([a.shardfs, "pack", tree, "--out", pack, "--shuffle", str(a.seed),
                    "--shard-size", str(shard_size), "--quiet"], check=True)
    return tree, pack, crcs


def pack_bytes(pack):
    shards = sum(os.path.getsize(os.path.join(pack, n)) for n in os.listdir(pack)
                 if n.endswith(".tar"))
    index = sum(os.path.getsize(os.path.join(d, f))
                for d, _, fs in os.walk(os.path.join(pack, "index")) for f in fs)
    return shards, index


def check_job(results, crcs, world):
    """None if every rank took the same steps and every sample was read with its bytes right
    in every epoch; else what went wrong."""
    for epoch in range(len(results[0]["steps"])):
        steps = {r["steps"][epoch] for r in results}
        if len(steps) != 1:
            return f"epoch {epoch}: unequal steps {sorted(steps)}"
        seen = set()
        for r in results:
            for key, crc in r["items"][epoch]:
                if crcs.get(key) != crc:
                    return f"epoch {epoch}: {key} read wrong"
                seen.add(key)
        if seen != set(crcs):
            return f"epoch {epoch}: {len(set(crcs) - seen)} samples not read"
    return None


def epoch_figures(results, epoch):
    items = [len(r["items"][epoch]) for r in results]
    secs = [r["seconds"][epoch] for r in results]
    return {"job_samples_per_s": sum(items) / max(secs),
            "rank_samples_per_s": sum(i / s for i, s in zip(items, secs)) / len(items),
            "seconds": max(secs), "steps": results[0]["steps"][epoch]}


class Storage:
    """Where the runs read from: local disk, or the network rig (its paths under an sshfs
    mount, its served() the bytes the server sent)."""

    def __init__(self, a, kind, scratch, tree, pack):
        self.kind = kind
        self.netfs = None
        self.tree, self.index = tree, os.path.join(pack, "index")
        self.served = None
        if kind == "netfs":
            use_test_rig()
            from netfs_testlib import NetFs
            self.netfs = NetFs(rtt_ms=a.rtt, parent=scratch)
            self.netfs.__enter__()
            shutil.copytree(tree, os.path.join(self.netfs.export, "tree"))
            shutil.copytree(pack, os.path.join(self.netfs.export, "pack"))
            self.net = os.path.join(scratch, "net")
            os.makedirs(self.net)
            self.sshfs = self.netfs.mount(self.net)
            self.tree = os.path.join(self.net, "tree")
            self.index = os.path.join(self.net, "pack", "index")
            self.served = self.netfs.proxy.bytes_down

    def close(self):
        if self.netfs is not None:
            self.netfs.__exit__(None, None, None)
            self.netfs = None


def run_one(a, st, path, world, scratch, crcs, n):
    """One cold job; its row."""
    run = os.path.join(scratch, f"{st.kind}-{path}-{world}")
    xdg = os.path.join(run, "xdg")
    os.makedirs(xdg, mode=0o700)
    drop_caches()
    env = dict(os.environ, XDG_CACHE_HOME=xdg,
               PYTHONPATH=os.path.join(a.build_dir, "src", "python"))
    args = ["--workers", str(a.workers), "--batch", str(a.batch), "--seed", str(a.seed)]
    mount = None
    if path == "loose":
        args += ["--mode", "tree", "--tree", st.tree]
    elif path == "mount":
        mnt = os.path.join(run, "mnt")
        os.makedirs(mnt)
        mount = Mount("shardfs", mnt, [a.shardfs, "mount", "-f", st.index, mnt], "fuse3",
                      os.path.join(run, "mount.log"))
        os.environ["XDG_CACHE_HOME"] = xdg  # The daemon's node-local cache.
        mount.mount(MOUNT_TIMEOUT_S)
        args += ["--mode", "tree", "--tree", mnt]
    else:
        args += ["--mode", path, "--index", st.index]
    try:
        results, served, _ = job_runner.run_job(a.python, world, args, run, env=env,
                                                served=st.served, epochs=a.epochs,
                                                timeout=3600.0)
    finally:
        if mount is not None:
            mount.unmount()
    chunks, chunk_bytes = job_runner.chunk_files(xdg)
    row = {"storage": st.kind, "path": path, "world": world, "workers": a.workers,
           "epochs": [epoch_figures(results, e) for e in range(a.epochs)],
           "server_bytes": served if st.served else None,
           "cache_chunk_files": chunks, "cache_chunk_bytes": chunk_bytes,
           "problem": check_job(results, crcs, world), "samples": n}
    log(f"{st.kind} {path} x{world}: " + ", ".join(
        f"epoch {i + 1} {e['job_samples_per_s']:.0f} samples/s" for i, e in
        enumerate(row["epochs"])) + (f", server {[fmt_bytes(b) for b in served]}"
                                     if st.served else "") + (f"; {row['problem']}"
                                                              if row["problem"] else ""))
    return row


def print_job_report(rep):
    shards = rep["dataset"]["shard_bytes"]
    print(f"\njob: ranks x {rep['params']['workers']} workers x {rep['params']['epochs']} "
          f"epochs, {rep['dataset']['samples']} samples, shards {fmt_bytes(shards)}; "
          f"network rig at {rep['params']['rtt_ms']} ms")
    print(f"{'storage':7} {'path':8} {'ranks':>5} {'job/s e1':>9} {'job/s e2':>9} "
          f"{'rank/s e1':>9} {'x loose':>8} {'server e1':>10} {'server e2':>10} {'chunks':>7}")
    for row in rep["rows"]:
        e = row["epochs"]
        loose = next((r for r in rep["rows"] if r["storage"] == row["storage"]
                      and r["world"] == row["world"] and r["path"] == "loose"), None)
        ratio = (f"{e[0]['job_samples_per_s'] / loose['epochs'][0]['job_samples_per_s']:.2f}x"
                 if loose else "-")
        sb = row["server_bytes"] or []
        cells = [f"{b / shards:.2f}x" for b in sb[:2]] + ["-"] * (2 - len(sb[:2]))
        print(f"{row['storage']:7} {row['path']:8} {row['world']:>5} "
              f"{e[0]['job_samples_per_s']:>9.0f} {e[-1]['job_samples_per_s']:>9.0f} "
              f"{e[0]['rank_samples_per_s']:>9.0f} {ratio:>8} {cells[0]:>10} {cells[1]:>10} "
              f"{row['cache_chunk_files']:>7}" + (f"  FAILED: {row['problem']}"
                                                  if row["problem"] else ""))
    print("server: the bytes the server sent in the epoch, times the shards' bytes (loose: "
          "the loose files'); chunks: chunk files in the node-local cache after the job")


def main_job(argv):
    a = parse_job_args(argv)
    ok, why = can_drop_caches()
    if not ok:
        raise SystemExit(f"shardfs_bench.py --job: needs cold runs: {why}")
    os.makedirs(a.workdir, exist_ok=True)

    def body(scratch):
        tree, pack, crcs = make_dataset(a, scratch)
        shard_bytes, index_bytes = pack_bytes(pack)
        rows = []
        for kind in a.storage:
            st = Storage(a, kind, scratch, tree, pack)
            try:
                for world in a.worlds:
                    for path in a.paths:
                        rows.append(run_one(a, st, path, world, scratch, crcs, len(crcs)))
            finally:
                st.close()
        rep = {"schema": "shardfs-bench-job/1",
               "params": {"samples": a.samples, "kib": a.kib, "classes": a.classes,
                          "worlds": a.worlds, "workers": a.workers, "epochs": a.epochs,
                          "batch": a.batch, "rtt_ms": a.rtt, "seed": a.seed},
               "environment": {"cpus": os.cpu_count(), "kernel": platform.release(),
                               "python": a.python},
               "dataset": {"samples": len(crcs), "shard_bytes": shard_bytes,
                           "index_bytes": index_bytes,
                           "loose_bytes": sum(os.path.getsize(os.path.join(d, f))
                                              for d, _, fs in os.walk(tree) for f in fs)},
               "rows": rows}
        print_job_report(rep)
        write_report_json(a.json_out, rep)
        return 1 if any(r["problem"] for r in rows) else 0

    try:
        return run_in_scratch(a.workdir, "run-", body)
    except BenchError as e:
        raise SystemExit(f"shardfs_bench.py --job: {e}")
