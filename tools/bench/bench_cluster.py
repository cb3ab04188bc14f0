"""`shardfs_bench.py --cluster`: the cluster rehearsal on one machine at a large
size. tests/integration/test_cluster_rehearsal.py runs the same rig (cluster_rig.py) at CI
size with assertions; this mode measures and reports.

1. Dataset: the --loader mode's real JPEGs (bench_loader.jpeg_dataset, cached in the work dir),
   written in a seeded shuffled order into GNU tar shards of --shard-size, so that every shard
   holds samples of many classes, as training shards do (shards in tree order would give each
   rank a few classes only, and ImageFolder on each rank other class indices). Cached beside
   the dataset.
2. Store: one s3rver (SigV4 checked); the shards are uploaded to it and indexed by their
   s3:// URLs; a view leaves out the last class (--cluster-exclude).
3. Ranks: --world rank mounts of the view, each with its own cache_dir and its own fault proxy
   in front of the store (its AWS_ENDPOINT_URL_S3); one unmodified ImageFolder + DataLoader job
   per rank (cluster_loader.py under --loader-python), all started at one moment, one epoch.
   With --outage S, once every rank has read a batch, rank --outage-rank's proxy refuses
   connections for S seconds, then serves again.
4. Report: per rank samples/s, shard bytes, view bytes, requests and bytes fetched (by
   `shardfs stats` and by its proxy); aggregate samples/s from the common start to the last
   rank's end, against --required-rate; the checks (as many samples per rank, their union the
   view but the trimmed rest, disjoint, every sample the source file's bytes, a rank in at most
   shards/world + 2 shards, only the shards of a rank's samples fetched, the outage felt and
   healed while the others read on); --json writes it all.
"""

import hashlib
import json
import os
import platform
import random
import shutil
import sys
import time
import zlib

from bench_args import use_test_rig, write_report_json
from bench_common import BenchError, fmt_bytes, log, parse_size
from bench_dataset import class_names, tree_file_list
from bench_loader import jpeg_dataset
from bench_mounts import run_tool
from bench_workloads import can_drop_caches, drop_caches

use_test_rig()  # cluster_rig and remote_servers: the integration tests' rig, by path.
import cluster_rig as rig  # noqa: E402
import remote_servers  # noqa: E402

PACK_VERSION = 1
VIEW = "cluster"


def add_args(ap):
    ap.add_argument("--cluster", action="store_true",
                    help="the cluster rehearsal instead (bench_cluster.py): --world "
                    "rank mounts of one view over one s3rver, one ImageFolder + DataLoader job "
                    "per rank, an outage on one rank")
    ap.add_argument("--world", type=int, default=4, help="--cluster: rank mounts (4)")
    ap.add_argument("--outage", type=float, default=5.0,
                    help="--cluster: seconds one rank's path to the store is down (5; 0: none)")
    ap.add_argument("--outage-rank", type=int, default=2, help="--cluster: that rank (2)")
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="--cluster: a training step per batch, slept by each job (0)")
    ap.add_argument("--cluster-exclude", metavar="GLOB",
                    help="--cluster: what the view leaves out (default: the last class)")


def finish_args(a, ap):
    if a.views or a.remote or a.loader:
        ap.error("--cluster, --loader, --views and --remote are separate runs")
    try:
        workers = [int(x) for x in a.loader_workers.split(",") if x.strip()]
    except ValueError:
        workers = []
    if len(workers) != 1 or workers[0] < 0:
        ap.error("--cluster: --loader-workers takes one number")
    a.loader_workers = workers[0]
    if a.world < 1 or not 0 <= a.outage_rank < a.world:
        ap.error("--cluster: --world must be positive and --outage-rank below it")
    if a.outage < 0 or a.step_seconds < 0 or a.required_rate < 0 or a.loader_batch < 1:
        ap.error("--cluster: --outage, --step-seconds, --required-rate must not be negative")
    a.files = a.files or 100_000
    a.workdir = a.workdir or f"/var/tmp/shardfs-bench-loader-{a.files}-{a.seed}"
    parse_size(a.chunk_size)


def shuffled_pack(a, ddir, tree, scratch):
    """The tree's files in a seeded shuffled order, cut into GNU tar shards of about
    --shard-size (`tar --no-recursion -T LIST` each; the index makes the directories), cached
    in ddir. `shardfs pack` would store them depth-first, whatever the list's order. Returns
    (shards, seconds, cached)."""
    key = hashlib.sha256(json.dumps({"v": PACK_VERSION, "shard_size": a.shard_size,
                                     "seed": a.seed}).encode()).hexdigest()[:12]
    out = os.path.join(ddir, f"cluster-shards-{key}")
    done = os.path.join(out, "shards.json")
    if os.path.exists(done):
        with open(done) as f:
            rec = json.load(f)
        log(f"shards: reusing {len(rec['shards'])} shuffled shards in {out}")
        return [os.path.join(out, n) for n in rec["shards"]], rec["seconds"], True
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    files = tree_file_list(tree)
    random.Random(a.seed).shuffle(files)
    limit = parse_size(a.shard_size)
    groups, cur, cur_bytes = [], [], 1024
    for rel in files:
        size = 512 + -(-os.path.getsize(os.path.join(tree, rel)) // 512) * 512
        if cur and cur_bytes + size > limit:
            groups.append(cur)
            cur, cur_bytes = [], 1024
        cur.append(rel)
        cur_bytes += size
    groups.append(cur)
    log(f"shards: {len(files):,} files in a shuffled order into {len(groups)} tar shards")
    start = time.perf_counter()
    shards = []
    for i, group in enumerate(groups):
        list_path = os.path.join(scratch, f"shard-{i:06d}.list")
        with open(list_path, "w") as f:
            f.writelines(p + "\n" for p in group)
        shard = os.path.join(out, f"train-{i:06d}.tar")
        rc, _, err, _ = run_tool(["tar", "--format=gnu", "-cf", shard, "-C", tree,
                                  "--no-recursion", "-T", list_path], timeout=a.phase_timeout)
        if rc != 0:
            raise BenchError(f"tar of shard {i} exited {rc}: {err.decode(errors='replace')}")
        shards.append(shard)
    secs = time.perf_counter() - start
    with open(done, "w") as f:
        json.dump({"shards": [os.path.basename(s) for s in shards], "seconds": secs}, f)
    return shards, secs, False


def source_digests(tree, paths):
    """{path: (size, crc32)} of the loose tree's files: the reference for every sample."""
    out = {}
    for p in paths:
        with open(os.path.join(tree, p), "rb") as f:
            data = f.read()
        out[p] = (len(data), zlib.crc32(data))
    return out


def run_cluster(a, scratch):
    ddir, meta = jpeg_dataset(a, scratch)
    tree = os.path.join(ddir, "tree")
    shards, pack_s, pack_cached = shuffled_pack(a, ddir, tree, scratch)
    if len(shards) < a.world:
        raise BenchError(f"{len(shards)} shards for {a.world} ranks: a rank would hold "
                         "nothing; lower --shard-size (a few shards per rank balance best)")
    try:
        return run_store_and_ranks(a, scratch, ddir, meta, shards, pack_s, pack_cached)
    except RuntimeError as e:  # The rig's: a server, mount or job that failed.
        raise BenchError(str(e))


def store_and_view(a, scratch, s3, shards, build, exclude):
    """Uploads the shards to the store, builds the index over it and creates the view without
    `exclude`; returns (index, the view's files, the shard table)."""
    t = time.perf_counter()
    rig.upload_shards(s3, shards, "train/")
    build["upload_seconds"] = time.perf_counter() - t
    log(f"store: {len(shards)} shards ({fmt_bytes(build['shard_bytes'])}) uploaded to "
        f"s3rver in {build['upload_seconds']:.1f} s")
    index = os.path.join(scratch, "cluster.idx")
    t = time.perf_counter()
    rig.build_s3_index(a.shardfs, s3, "train/", index, timeout=a.phase_timeout)
    build["index_build_seconds"] = time.perf_counter() - t
    rc, _, err, _ = run_tool([a.shardfs, "view", "create", index, VIEW, "--exclude",
                              exclude, "-m", "bench --cluster"])
    if rc != 0:
        raise BenchError(f"view create exited {rc}: {err.decode(errors='replace')}")
    files = rig.view_files(a.shardfs, index, VIEW)
    table = rig.shard_table(a.shardfs, index)
    log(f"view {VIEW}: {len(files):,} files without {exclude}; index built in "
        f"{build['index_build_seconds']:.1f} s")
    return index, files, table


def run_loader_jobs(a, cl, work):
    """One loader per rank mount, released together, with --outage seconds of one rank's path
    to the store down after the first batch. Returns (ready, done, batches per rank, go time,
    (outage start, end) or None)."""
    outage = None
    roots = [os.path.join(m, "train") for m in cl.mountpoints]
    with rig.LoaderJobs(roots, work, python=a.loader_python, workers=a.loader_workers,
                        batch=a.loader_batch, step=a.step_seconds, seed=a.seed) as jobs:
        ready = jobs.wait_ready(a.phase_timeout)
        log(f"{a.world} ranks mounted, {a.world} loaders ready; go")
        jobs.go()
        if a.outage > 0:
            jobs.wait_for("batch", a.phase_timeout)
            proxy = cl.proxies[a.outage_rank]
            t0 = time.monotonic()
            proxy.down()
            log(f"outage: rank {a.outage_rank}'s path to the store down for {a.outage:g} s")
            time.sleep(a.outage)
            proxy.up()
            outage = (t0, time.monotonic())
        done = jobs.wait_done(a.phase_timeout)
        batches = [jobs.batches(k) for k in range(a.world)]
        return ready, done, batches, jobs.go_time, outage


def run_store_and_ranks(a, scratch, ddir, meta, shards, pack_s, pack_cached):
    """The store, the index and view over it, the rank mounts and their loaders; then every
    sample checked against the loose tree and the report. 1 if a check FAILED."""
    tree = os.path.join(ddir, "tree")
    build = {"pack_seconds": pack_s, "pack_cached": pack_cached, "shards": len(shards),
             "shard_bytes": sum(os.path.getsize(s) for s in shards)}
    exclude = a.cluster_exclude or class_names(a.classes)[-1]
    can_cold, why = can_drop_caches()
    notes = [] if can_cold else [f"store not cold: {why}"]
    work = os.path.join(scratch, "cluster")
    os.makedirs(work)
    opts = f"chunk_size={a.chunk_size}" + (f",{a.mount_options}" if a.mount_options else "")
    with remote_servers.S3Server() as s3:
        index, files, table = store_and_view(a, scratch, s3, shards, build, exclude)
        if can_cold:
            drop_caches()
        with rig.Cluster(a.shardfs, index, s3, work, world=a.world, view=VIEW, seed=a.seed,
                         options=opts) as cl:
            ready, done, batches, go_time, outage = run_loader_jobs(a, cl, work)
            stats = [cl.stats(k) for k in range(a.world)]
            alive = [m.proc is not None and m.proc.poll() is None for m in cl.mounts]
            summary = rig.summarize(files, table, done, stats, cl.proxies, go_time, "train")
            bucket = s3.bucket
    if outage:
        summary["outage"] = {"rank": a.outage_rank, "from_s": outage[0] - go_time,
                             "to_s": outage[1] - go_time}
        summary["timeline"] = rig.timeline(batches, outage)
    log("checking every sample against the loose tree")
    source = source_digests(os.path.join(tree, "train"), [p[len("train/"):] for p in files])
    checks = cluster_checks(a, files, table, ready, done, summary, source, stats, alive,
                            batches, outage, bucket)
    report = {
        "schema": "shardfs-bench-cluster/1",
        "params": {"files": a.files, "classes": a.classes, "seed": a.seed, "world": a.world,
                   "workers": a.loader_workers, "batch": a.loader_batch,
                   "step_seconds": a.step_seconds, "outage": a.outage,
                   "outage_rank": a.outage_rank, "shard_size": a.shard_size,
                   "chunk_size": a.chunk_size, "mount_options": opts, "exclude": exclude,
                   "required_rate": a.required_rate, "workdir": a.workdir},
        "environment": {"root": os.geteuid() == 0, "cold_store": can_cold,
                        "cpus": os.cpu_count(), "kernel": platform.release(),
                        "loader_python": a.loader_python, "notes": notes},
        "dataset": {k: meta[k] for k in ("samples", "bytes")} | {"cached": meta.get("cached")},
        "build": build,
        "view": {"name": VIEW, "files": len(files),
                 "bytes": sum(s for s, _ in files.values())},
        "summary": summary,
        "checks": checks,
        "required": None if not a.required_rate else {
            "rate": a.required_rate, "aggregate": summary["samples_per_s"],
            "met": (summary["samples_per_s"] or 0) >= a.required_rate},
    }
    write_report_json(a.json_out, report)
    print_cluster_report(report)
    return 0 if all(c["status"] != "FAILED" for c in checks) else 1


def cluster_checks(a, files, table, ready, done, summary, source, stats, alive, batches,
                   outage, bucket):
    """The rehearsal's claims, each {check, status, detail}; status: ok, FAILED, `NOT met`
    (a soft claim, which fails no run) or `not shown` (the outage outlasted the others'
    epochs)."""
    out = []

    def check(name, ok, detail="", shown=True, soft=False):
        # soft: what the targets ask to show but the rank partition does not promise.
        bad = "NOT met" if soft else "FAILED"
        out.append({"check": name, "status": "not shown" if not shown else
                    ("ok" if ok else bad), "detail": detail})

    want_classes = sorted({p.split("/")[1] for p in files})
    bad = {k: sorted(set(want_classes) ^ set(r["classes"])) for k, r in enumerate(ready)
           if r["classes"] != want_classes}
    check("every rank's ImageFolder has the view's classes", not bad,
          "; ".join(f"rank {k} differs in {v}" for k, v in bad.items()))
    owner, twice, wrong = {}, 0, 0
    for k, d in enumerate(done):
        for rel, size, crc, _t in d["samples"]:
            path = "train/" + rel
            twice += path in owner
            owner[path] = k
            wrong += source.get(rel) != (size, crc)
    world = len(done)
    counts = [len(d["samples"]) for d in done]
    check("every rank read len(view) // world samples (a sample is one file here)",
          set(counts) == {len(files) // world}, f"per rank {counts}")
    check("union of the samples = the view but the trimmed rest",
          set(owner) <= set(files) and len(set(files) - set(owner)) == len(files) % world,
          f"{len(owner):,} read, {len(files):,} in the view")
    check("no sample on two ranks", twice == 0, f"{twice} read twice")
    check("every sample is the source file's bytes", wrong == 0, f"{wrong} differ")
    ranks = summary["ranks"]
    most = len(table) // world + 2
    wide = [r["rank"] for r in ranks if len(r["shard_ids"]) > most]
    check(f"each rank's samples in at most shards/world + 2 = {most} shards", not wide,
          f"ranks {wide}")
    foreign = []
    for r in ranks:
        mine = {f"/{bucket}/train/{os.path.basename(table[i][0])}" for i in r["shard_ids"]}
        fetched = {s["shard_id"] for s in stats[r["rank"]]["shards"] if s["bytes_fetched"]}
        if not set(r["proxy_paths"]) <= mine or not fetched <= set(r["shard_ids"]):
            foreign.append(r["rank"])
    check("each rank fetched only its own shards", not foreign, f"ranks {foreign}")
    over = [r["rank"] for r in ranks if r["bytes_fetched"] > r["shard_bytes"]]
    check("bytes fetched <= the rank's shard bytes", not over, f"ranks {over}")
    failed = [r["rank"] for r in ranks if r["fetch_errors"]]
    check("no read failed", not failed, f"ranks {failed}")
    check("the same daemons throughout (no remount)", all(alive), f"alive {alive}")
    if outage:
        hit = ranks[a.outage_rank]
        check("the outage reached its rank (retries)", hit["retries"] > 0,
              f"{hit['retries']} retries")
        still = [k for k in range(a.world) if k != a.outage_rank
                 and not any(outage[0] < b["t"] < outage[1] for b in batches[k])]
        ended = [k for k in still if batches[k] and batches[k][-1]["t"] <= outage[0]]
        check("the other ranks read batches during the outage", not still,
              f"ranks without a batch: {still}", shown=not ended)
    return out


def print_cluster_report(report, out=sys.stdout):
    p, b, v, env = report["params"], report["build"], report["view"], report["environment"]
    w = out.write
    w(f"\nshardfs bench --cluster ({p['world']} rank mounts of one view over one s3rver)\n")
    d = report["dataset"]
    w(f"  dataset: {d['samples']:,} JPEGs, {fmt_bytes(d['bytes'])}, {p['classes']} classes, "
      f"seed {p['seed']}{' (cached)' if d.get('cached') else ''}\n")
    w(f"  shards:  {b['shards']} ({fmt_bytes(b['shard_bytes'])}), shuffled, written in "
      f"{b['pack_seconds']:.1f} s{' (cached)' if b['pack_cached'] else ''}, upload "
      f"{b['upload_seconds']:.1f} s, index build over s3:// {b['index_build_seconds']:.1f} s\n")
    w(f"  view:    {v['name']}: {v['files']:,} files, {fmt_bytes(v['bytes'])} "
      f"(without {p['exclude']})\n")
    w(f"  jobs:    ImageFolder + DataLoader, {p['workers']} workers, batch {p['batch']}, "
      f"step {p['step_seconds']:g} s; mounts -o {p['mount_options']}\n")
    w(f"  machine: {env['cpus']} CPUs, kernel {env['kernel']}; store "
      f"{'cold (caches dropped)' if env['cold_store'] else 'not cold'}\n")
    for n in env["notes"]:
        w(f"  note: {n}\n")
    w("\n" + rig.format_summary(report["summary"], parse_size(p["chunk_size"]),
                                p["required_rate"]) + "\n")
    w("\nchecks\n")
    for c in report["checks"]:
        w(f"  {c['check']:<56} {c['status']:<9} {c['detail']}\n")
    w("\n")
    out.flush()
