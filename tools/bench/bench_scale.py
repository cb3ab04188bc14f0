"""--scale: how the cost of an index and a mount grows from 100k to 1M to 10M entries.

For each size N of the list (`--scale 100000,1000000,10000000`), on N small files written
straight into ~1 GiB GNU tar shards (`train/<class>/<class>_<n>.jpg`, sizes log-normal around
700 bytes, 200..4096; cached in /var/tmp/shardfs-scale-<N>-<seed>/ and reused):
  - `shardfs index build`: seconds, entries/s, index bytes (du of the index dir) per entry;
  - mount time: median of cold (page cache dropped) and warm mounts, launch until the root stats;
  - lookup latency p50/p99: one lstat each of --lookups random files never looked up before in
    that mount, after a drop of all caches and a fresh mount, timed per call by bench_reader
    (`lstat-latency`); the class directories are looked up first, untimed. Once with
    -o prefill_dirs=0, so every timed call is one LOOKUP answered by the daemon, and once with
    the default options (the mount lists a directory after two misses in it);
  - lstat walk of every file in tree order on a fresh mount (default options) after a drop;
  - daemon VmRSS and VmHWM after that walk, and the kernel slab (fuse_inode, dentry, inode_cache:
    active objects x object size) after the walk minus before the mount, per entry;
  - a shuffled read of --reads random files with --procs readers on a fresh mount after a drop
    (files/s), its checksum checked against content recomputed here.
Then one table (rows = metric, columns = sizes, plus the growth factor of every step) that flags
a per-entry cost rising more than --flag-ratio per step, and any growth of mount time or RSS.

The content of every file is a pure function of (seed, class, n), so the shards are written by
--gen-procs processes in parallel and any sample of files can be checked without a manifest.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import threading
import time

from bench_args import (add_binary_args, add_json_arg, add_phase_timeout_arg, add_seed_arg,
                        binaries_missing, host_facts, resolve_binaries, write_report_json)
from bench_common import BenchError, Xxh3, fmt_bytes, log, tree_bytes
from bench_mounts import Mount, is_mounted, run_in_scratch, run_measured, run_tool
from bench_scale_dataset import (MASK64, MAX_SIZE, MEDIAN_SIZE, MIN_SIZE, SIGMA, Layout,
                                 file_content, file_params, file_path, generate, make_pool,
                                 write_lists)
from bench_scale_report import build_rows, print_scale_report
from bench_workloads import can_drop_caches, drop_caches

SLAB_CACHES = ("fuse_inode", "dentry", "inode_cache")


# -- measuring -------------------------------------------------------------------------------


def read_slab():
    """{cache: (active objects, object size)} from /proc/slabinfo, or None if unreadable."""
    try:
        with open("/proc/slabinfo") as f:
            lines = f.readlines()
    except OSError:
        return None
    out = {}
    for line in lines[2:]:
        parts = line.split()
        if parts and parts[0] in SLAB_CACHES:
            out[parts[0]] = (int(parts[1]), int(parts[3]))
    return out


def daemon_memory(pid):
    """(VmRSS, VmHWM) bytes of a running process."""
    got = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                got[line.split(":")[0]] = int(line.split()[1]) * 1024
    return got.get("VmRSS"), got.get("VmHWM")


class ScaleRun:
    """The measurements of one size N."""

    def __init__(self, a, n, scratch, can_cold):
        self.a, self.n, self.can_cold = a, n, can_cold
        self.wdir = os.path.join(a.cache_root,
                                 f"shardfs-scale-{n}-{a.seed}{'-empty' if a.empty else ''}")
        self.scratch = os.path.join(scratch, f"n{n}")
        os.makedirs(self.scratch)
        self.mnt = os.path.join(self.scratch, "mnt")
        os.makedirs(self.mnt)
        self.r = {"files": n}

    def drop(self):
        if self.can_cold:
            drop_caches()

    def mount(self, opts=None, index=None):
        o = ["-o", opts] if opts else []
        m = Mount("shardfs", self.mnt,
                  [self.a.shardfs, "mount", "-f"] + o + [index or self.index, self.mnt],
                  "fuse3", os.path.join(self.scratch, "mount.log"))
        m.mount(min(self.a.phase_timeout, 300))
        return m

    def unmount(self, m):
        """Unmounts without -z while the mount is busy: after a walk the mount's own directory
        prefill may still hold a directory open for a while (large directories), and a lazy
        unmount then leaves the daemon serving it. Gives up on waiting after 120 s."""
        start = time.monotonic()
        while is_mounted(self.mnt) and time.monotonic() - start < 120:
            if subprocess.run(["fusermount3", "-u", self.mnt], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.5)
        busy = time.monotonic() - start
        if busy > 1:
            log(f"scale {self.n:,}: the mount was busy for {busy:.1f} s before it unmounted")
        m.unmount()

    def reader(self, mode, list_path, procs=1):
        argv = [self.a.bench_reader, mode, list_path, "--root", self.mnt]
        if procs > 1:
            argv += ["--procs", str(procs)]
        rc, out, err, _ = run_tool(argv, timeout=self.a.phase_timeout)
        if rc is None:
            raise BenchError(f"bench_reader {mode} timed out after {self.a.phase_timeout:.0f} s")
        try:
            res = json.loads(out)
        except ValueError:
            raise BenchError(f"bench_reader {mode} exited {rc}: {err.decode(errors='replace')}")
        if rc != 0 or res.get("errors"):
            raise BenchError(f"bench_reader {mode} {list_path}: {res.get('errors')} error(s), "
                             f"first: {res.get('first_error')}")
        return res

    def run(self):
        a, n = self.a, self.n
        meta = generate(a, n, self.wdir)
        self.meta = meta
        lay = Layout(n, a.scale_classes, a.seed, meta["params"]["shard_bytes"], a.empty)
        self.r.update({"classes": lay.classes, "shards": len(meta["shards"]),
                       "shard_bytes": meta["shard_bytes"], "content_bytes": meta["content_bytes"],
                       "entries": n + lay.classes + 1, "dataset_cached": meta["cached"],
                       "generate_seconds": meta["generate_seconds"]})
        self.build_index()
        all_list = write_lists(lay, self.wdir)
        rng = random.Random(a.seed * 1_000_003 + n)
        k_look, k_read = min(a.lookups, n), min(a.reads, n)
        look = [file_path(lay, i) for i in rng.sample(range(n), k_look)]
        reads = [file_path(lay, i) for i in rng.sample(range(n), k_read)]
        look_list = self.write_list("lookups.txt", [p for _, _, p in look])
        dirs_list = self.write_list("dirs.txt",
                                    sorted({f"train/{lay.names[c]}" for c, _, _ in look}))
        read_list = self.write_list("reads.txt", [p for _, _, p in reads])
        self.mount_times()
        # prefill_dirs=0: every timed call is a LOOKUP answered by the daemon. By default the
        # mount lists a directory after two misses in it, and the kernel answers the rest.
        self.lookup_latency(look_list, dirs_list, k_look, "lookup", "prefill_dirs=0")
        self.lookup_latency(look_list, dirs_list, k_look, "lookup_default", None)
        # The index read into the page cache first: what a LOOKUP costs the daemon when no disk
        # read is involved, apart from the growth of the disk reads in the cold figures.
        self.lookup_latency(look_list, dirs_list, k_look, "lookup_warm", "prefill_dirs=0",
                            cold=False)
        if a.walk_world > 1:
            self.walk_rank()
        else:
            self.walk(all_list, lay)
        self.shuffled_read(read_list, reads)
        if n in a.partition_at:
            self.partitioned(look_list, dirs_list, k_look)
        return self.r

    def write_list(self, name, paths):
        path = os.path.join(self.scratch, name)
        with open(path, "w") as f:
            f.write("".join(p + "\n" for p in paths))
        return path

    def build_index(self):
        a, n = self.a, self.n
        self.index = os.path.join(self.wdir, "index")
        rec = os.path.join(self.wdir, "index.json")
        if a.reuse_index and os.path.exists(rec) and os.path.isdir(self.index):
            with open(rec) as f:
                ib = json.load(f)
            log(f"scale {n:,}: reusing the index (built in {ib['seconds']:.1f} s)")
            ib["cached"] = True
        else:
            shutil.rmtree(self.index, ignore_errors=True)
            self.drop()
            log(f"scale {n:,}: shardfs index build (default --memory)")
            ib = self.measured_build(self.index, [], "build.log")
            ib["cached"] = False
            with open(rec, "w") as f:
                json.dump(ib, f)
        apparent, allocated = tree_bytes(self.index)
        ib.update({"index_bytes": apparent, "index_disk_bytes": allocated})
        self.r["index_build"] = ib
        log(f"scale {n:,}: index built in {ib['seconds']:.2f} s "
            f"({n / ib['seconds']:,.0f} entries/s), {fmt_bytes(allocated)} on disk")
        if not a.skip_headers_build:
            self.r["index_build_headers"] = self.build_headers_warm()
        self.r["index_build_memory"] = {}
        for label in a.build_memory:
            if label == "inmem" and n > a.in_memory_max:
                log(f"scale {n:,}: in-memory build skipped (more than --in-memory-max "
                    f"{a.in_memory_max:,} entries)")
                continue
            out = os.path.join(self.scratch, "index-mem")
            flag = ["--memory", "1T"] if label == "inmem" else ["--memory", label]
            log(f"scale {n:,}: shardfs index build {' '.join(flag)}")
            self.drop()
            self.r["index_build_memory"][label] = self.measured_build(out, flag,
                                                                     f"build-{label}.log")
            shutil.rmtree(out, ignore_errors=True)

    def measured_build(self, out, extra, log_name):
        """One `index build` of this size's shards into out: wall and CPU seconds, peak RSS."""
        a, n = self.a, self.n
        log_path = os.path.join(self.scratch, log_name)
        rc, secs, cpu, rss = run_measured([a.shardfs, "index", "build", "--quiet", "--out", out]
                                          + extra + self.meta["shards"],
                                          timeout=a.phase_timeout, log_path=log_path)
        if rc != 0:
            raise BenchError(f"shardfs index build {' '.join(extra)} exited {rc}; see {log_path}")
        log(f"scale {n:,}: built in {secs:.1f} s ({n / secs:,.0f} entries/s, "
            f"{n / max(cpu, 1e-9):,.0f} per CPU-second), peak RSS {fmt_bytes(rss)}")
        return {"seconds": secs, "cpu_seconds": cpu, "peak_rss_bytes": rss}

    def build_headers_warm(self):
        """The build the target names: headers only (--no-checksum), with the shards
        read into the page cache first; into scratch, removed after."""
        a, n = self.a, self.n
        for shard in self.meta["shards"]:
            with open(shard, "rb") as f:
                while f.read(16 << 20):
                    pass
        out = os.path.join(self.scratch, "index-headers")
        log(f"scale {n:,}: shardfs index build --no-checksum, shards in the page cache")
        rc, _, _, secs = run_tool([a.shardfs, "index", "build", "--quiet", "--no-checksum",
                                   "--out", out] + self.meta["shards"],
                                  timeout=a.phase_timeout,
                                  log_path=os.path.join(self.scratch, "build-headers.log"))
        shutil.rmtree(out, ignore_errors=True)
        if rc != 0:
            raise BenchError(f"shardfs index build --no-checksum exited {rc}; see "
                             f"{os.path.join(self.scratch, 'build-headers.log')}")
        log(f"scale {n:,}: headers-only build, shards cached: {secs:.2f} s "
            f"({n / secs:,.0f} entries/s)")
        return {"seconds": secs}

    def mount_times(self, key="mount", index=None):
        a = self.a
        cold, warm = [], []
        if self.can_cold:
            for _ in range(a.mount_reps_cold):
                self.drop()
                m = self.mount(index=index)
                cold.append(m.seconds)
                self.unmount(m)
        first = self.mount(index=index)
        self.unmount(first)
        for _ in range(a.mount_reps_warm):
            m = self.mount(index=index)
            warm.append(m.seconds)
            self.unmount(m)
        self.r[key] = {"cold_seconds": cold, "warm_seconds": warm,
                       "first_seconds": first.seconds}
        log(f"scale {self.n:,}: {key} cold {med_ms(cold)} ms, warm {med_ms(warm)} ms")

    def lookup_latency(self, look_list, dirs_list, k, key, opts, cold=True, index=None):
        if cold:
            self.drop()
        else:
            read_tree(index or self.index)
        m = self.mount(opts, index)
        try:
            self.reader("lstat", dirs_list)  # Untimed: the parents of the timed calls.
            res = self.reader("lstat-latency", look_list)
        finally:
            self.unmount(m)
        if res["files"] != k:
            raise BenchError(f"lookups: {res['files']} of {k} paths found")
        self.r[key] = {"calls": k, "cold": cold and self.can_cold, "seconds": res["seconds"],
                       "mount_options": opts or "", "latency_us": res["latency_us"]}
        lat = res["latency_us"]
        log(f"scale {self.n:,}: lookup ({opts or 'default options'}) p50 {lat['p50']:.1f} us, "
            f"p99 {lat['p99']:.1f} us")

    def walk(self, all_list, lay):
        self.drop()
        before = read_slab()
        m = self.mount()
        sampler = SlabSampler()
        try:
            rss_mounted = daemon_memory(m.proc.pid)
            sampler.start()
            try:
                res = self.reader("lstat", all_list)
            finally:
                sampler.stop()
            rss, hwm = daemon_memory(m.proc.pid)
            after = read_slab()
        finally:
            self.unmount(m)
        if res["files"] != self.n or res["bytes"] != self.meta["content_bytes"]:
            raise BenchError(f"lstat walk: {res['files']} files, {res['bytes']} bytes; expected "
                             f"{self.n}, {self.meta['content_bytes']}")
        slab = slab_delta(before, after)
        if slab is not None:
            # The sample holding the most fuse_inodes: a drop_caches elsewhere on the machine, or
            # memory pressure, during the walk takes inodes away from the end figures above.
            peak = sampler.peak or after
            slab["peak"] = {"fuse_inode_added": peak["fuse_inode"][0] - before["fuse_inode"][0],
                            "bytes_delta": sum(peak.get(x, (0, 0))[0] * peak.get(x, (0, 0))[1] -
                                               before.get(x, (0, 0))[0] * before.get(x, (0, 0))[1]
                                               for x in SLAB_CACHES),
                            "samples": sampler.samples}
        self.r["walk"] = {"seconds": res["seconds"], "files": res["files"], "cold": self.can_cold,
                          "files_per_s": res["files"] / res["seconds"]}
        self.r["daemon"] = {"rss_bytes_mounted": rss_mounted[0], "rss_bytes": rss,
                            "hwm_bytes": hwm}
        self.r["slab"] = slab
        log(f"scale {self.n:,}: lstat walk {res['files'] / res['seconds']:,.0f} files/s; daemon "
            f"RSS {fmt_bytes(rss)} (peak {fmt_bytes(hwm)}); slab "
            f"{fmt_bytes(slab['total_bytes_delta']) if slab else 'n/a'}")

    def walk_rank(self):
        """The walk of one rank's share: a mount with -o rank=0,world=W, every directory listed
        and every file lstat'ed (os.walk + lstat), then the daemon's RSS and the slab taken."""
        w = self.a.walk_world
        self.drop()
        before = read_slab()
        m = self.mount(f"rank=0,world={w}")
        files = 0
        try:
            rss_mounted = daemon_memory(m.proc.pid)
            start = time.perf_counter()
            for d, _, names in os.walk(self.mnt):
                for name in names:
                    os.lstat(os.path.join(d, name))
                files += len(names)
            secs = time.perf_counter() - start
            rss, hwm = daemon_memory(m.proc.pid)
            after = read_slab()
        finally:
            self.unmount(m)
        share, per_shard = self.n / w, self.n / len(self.meta["shards"])
        if not share - per_shard <= files <= share + per_shard + 1 or files == 0:
            raise BenchError(f"rank 0 of {w}: {files:,} files walked, about {share:,.0f} expected")
        slab = slab_delta(before, after)
        self.r["walked"] = files
        self.r["walk"] = {"seconds": secs, "files": files, "cold": self.can_cold,
                          "files_per_s": files / secs, "rank": 0, "world": w}
        self.r["daemon"] = {"rss_bytes_mounted": rss_mounted[0], "rss_bytes": rss,
                            "hwm_bytes": hwm}
        self.r["slab"] = slab
        log(f"scale {self.n:,}: rank 0 of {w}: walked {files:,} files in {secs:.1f} s; daemon "
            f"RSS {fmt_bytes(rss)} (peak {fmt_bytes(hwm)})")

    def partitioned(self, look_list, dirs_list, k):
        """The same shards built as --partitions P indexes by `xargs -P JOBS` (one `index build
        --part K/P` per task), joined by `index manifest`; then mount and lookups on it."""
        a, n, parts = self.a, self.n, self.a.partitions
        pdir = os.path.join(self.scratch, "parts")
        os.makedirs(pdir)
        shard_list = os.path.join(self.scratch, "shards.txt")
        with open(shard_list, "w") as f:
            f.write("".join(p + "\n" for p in self.meta["shards"]))
        script = (f"seq 0 {parts - 1} | xargs -P {a.partition_jobs} -I K "
                  f"{a.shardfs} index build --quiet --part K/{parts} --from-list {shard_list} "
                  f"--out {pdir}/part-K")
        self.drop()
        log(f"scale {n:,}: {parts} partitions with xargs -P {a.partition_jobs}")
        log_path = os.path.join(self.scratch, "build-parts.log")
        rc, secs, cpu, rss = run_measured(["sh", "-c", script], timeout=a.phase_timeout,
                                          log_path=log_path)
        if rc != 0:
            raise BenchError(f"partitioned build exited {rc}; see {log_path}")
        part_dirs = [os.path.join(pdir, f"part-{i}") for i in range(parts)]
        manifest = os.path.join(pdir, "manifest")
        rc, msecs, _, _ = run_measured([a.shardfs, "index", "manifest", "--out", manifest]
                                       + part_dirs, timeout=a.phase_timeout, log_path=log_path)
        if rc != 0:
            raise BenchError(f"index manifest exited {rc}; see {log_path}")
        sizes = [tree_bytes(d)[1] for d in part_dirs]
        self.r["partitions"] = {"parts": parts, "jobs": a.partition_jobs, "seconds": secs,
                                "cpu_seconds": cpu, "peak_rss_bytes": rss,
                                "manifest_seconds": msecs, "index_disk_bytes": sum(sizes),
                                "manifest_bytes": os.path.getsize(manifest)}
        log(f"scale {n:,}: {parts} partitions built in {secs:.1f} s (+ manifest {msecs:.2f} s), "
            f"{fmt_bytes(sum(sizes))} of indexes")
        self.mount_times("mount_manifest", manifest)
        self.lookup_latency(look_list, dirs_list, k, "lookup_manifest", "prefill_dirs=0",
                            index=manifest)

    def shuffled_read(self, read_list, reads):
        xxh = Xxh3("--scale needs it to check what it reads")
        pool = make_pool(self.a.seed)
        want = 0
        for c, nn, p in reads:
            size, off = (0, 0) if self.a.empty else file_params(self.a.seed, c, nn)
            want = (want + xxh(file_content(pool, p.encode(), size, off))) & MASK64
        self.drop()
        m = self.mount()
        try:
            res = self.reader("read", read_list, self.a.procs)
        finally:
            self.unmount(m)
        if res["files"] != len(reads) or int(res["checksum"], 16) != want:
            raise BenchError(f"shuffled read: {res['files']} files, checksum {res['checksum']}; "
                             f"expected {len(reads)}, {want:016x}: the mount returned other bytes")
        self.r["read"] = {"files": res["files"], "bytes": res["bytes"], "seconds": res["seconds"],
                          "procs": self.a.procs, "cold": self.can_cold,
                          "files_per_s": res["files"] / res["seconds"]}
        log(f"scale {self.n:,}: shuffled read {res['files'] / res['seconds']:,.0f} files/s")


class SlabSampler:
    """Reads /proc/slabinfo every 0.2 s on a thread; keeps the sample with the most
    fuse_inodes."""

    def __init__(self):
        self.peak, self.samples = None, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while True:
            s = read_slab()
            if s is None or "fuse_inode" not in s:
                return
            self.samples += 1
            if self.peak is None or s["fuse_inode"][0] > self.peak["fuse_inode"][0]:
                self.peak = s
            if self._stop.wait(0.2):
                return

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join()
        s = read_slab()  # The last moment of the walk counts too.
        if s and "fuse_inode" in s and (self.peak is None or
                                        s["fuse_inode"][0] > self.peak["fuse_inode"][0]):
            self.peak = s


def slab_delta(before, after):
    """Per slab cache: objects before and after, object size, and the bytes added; plus their
    total. None without both readings."""
    if before is None or after is None:
        return None
    slab = {}
    for name in SLAB_CACHES:
        b, e = before.get(name, (0, 0)), after.get(name, (0, 0))
        slab[name] = {"objects_before": b[0], "objects_after": e[0], "object_size": e[1] or b[1],
                      "bytes_delta": e[0] * e[1] - b[0] * b[1]}
    slab["total_bytes_delta"] = sum(slab[x]["bytes_delta"] for x in SLAB_CACHES)
    return slab


def read_tree(path):
    """Reads every file below path, so it is in the page cache."""
    for d, _, names in os.walk(path):
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def med_ms(samples):
    return f"{statistics.median(samples) * 1000:.1f}" if samples else "n/a"


# -- the command -----------------------------------------------------------------------------


def parse_scale_args(argv):
    ap = argparse.ArgumentParser(
        prog="shardfs_bench.py --scale",
        description="How index build, mount, lookups, walks, reads, daemon RSS and kernel slab "
        "grow with the number of files. See tools/bench/README.md.")
    ap.add_argument("--scale", required=True,
                    help="comma-separated file counts, e.g. 100000,1000000,10000000")
    ap.add_argument("--classes", dest="scale_classes", type=int, default=1000,
                    help="class directories at every size (1000)")
    add_seed_arg(ap)
    ap.add_argument("--shard-size", dest="scale_shard_size", default="1GiB",
                    help="target shard size (1GiB)")
    ap.add_argument("--gen-procs", type=int, default=os.cpu_count() or 1,
                    help="processes writing shards (CPUs)")
    ap.add_argument("--cache-root", default="/var/tmp",
                    help="shards and index cached in CACHE_ROOT/shardfs-scale-<N>-<seed> (/var/tmp)")
    ap.add_argument("--lookups", type=int, default=20000, help="timed cold lookups (20000)")
    ap.add_argument("--reads", type=int, default=100000, help="files of the shuffled read (100000)")
    ap.add_argument("--procs", type=int, default=4, help="readers of the shuffled read (4)")
    ap.add_argument("--mount-reps-cold", type=int, default=3, help="cold mounts (3)")
    ap.add_argument("--mount-reps-warm", type=int, default=5, help="warm mounts (5)")
    ap.add_argument("--flag-ratio", type=float, default=1.5,
                    help="flag a per-entry cost rising more than this per step (1.5)")
    ap.add_argument("--flat-ratio", type=float, default=1.25,
                    help="flag mount time or RSS rising more than this per step (1.25)")
    ap.add_argument("--empty", action="store_true",
                    help="every file empty (512 tar bytes per entry), so 50M entries fit a disk")
    ap.add_argument("--build-memory", default="",
                    help="extra builds per size, comma-separated: inmem (--memory 1T) and/or sizes "
                    "such as 256M; each measured for time, CPU and peak RSS")
    ap.add_argument("--in-memory-max", type=int, default=20_000_000,
                    help="skip the in-memory build above this many files (20000000)")
    ap.add_argument("--skip-headers-build", action="store_true",
                    help="no headers-only build with the shards in the page cache")
    ap.add_argument("--walk-world", type=int, default=1,
                    help="walk rank 0's share of -o rank=0,world=W instead of every file (1)")
    ap.add_argument("--partitions", type=int, default=8,
                    help="partitions of the partitioned build at --partition-at sizes (8)")
    ap.add_argument("--partition-jobs", type=int, default=2, help="xargs -P of that build (2)")
    ap.add_argument("--partition-at", default="",
                    help="comma-separated sizes that also get the partitioned build and manifest")
    ap.add_argument("--reuse-index", action="store_true",
                    help="reuse an index built by an earlier run (its recorded build time)")
    add_phase_timeout_arg(ap, "seconds per build or reader run (3600)")
    add_binary_args(ap)
    add_json_arg(ap)
    a = ap.parse_args(argv)
    try:
        a.sizes = [int(x.replace("_", "")) for x in a.scale.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--scale: not a list of counts: {a.scale}")
    a.build_memory = [x.strip() for x in a.build_memory.split(",") if x.strip()]
    a.partition_at = {int(x.replace("_", "")) for x in a.partition_at.split(",") if x.strip()}
    if not a.sizes or min(a.sizes) < 1 or a.sizes != sorted(set(a.sizes)):
        ap.error("--scale: positive counts, increasing")
    if min(a.scale_classes, a.lookups, a.reads, a.procs, a.gen_procs) < 1 or \
            a.mount_reps_warm < 1 or a.mount_reps_cold < 0:
        ap.error("counts must be positive")
    resolve_binaries(a)
    return a


def run_scale(a, scratch):
    can_cold, why = can_drop_caches()
    loadavg_start = os.getloadavg()
    results = {}
    for n in a.sizes:
        results[n] = ScaleRun(a, n, scratch, can_cold).run()
    rows, flags = build_rows(a.sizes, results, a.flag_ratio, a.flat_ratio)
    report = {
        "schema": "shardfs-bench-scale/1",
        "params": {"sizes": a.sizes, "classes": a.scale_classes, "seed": a.seed,
                   "shard_size": a.scale_shard_size, "lookups": a.lookups, "reads": a.reads,
                   "procs": a.procs, "mount_reps_cold": a.mount_reps_cold,
                   "mount_reps_warm": a.mount_reps_warm, "flag_ratio": a.flag_ratio,
                   "flat_ratio": a.flat_ratio, "median_size": MEDIAN_SIZE, "sigma": SIGMA,
                   "min_size": MIN_SIZE, "max_size": MAX_SIZE, "empty": a.empty,
                   "walk_world": a.walk_world, "build_memory": a.build_memory,
                   "partitions": a.partitions, "partition_jobs": a.partition_jobs},
        "environment": host_facts(a) | {"cold_runs": can_cold, "cold_note": why,
                                        "loadavg_start": loadavg_start,
                                        "loadavg_end": os.getloadavg()},
        "sizes": a.sizes,
        "results": {str(n): results[n] for n in a.sizes},
        "rows": rows,
        "flags": flags,
    }
    write_report_json(a.json_out, report)
    print_scale_report(report)
    return 0


def scale_main(argv):
    """`shardfs_bench.py --scale LIST ...`: parses its own options, runs, and always cleans up:
    every mount made is unmounted, also on failure, Ctrl-C or SIGTERM."""
    a = parse_scale_args(argv)
    missing = binaries_missing(a, "shardfs_bench --scale")
    if missing:
        return missing
    return run_in_scratch(a.cache_root, "shardfs-scale-run-", lambda scratch: run_scale(a, scratch))
