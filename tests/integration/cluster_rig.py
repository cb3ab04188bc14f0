"""The cluster rehearsal's rig: one object store, `world` rank mounts of one view
of one index, one training job per rank, all on this machine. Python 3 stdlib only; shared by
tests/integration/test_cluster_rehearsal.py (small, CI) and `shardfs_bench.py --cluster`.

- S3 routing per rank: the index names its shards s3://BUCKET/KEY, and each rank's daemon is
  started with its own AWS_ENDPOINT_URL_S3, the URL of its own FaultProxy in front of the one
  s3rver. So one index serves every rank, and each rank's path to the store can be counted
  and broken (proxy.down(), proxy.up()) without touching the others'. The proxy passes Host
  unchanged, so the daemon's SigV4 signatures stay valid through it.
- The index is a parameter (`index=`): a local index directory today; a partition manifest or
  an index by URL later, with nothing else to change.

    with rs.S3Server() as s3:
        upload_shards(s3, shard_files, "train/")
        build_s3_index(shardfs, s3, "train/", idx)
        with Cluster(shardfs, idx, s3, workdir, world=4, view="v", seed=1) as cl:
            jobs = LoaderJobs(python, [m + "/train" for m in cl.mountpoints], workdir, ...)
            with jobs:
                jobs.wait_ready(); jobs.go(); ...; results = jobs.wait_done(timeout)
            stats = [cl.stats(k) for k in range(cl.world)]

Everything started here is stopped on the way out, also on failure: mounts unmounted with
fusermount3 -u, daemons and loaders ended by their own PIDs (a loader with its DataLoader
workers: the session it was started in), proxies joined.
"""

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

import remote_servers as rs
import shardfs_testlib as tl

HERE = os.path.dirname(os.path.abspath(__file__))
LOADER = os.path.join(HERE, "cluster_loader.py")
# Debian's interpreter with python3-torchvision (scripts/install-deps.sh).
LOADER_PYTHON = "/usr/bin/python3"


# -- the store and the index ----------------------------------------------------------------

def upload_shards(s3, shard_files, prefix):
    """PUTs each shard file to s3 as prefix + its base name. Returns the keys, in order."""
    keys = []
    for path in shard_files:
        key = prefix + os.path.basename(path)
        s3.put(key, path)
        keys.append(key)
    return keys


def s3_env(s3, endpoint=None):
    """The environment of a process that reaches `s3` at `endpoint` (its own address by
    default, or a proxy's): its keys, the endpoint, plain http allowed, no AWS files read."""
    env = dict(os.environ)
    env.pop("AWS_PROFILE", None)
    env.update(s3.env())
    env.update({"AWS_ENDPOINT_URL_S3": endpoint or s3.endpoint, "SHARDFS_S3_ALLOW_HTTP": "1",
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    return env


def build_s3_index(shardfs, s3, prefix, out, timeout=600):
    """`shardfs index build --out OUT s3://BUCKET/PREFIX` (every object under the prefix, in
    key order), straight to the store, not through a rank's proxy."""
    p = subprocess.run([shardfs, "index", "build", "--quiet", "--out", out,
                        "s3://%s/%s" % (s3.bucket, prefix)], env=s3_env(s3),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("index build of s3://%s/%s exited %d: %s" % (
            s3.bucket, prefix, p.returncode, p.stderr.decode(errors="replace")[-3000:]))
    return out


def shardfs_json(shardfs, *args, timeout=120):
    p = subprocess.run([shardfs] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("shardfs %s exited %d: %s" % (
            " ".join(args), p.returncode, p.stderr.decode(errors="replace")[-3000:]))
    return [json.loads(line) for line in p.stdout.decode().splitlines() if line.strip()]


def view_files(shardfs, index, view):
    """{path: (size, shard_id)} of the view's regular files, from `ls -R --json --view`."""
    return {o["path"]: (o["size"], o["shard_id"])
            for o in shardfs_json(shardfs, "ls", "-R", "--json", "--view", view, index)
            if o["type"] == "file"}


def shard_table(shardfs, index):
    """{shard_id: (location, size in bytes)} from `index info --json`."""
    return {o["shard_id"]: (o["shard"], o["size"])
            for o in shardfs_json(shardfs, "index", "info", "--json", index)[1:]}


# -- rank mounts ----------------------------------------------------------------------------

class RankMount:
    """`shardfs mount -f -o OPTS INDEX MNT` with its own environment, until stop()."""

    def __init__(self, shardfs, index, mnt, options, env, log_path, deadline=30.0):
        self.mnt = mnt
        self.log_path = log_path
        self.returncode = None
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([shardfs, "mount", "-f", "-o", options, index, mnt],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._log, env=env)
        end = time.monotonic() + deadline
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise RuntimeError("rank mount %s (-o %s) did not come up (exit %s):\n%s" % (
                    mnt, options, self.returncode, self.log()))
            time.sleep(0.02)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read()[-4000:].decode(errors="replace")

    def stop(self):
        """Unmounts and waits for the daemon; kills it by its PID if it does not end. Returns
        a problem text or None."""
        problem = tl.unmount(self.mnt)
        if self.proc is not None:
            try:
                self.returncode = self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.returncode = self.proc.wait(timeout=15)
                problem = (problem or "") + " daemon %d did not exit; killed" % self.proc.pid
            self.proc = None
        if not self._log.closed:
            self._log.close()
        return problem


class Cluster:
    """`world` rank mounts (`-o view=VIEW,rank=K,world=N,seed=S,cache_dir=OWN`) of `index`,
    rank K reaching `s3` through proxies[K]. `options` are added to every mount's -o.

    .proxies[k]      rank k's FaultProxy (counters: requests, bytes_sent, requests_per_path)
    .mountpoints[k]  rank k's mount point; .cache_dirs[k] its cache_dir
    stats(k)         `shardfs stats --json --shards` of rank k
    """

    def __init__(self, shardfs, index, s3, workdir, world=4, view="default", seed=0,
                 options=""):
        self.shardfs = shardfs
        self.index = index
        self.s3 = s3
        self.workdir = workdir
        self.world = world
        self.view = view
        self.seed = seed
        self.options = options
        self.proxies, self.mounts, self.mountpoints, self.cache_dirs = [], [], [], []
        self._stack = None

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        try:
            for k in range(self.world):
                proxy = self._stack.enter_context(rs.FaultProxy(self.s3.endpoint))
                self.proxies.append(proxy)
            for k in range(self.world):
                mnt = tempfile.mkdtemp(prefix="rank%d-mnt-" % k, dir=self.workdir)
                cache = tempfile.mkdtemp(prefix="rank%d-cache-" % k, dir=self.workdir)
                opts = "view=%s,rank=%d,world=%d,seed=%d,cache_dir=%s" % (
                    self.view, k, self.world, self.seed, cache)
                if self.options:
                    opts += "," + self.options
                m = RankMount(self.shardfs, self.index, mnt, opts,
                              s3_env(self.s3, self.proxies[k].url),
                              os.path.join(self.workdir, "rank%d-mount.log" % k))
                self._stack.callback(self._stop_mount, m)
                self.mounts.append(m)
                self.mountpoints.append(mnt)
                self.cache_dirs.append(cache)
        except BaseException:
            self._stack.close()
            raise
        return self

    def _stop_mount(self, m):
        problem = m.stop()
        if problem:
            raise RuntimeError("rank mount %s: %s\n%s" % (m.mnt, problem, m.log()))

    def __exit__(self, *exc):
        self._stack.close()
        return False

    def stats(self, k):
        p = subprocess.run([self.shardfs, "stats", "--json", "--shards", self.mountpoints[k]],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        if p.returncode != 0:
            raise RuntimeError("shardfs stats %s exited %d: %s" % (
                self.mountpoints[k], p.returncode, p.stderr.decode(errors="replace")))
        return json.loads(p.stdout)

    def logs(self):
        return "\n".join("rank %d: %s" % (k, m.log()) for k, m in enumerate(self.mounts))


# -- the training jobs ----------------------------------------------------------------------

class LoaderJobs:
    """One cluster_loader.py per root (rank), started at once in their own sessions, stopped
    (with their DataLoader workers) on exit. Each waits at a start gate after its dataset scan,
    so that go() starts every epoch at the same moment; a thread per job collects its JSON
    lines (ready, one per batch, done)."""

    def __init__(self, roots, workdir, python=LOADER_PYTHON, workers=2, batch=8, step=0.0,
                 seed=0):
        self.roots = roots
        self.workdir = workdir
        self.argv = lambda root: [python, LOADER, "load", "--root", root, "--workers",
                                  str(workers), "--batch", str(batch), "--step", str(step),
                                  "--seed", str(seed), "--gate"]
        self.procs, self.lines, self.threads, self.logs = [], [], [], []
        self.go_time = None
        self._cv = threading.Condition()

    def __enter__(self):
        try:
            for k, root in enumerate(self.roots):
                log_path = os.path.join(self.workdir, "rank%d-loader.log" % k)
                logf = open(log_path, "ab")
                self.logs.append(log_path)
                try:
                    p = subprocess.Popen(self.argv(root), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=logf,
                                         start_new_session=True)
                finally:
                    logf.close()
                self.procs.append(p)
                self.lines.append([])
                t = threading.Thread(target=self._collect, args=(k, p), daemon=True)
                t.start()
                self.threads.append(t)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def _collect(self, k, p):
        for raw in p.stdout:
            try:
                obj = json.loads(raw)
            except ValueError:
                obj = {"noise": raw.decode(errors="replace")}
            with self._cv:
                self.lines[k].append(obj)
                self._cv.notify_all()
        with self._cv:
            self.lines[k].append({"eof": True})
            self._cv.notify_all()

    def _first(self, k, key):
        for obj in self.lines[k]:
            if key in obj:
                return obj
        return None

    def wait_for(self, key, timeout, ranks=None):
        """Waits until every job (of `ranks`) printed a line with `key`; returns those lines.
        Fails with the job's log if one ends first or time runs out."""
        ranks = list(range(len(self.procs)) if ranks is None else ranks)
        end = time.monotonic() + timeout
        with self._cv:
            while True:
                got = [self._first(k, key) for k in ranks]
                if all(got):
                    return got
                for k, line in zip(ranks, got):
                    if line is None and self._first(k, "eof"):
                        raise RuntimeError("rank %d's loader ended before %r: %s" % (
                            k, key, self.log(k)))
                left = end - time.monotonic()
                if left <= 0:
                    raise RuntimeError("no %r from the loaders in %.0f s: %s" % (
                        key, timeout, "; ".join(self.log(k) for k in ranks)))
                self._cv.wait(min(left, 0.5))

    def wait_ready(self, timeout=120):
        return self.wait_for("ready", timeout)

    def go(self):
        """Opens every start gate at once."""
        self.go_time = time.monotonic()
        for p in self.procs:
            p.stdin.write(b"go\n")
            p.stdin.flush()

    def batches(self, k):
        with self._cv:
            return [o for o in self.lines[k] if "batch" in o]

    def wait_done(self, timeout):
        """The `done` line of every job, after each exited 0."""
        done = self.wait_for("done", timeout)
        for k, p in enumerate(self.procs):
            rc = p.wait(timeout=30)
            if rc != 0:
                raise RuntimeError("rank %d's loader exited %d: %s" % (k, rc, self.log(k)))
        return done

    def log(self, k):
        try:
            with open(self.logs[k], "rb") as f:
                return f.read()[-3000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)  # The session we started it in.
            p.wait(timeout=30)
            for f in (p.stdin, p.stdout):
                with contextlib.suppress(OSError):
                    f.close()
        for t in self.threads:
            t.join(10)


# -- what happened, per rank ------------------------------------------------------------------

def summarize(files, shards, done, stats, proxies, go_time, subdir):
    """Per-rank figures of one epoch. files: view_files(); shards: shard_table(); done: each
    rank's `done` line, its sample paths relative to MOUNT/subdir; stats: each rank's stats();
    proxies: each rank's FaultProxy; go_time: LoaderJobs.go_time.

    Each rank's row: samples, samples_per_s (over its own epoch), view_bytes (of the samples
    it read), shard_ids (those its samples lie in), shard_bytes (their tar bytes), and what
    it fetched: requests (attempts, retries included), chunks_fetched and bytes_fetched by
    `shardfs stats`, proxy_requests and proxy_bytes
    as its proxy counted them, proxy_paths (the URL paths asked for). The aggregate:
    samples over the time from the common start to the last rank's end."""
    ranks = []
    for k, d in enumerate(done):
        rows = [[subdir + "/" + r[0]] + r[1:] for r in d["samples"]]
        ids = sorted({files[r[0]][1] for r in rows if r[0] in files})
        secs = d["end"] - d["start"]
        ranks.append({
            "rank": k, "samples": len(rows), "seconds": secs,
            "samples_per_s": len(rows) / secs if secs > 0 else None,
            "view_bytes": sum(files[r[0]][0] for r in rows if r[0] in files),
            "shard_ids": ids, "shard_bytes": sum(shards[i][1] for i in ids),
            "requests": stats[k]["requests"], "chunks_fetched": stats[k]["chunks_fetched"],
            "bytes_fetched": stats[k]["bytes_fetched"],
            "retries": stats[k]["retries"], "fetch_errors": stats[k]["fetch_errors"],
            "errors": stats[k]["errors"],
            "proxy_requests": proxies[k].requests, "proxy_bytes": proxies[k].bytes_sent,
            "proxy_paths": sorted(proxies[k].requests_per_path()),
        })
    end = max(d["end"] for d in done)
    total = sum(r["samples"] for r in ranks)
    wall = end - go_time
    return {"ranks": ranks, "samples": total, "seconds": wall,
            "samples_per_s": total / wall if wall > 0 else None}


def timeline(batches, window):
    """Per rank: batches received before, during and after `window` (start, end, monotonic)."""
    t0, t1 = window
    return [{"rank": k, "before": sum(b["t"] <= t0 for b in bs),
             "during": sum(t0 < b["t"] < t1 for b in bs),
             "after": sum(b["t"] >= t1 for b in bs)} for k, bs in enumerate(batches)]


def format_summary(summary, chunk_size=None, required_rate=None):
    """The summary as a table: a line per rank, then the aggregate (and the verdict against
    `required_rate`, samples/s, when given), the outage and the timeline if recorded."""
    lines = ["  rank  samples  samples/s  shards  shard bytes  view bytes  requests  "
             "bytes fetched  fetched/shard  proxy req  proxy bytes  retries"]
    for r in summary["ranks"]:
        ratio = r["bytes_fetched"] / r["shard_bytes"] if r["shard_bytes"] else 0.0
        lines.append("  %4d  %7d  %9.1f  %6d  %11d  %10d  %8d  %13d  %12.3fx  %9d  %11d  %7d" % (
            r["rank"], r["samples"], r["samples_per_s"] or 0.0, len(r["shard_ids"]),
            r["shard_bytes"], r["view_bytes"], r["requests"], r["bytes_fetched"], ratio,
            r["proxy_requests"], r["proxy_bytes"], r["retries"]))
    lines.append("  aggregate: %d samples in %.2f s from the common start: %.1f samples/s%s" % (
        summary["samples"], summary["seconds"], summary["samples_per_s"] or 0.0,
        "" if chunk_size is None else " (chunk_size %d)" % chunk_size))
    if required_rate:
        met = (summary["samples_per_s"] or 0.0) >= required_rate
        lines.append("  required rate: %.1f samples/s: %s (%.2fx)" % (
            required_rate, "met" if met else "NOT met",
            (summary["samples_per_s"] or 0.0) / required_rate))
    o = summary.get("outage")
    if o:
        lines.append("  outage: rank %d's path to the store down from %.2f s to %.2f s" % (
            o["rank"], o["from_s"], o["to_s"]))
    for t in summary.get("timeline", []):
        lines.append("    rank %d batches: %d before, %d during, %d after the outage" % (
            t["rank"], t["before"], t["during"], t["after"]))
    return "\n".join(lines)


def run_loader_tool(args, python=LOADER_PYTHON, timeout=600):
    """Runs `cluster_loader.py ARGS` to its end (e.g. `jpegs`); returns its last JSON line."""
    p = subprocess.run([python, LOADER] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("cluster_loader.py %s exited %d (torch and PIL for %s?): %s" % (
            args[0], p.returncode, python, p.stderr.decode(errors="replace")[-3000:]))
    return json.loads(p.stdout.decode().strip().splitlines()[-1])
