"""`shardfs_bench.py --netfs`: shards and index on a real network filesystem.

The network filesystem is sshfs talking to an sshd of its own on 127.0.0.1 through a loopback
proxy that adds a round-trip delay (the integration tests' rig, netfs_testlib.NetFs). The
loader bench's JPEG dataset (bench_loader.jpeg_dataset) is packed on local disk into
--netfs-shards tar shards (pack_or_reuse); the loose tree and the shards are then copied into
the server's export, and the index is built through the sshfs mount, so loose tree, shards and
index all live on the network filesystem. For each --netfs-rtts delay:

  - an unmodified shuffled torchvision ImageFolder + DataLoader (loader_worker.py serve, the
    loader bench's process) over (a) the loose tree on sshfs, (b) a default `shardfs mount`
    (no options) of the index on sshfs, (c) the loose tree on local disk; cold, then warm;
    samples/s and the ratios b/a, b/c. Every run reads the same --netfs-samples samples (the
    same seeded permutation), and their checksums must agree, else the run is FAILED.
  - `shardfs index build` of the shards over sshfs into the index on sshfs, against the same
    build from and to local disk (time ratio); the mount time of (b), cold and warm.
  - at --netfs-pack-rtt: `shardfs pack` of the loose tree on sshfs (output on local disk)
    against `tar -cf` of the same tree over the same sshfs mount (output local), files/s and
    MB/s each, after a cold `dd` of one big file over the mount (the rig's raw bandwidth), and
    `shardfs verify` of the pack against its source on sshfs. `--netfs-only pack` runs this
    part alone (run_netfs_pack).
Then, at the smallest delay, one cold epoch of (a) and of (b) on counted sshfs mounts (the
server's sftp-server under strace): the server's metadata calls on the export.

A cold run: the shardfs mount and the sshfs mount unmounted, the node-local chunk cache
($XDG_CACHE_HOME/shardfs, XDG_CACHE_HOME set to the run's scratch) emptied, the page cache
dropped (client and server share this kernel: both sides), sshfs mounted anew, and for (b) a
fresh shardfs mount. A warm run follows its cold run on the same mounts, caches kept.

Needs root (sshd, sshfs and strace run as root; drop_caches). Python 3 standard library; torch
runs in loader_worker.py under --loader-python.
"""

import json
import math
import os
import platform
import shutil
import sys
import time

from bench_args import TEST_RIG_DIR, use_test_rig, write_report_json
from bench_common import MOUNT_TIMEOUT, BenchError, fmt_bytes, log, tree_bytes
from bench_dataset import tree_file_list
from bench_images import file_tail, pack_or_reuse
from bench_loader import LoaderServer, jpeg_dataset
from bench_mounts import Mount, run_measured, run_tool
from bench_netfs_pack import pack_line, pack_target, pack_vs_tar
import bench_plot
from bench_report import target_row
from bench_workloads import can_drop_caches, drop_caches

PATHS = ["loose_netfs", "shardfs", "loose_local"]
PATH_TITLES = {"loose_netfs": "loose on sshfs", "shardfs": "shardfs default",
               "loose_local": "loose local"}
TEMPS = ["cold", "warm"]
TARGET_RTT_MS = 1.0  # The targets are stated at a 1 ms round trip.


def add_args(ap):
    ap.add_argument("--netfs", action="store_true",
                    help="shards, index and the loose tree on a network filesystem instead "
                    "(bench_netfs.py): sshfs over a loopback sshd with a delay proxy")
    ap.add_argument("--netfs-rtts", default="0.2,1",
                    help="--netfs: round-trip delays in ms the proxy adds (0.2,1)")
    ap.add_argument("--netfs-samples", type=int, default=10000,
                    help="--netfs: samples per loader run (10000; 0: one whole epoch)")
    ap.add_argument("--netfs-count-samples", type=int, default=0,
                    help="--netfs: samples of the counted epochs (0: one whole epoch)")
    ap.add_argument("--netfs-shards", type=int, default=4,
                    help="--netfs: tar shards the dataset is packed into (4)")
    ap.add_argument("--netfs-pack-rtt", type=float,
                    help="--netfs: the delay (ms) at which pack and tar -cf are compared "
                    "(default: the largest of --netfs-rtts; 0: not at all)")
    ap.add_argument("--netfs-only", choices=["pack"],
                    help="--netfs: only this part (pack: the rig's raw bandwidth, then pack "
                    "against tar -cf, at --netfs-pack-rtt; no loader, index or counted runs)")


def finish_args(a, ap):
    """Checks the --netfs options; sets its defaults (files, work dir, shard size later)."""
    if a.views or a.remote or a.loader or a.cluster:
        ap.error("--netfs, --views, --remote, --loader and --cluster are separate runs")
    try:
        a.netfs_rtts = [float(x) for x in a.netfs_rtts.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--netfs-rtts: not a list of numbers: {a.netfs_rtts}")
    if not a.netfs_rtts or min(a.netfs_rtts) < 0:
        ap.error("--netfs-rtts: one delay or more, none negative")
    try:
        a.loader_workers = int(a.loader_workers)
    except ValueError:
        ap.error("--netfs takes one number for --loader-workers")
    if a.loader_workers < 1 or a.loader_batch < 1 or a.netfs_samples < 0 \
            or a.netfs_count_samples < 0 or a.netfs_shards < 1:
        ap.error("--loader-workers, --loader-batch and --netfs-shards must be positive, "
                 "--netfs-samples and --netfs-count-samples not negative")
    if a.netfs_pack_rtt is None:
        a.netfs_pack_rtt = max(a.netfs_rtts)
    if a.netfs_pack_rtt and a.netfs_pack_rtt not in a.netfs_rtts:
        ap.error("--netfs-pack-rtt must be one of --netfs-rtts (or 0)")
    if a.netfs_only == "pack" and not a.netfs_pack_rtt:
        ap.error("--netfs-only pack needs a --netfs-pack-rtt above 0")
    a.files = a.files or 40_000
    a.workdir = a.workdir or f"/var/tmp/shardfs-bench-netfs-{a.files}-{a.seed}"


def load_rig():
    """The network filesystem of the integration tests, tests/integration/netfs_testlib.py,
    imported from the source tree by path (not copied): the bench measures on the same sshd,
    sshfs options, delay proxy and server-side syscall count as test_netfs.py checks."""
    if not os.path.exists(os.path.join(TEST_RIG_DIR, "netfs_testlib.py")):
        raise BenchError(f"{TEST_RIG_DIR}/netfs_testlib.py missing: --netfs runs from a source "
                         "tree")
    use_test_rig()
    import netfs_testlib
    return netfs_testlib


def shard_size_for(tree, files, shards):
    """A --shard-size that packs `files` into `shards` tar shards: the tar bytes divided
    evenly, plus the largest member, so the greedy cut never needs one more."""
    total, largest = 1024, 0
    for rel in files:
        # Header, data, and a pax header (two blocks) for the sub-second mtime.
        member = 1536 + (os.lstat(os.path.join(tree, rel)).st_size + 511) // 512 * 512
        total += member
        largest = max(largest, member)
    total += 512 * len({os.path.dirname(r) for r in files}) * 2
    return str(math.ceil(total / shards) + largest + 4096)


class Rig:
    """The mounts of one run: sshfs of the export at NET, shardfs of NET/index at MNT, and
    the node-local cache under XDG. Everything it mounts, it unmounts (close())."""

    def __init__(self, a, netfs, scratch, xdg):
        self.a, self.netfs, self.xdg = a, netfs, xdg
        self.net = os.path.join(scratch, "net")
        self.mnt = os.path.join(scratch, "mnt")
        self.log = os.path.join(scratch, "mount.log")
        os.makedirs(self.net)
        os.makedirs(self.mnt)
        self.sshfs = None
        self.shardfs = None

    def index(self):
        return os.path.join(self.net, "index")

    def mount_shardfs(self):
        """A default `shardfs mount` (no -o) of NET/index; returns ms to the root answering."""
        self.unmount_shardfs()
        m = Mount("shardfs", self.mnt, [self.a.shardfs, "mount", "-f", self.index(), self.mnt],
                  "fuse3", self.log)
        try:
            secs = m.mount(min(self.a.phase_timeout, MOUNT_TIMEOUT))
        except TimeoutError as e:
            raise BenchError(f"shardfs mount of {self.index()}: {e}")
        self.shardfs = m
        return secs * 1000.0

    def unmount_shardfs(self):
        if self.shardfs is not None:
            self.shardfs.unmount()
            self.shardfs = None

    def stop_sshfs(self):
        """Unmounts shardfs (which reads through sshfs), then sshfs. Returns the stopped
        SshfsMount (for a counted one, its syscalls) or None."""
        self.unmount_shardfs()
        m, self.sshfs = self.sshfs, None
        if m is not None:
            problem = m.stop()
            if problem:
                log(f"sshfs: {problem}")
        return m

    def clear_cache(self):
        for name in os.listdir(self.xdg):
            p = os.path.join(self.xdg, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)

    def cold(self, shardfs=False, counted=False):
        """Everything cold (see the module's docstring); returns the shardfs mount's ms, or
        None."""
        self.stop_sshfs()
        self.clear_cache()
        drop_caches()
        self.sshfs = self.netfs.mount(self.net, count_syscalls=counted)
        return self.mount_shardfs() if shardfs else None

    def stats(self):
        rc, out, err, _ = run_tool([self.a.shardfs, "stats", "--json", self.mnt], timeout=60)
        if rc != 0:
            return {"error": (err or out).decode(errors="replace").strip()[-400:]}
        try:
            return json.loads(out)
        except ValueError as e:
            return {"error": f"shardfs stats --json: {e}"}

    def close(self):
        self.stop_sshfs()


def netfs_rig():
    """The integration tests' network filesystem, after checking root, cold runs and its
    tools; BenchError saying what is missing."""
    if os.geteuid() != 0:
        raise BenchError("--netfs needs root: it runs sshd, sshfs and strace, and drops caches")
    can_cold, why = can_drop_caches()
    if not can_cold:
        raise BenchError(f"--netfs needs cold runs: {why}")
    nl = load_rig()
    try:
        nl.require_tools()
    except RuntimeError as e:
        raise BenchError(str(e))
    return nl


def netfs_pack(a, ddir, tree, files, scratch):
    """The shards (--netfs-shards of them unless --shard-size is given) and their index;
    returns (pack, build row)."""
    if a.shard_size == "256MiB":  # Not given: --netfs-shards decides.
        a.shard_size = shard_size_for(tree, files, a.netfs_shards)
    pdir, pack = pack_or_reuse(a, ddir, tree, files, scratch)
    build = {"pack_method": pack["method"], "pack_seconds": pack["pack_seconds"],
             "pack_cached": pack["cached"], "shards": len(pack["shards"]),
             "shard_size": a.shard_size,
             "shard_bytes": sum(os.path.getsize(p) for p in pack["shards"]),
             "index_bytes": tree_bytes(pack["index"])[0]}
    log(f"pack: {pack['method']}: {pack['pack_seconds']:.2f} s, {build['shards']} shards")
    return pack, build


def run_rtt(a, rig, server, scratch, tree, build, rtt):
    """At one round-trip delay: the index build on sshfs against the local one, then one loader
    epoch per path, cold then warm; returns (the per-rtt row, the runs by (path, temp))."""
    log(f"rtt {rtt:g} ms")
    r = {"rtt_ms": rtt}
    r["index_build_netfs_seconds"] = netfs_index_build(a, rig, scratch)
    r["index_build_local_seconds"] = build["index_build_local_seconds"]
    r["index_build_ratio"] = r["index_build_netfs_seconds"] / build["index_build_local_seconds"]
    roots = {"loose_netfs": os.path.join(rig.net, "loose", "train"),
             "shardfs": os.path.join(rig.mnt, "train"),
             "loose_local": os.path.join(tree, "train")}
    runs = {}
    for path in PATHS:
        req = {"root": roots[path], "mode": "decode", "workers": a.loader_workers,
               "batch": a.loader_batch, "samples": a.netfs_samples, "seed": a.seed, "size": 224}
        for temp in TEMPS:
            if temp == "cold":
                ms = rig.cold(shardfs=path == "shardfs")
                if ms is not None:
                    r["mount_cold_ms"] = ms
            runs[(path, temp)] = run = server.run(req)
            log(f"rtt {rtt:g} ms {PATH_TITLES[path]:<16} {temp}: "
                f"{run['samples_per_s']:,.0f} samples/s ({run['samples']:,} samples, "
                f"{run['seconds']:.1f} s, scan {run['scan_seconds']:.2f} s, first batch "
                f"{run['first_batch_seconds']:.2f} s)")
        if path == "shardfs":
            r["stats"] = rig.stats()
            r["mount_warm_ms"] = rig.mount_shardfs()  # Cache holds the index.
            rig.unmount_shardfs()
    return r, runs


def measure_netfs(a, nl, server, scratch, tree, pack, build, nfiles, xdg):
    """Everything measured on the network filesystem: each --netfs-rtts delay, the pack
    comparison at --netfs-pack-rtt, the counted epoch at the smallest delay. Returns (rows,
    per-rtt rows, metadata counts, pack comparison or None)."""
    rows, per_rtt, pack_cmp = [], [], None
    with nl.NetFs(rtt_ms=a.netfs_rtts[0], prefix="netfs-", parent=scratch) as netfs:
        rig = Rig(a, netfs, scratch, xdg)
        try:
            build |= place_on_server(netfs, tree, pack["shards"])
            build["index_build_local_seconds"] = local_index_build(a, pack["shards"], scratch)
            for rtt in a.netfs_rtts:
                netfs.set_rtt(rtt)
                r, runs = run_rtt(a, rig, server, scratch, tree, build, rtt)
                rows += make_rows(rtt, runs)
                if rtt == a.netfs_pack_rtt:
                    pack_cmp = pack_vs_tar(a, rig, scratch, nfiles, rtt)
                per_rtt.append(r)
            netfs.set_rtt(min(a.netfs_rtts))
            metadata = count_epoch(a, rig, server, min(a.netfs_rtts))
        finally:
            rig.close()
    return rows, per_rtt, metadata, pack_cmp


def run_netfs(a, scratch):
    """The network-storage run; 1 if a path read other samples or the pack did not verify."""
    if a.netfs_only == "pack":
        return run_netfs_pack(a, scratch)
    nl = netfs_rig()
    loadavg_start = os.getloadavg()
    notes = []
    ddir, meta = jpeg_dataset(a, scratch)
    tree = os.path.join(ddir, "tree")
    files = tree_file_list(tree)
    pack, build = netfs_pack(a, ddir, tree, files, scratch)
    # The default chunk cache and index copy go under $XDG_CACHE_HOME/shardfs: the run's own,
    # inherited by every mount, never the user's home.
    xdg = os.path.join(scratch, "xdg-cache")
    os.makedirs(xdg, mode=0o700)
    os.environ["XDG_CACHE_HOME"] = xdg
    build["cache_dir"] = os.path.join(xdg, "shardfs")

    server = LoaderServer(a.loader_python, scratch, os.path.join(scratch, "loader.log"),
                          a.phase_timeout)
    try:
        rows, per_rtt, metadata, pack_cmp = measure_netfs(a, nl, server, scratch, tree, pack,
                                                          build, len(files), xdg)
        server.close()
    except BaseException:
        server.close(kill=True)  # Do not wait for a running epoch on an error or Ctrl-C.
        raise

    content_ok = all(row["same_samples"] for row in rows)
    if os.cpu_count() and os.cpu_count() <= 2:
        notes.append(f"{os.cpu_count()} CPUs: decode, sshfs, sshd, the delay proxy and the "
                     "mount share them")
    report = {
        "schema": "shardfs-bench-netfs/1",
        "params": {"files": a.files, "classes": a.classes, "seed": a.seed,
                   "rtts_ms": a.netfs_rtts, "workers": a.loader_workers,
                   "batch": a.loader_batch, "samples": a.netfs_samples,
                   "count_samples": a.netfs_count_samples, "shards": a.netfs_shards,
                   "pack_rtt_ms": a.netfs_pack_rtt, "size": 224, "workdir": a.workdir},
        "environment": {"root": True, "cpus": os.cpu_count(), "kernel": platform.release(),
                        "loader_python": a.loader_python, "torch": server.info.get("torch"),
                        "torchvision": server.info.get("torchvision"),
                        "pil": server.info.get("pil"), "sshfs_options": nl.SSHFS_OPTIONS,
                        "loadavg_start": loadavg_start, "loadavg_end": os.getloadavg(),
                        "notes": notes,
                        "cold": "shardfs and sshfs unmounted, node-local cache emptied, page "
                                "cache dropped (client and server), sshfs mounted anew, a "
                                "fresh shardfs mount"},
        "dataset": {k: meta[k] for k in ("samples", "files", "dirs", "bytes")}
        | {"cached": meta.get("cached", False), "path": tree},
        "build": build,
        "content": "ok" if content_ok else "FAILED",
        "rows": rows,
        "per_rtt": per_rtt,
        "metadata": metadata,
        "pack": pack_cmp,
    }
    report["targets"] = netfs_targets(report)
    write_report_json(a.json_out, report)
    print_netfs_report(report)
    if a.plot:
        bench_plot.plot(a, report, scratch)
    failed = not content_ok or (pack_cmp is not None and not pack_cmp["verify_ok"])
    return 1 if failed else 0


def place_on_server(netfs, tree, shards):
    """The server's own disk (the export): the loose tree and the shards, copied with their
    metadata (shutil.copy2)."""
    start = time.perf_counter()
    export = netfs.export
    shutil.copytree(tree, os.path.join(export, "loose"), symlinks=True)
    os.mkdir(os.path.join(export, "shards"))
    for s in shards:
        shutil.copy2(s, os.path.join(export, "shards", os.path.basename(s)))
    secs = time.perf_counter() - start
    log(f"copied the loose tree and {len(shards)} shards into the export in {secs:.1f} s")
    return {"copy_to_server_seconds": secs}


def timed_build(a, shards, out, log_path):
    rc, secs, _, _ = run_measured([a.shardfs, "index", "build", "--quiet", "--out", out]
                                  + shards, timeout=a.phase_timeout, log_path=log_path)
    if rc != 0:
        raise BenchError(f"shardfs index build --out {out} exited {rc}: {file_tail(log_path)}")
    return secs


def local_index_build(a, shards, scratch):
    """The shards on local disk into an index on local disk, page cache dropped first."""
    out = os.path.join(scratch, "index-local")
    drop_caches()
    secs = timed_build(a, shards, out, os.path.join(scratch, "index-build.log"))
    shutil.rmtree(out)
    log(f"index build, local: {secs:.2f} s")
    return secs


def netfs_index_build(a, rig, scratch):
    """The shards on sshfs into NET/index (on sshfs), cold; the index the mounts then use."""
    old = os.path.join(rig.netfs.export, "index")
    rig.stop_sshfs()
    if os.path.exists(old):
        shutil.rmtree(old)  # On the server's side: an earlier delay's build.
    rig.cold()
    shards = sorted(os.path.join(rig.net, "shards", n)
                    for n in os.listdir(os.path.join(rig.net, "shards")))
    secs = timed_build(a, shards, rig.index(), os.path.join(scratch, "index-build.log"))
    log(f"index build over sshfs: {secs:.2f} s")
    return secs


def run_netfs_pack(a, scratch):
    """--netfs-only pack: the loose tree alone on the server, then pack_vs_tar at
    --netfs-pack-rtt; 1 if the pack did not verify."""
    nl = netfs_rig()
    loadavg_start = os.getloadavg()
    ddir, meta = jpeg_dataset(a, scratch)
    tree = os.path.join(ddir, "tree")
    files = tree_file_list(tree)
    if a.shard_size == "256MiB":  # Not given: --netfs-shards decides, as in the whole run.
        a.shard_size = shard_size_for(tree, files, a.netfs_shards)
    xdg = os.path.join(scratch, "xdg-cache")
    os.makedirs(xdg, mode=0o700)
    with nl.NetFs(rtt_ms=a.netfs_pack_rtt, prefix="netfs-", parent=scratch) as netfs:
        rig = Rig(a, netfs, scratch, xdg)
        try:
            place_on_server(netfs, tree, [])
            pk = pack_vs_tar(a, rig, scratch, len(files), a.netfs_pack_rtt)
        finally:
            rig.close()
    report = {"schema": "shardfs-bench-netfs-pack/1",
              "params": {"files": a.files, "classes": a.classes, "seed": a.seed,
                         "pack_rtt_ms": a.netfs_pack_rtt, "shard_size": a.shard_size},
              "environment": {"cpus": os.cpu_count(), "kernel": platform.release(),
                              "sshfs_options": nl.SSHFS_OPTIONS,
                              "loadavg_start": loadavg_start, "loadavg_end": os.getloadavg()},
              "dataset": {k: meta[k] for k in ("samples", "files", "dirs", "bytes")},
              "pack": pk, "targets": [pack_target(pk)]}
    write_report_json(a.json_out, report)
    env = report["environment"]
    t = report["targets"][0]
    print(f"\nshardfs bench --netfs --netfs-only pack ({env['cpus']} CPUs, load average at start "
          + "/".join(f"{x:.2f}" for x in env["loadavg_start"]) + ", at end "
          + "/".join(f"{x:.2f}" for x in env["loadavg_end"]) + ")\n  " + pack_line(pk)
          + f"\n  {t['target']}: {t['value']:.2f}x >= 8x {t['status']}\n", flush=True)
    return 0 if pk["verify_ok"] else 1


def count_epoch(a, rig, server, rtt):
    """One cold epoch of (a) and of (b), raw reads (the same opens, no decode), each on a
    counted sshfs mount: the server's metadata calls on the export."""
    out = {"rtt_ms": rtt, "mode": "raw", "samples": None}
    for path, root in (("loose_netfs", os.path.join(rig.net, "loose", "train")),
                       ("shardfs", os.path.join(rig.mnt, "train"))):
        rig.cold(shardfs=path == "shardfs", counted=True)
        run = server.run({"root": root, "mode": "raw", "workers": a.loader_workers,
                          "batch": a.loader_batch, "samples": a.netfs_count_samples,
                          "seed": a.seed, "size": 224})
        m = rig.stop_sshfs()
        calls = m.export_syscalls()
        out["samples"] = run["samples"]
        out[path] = {"calls": sum(calls.values()), "by_syscall": calls,
                     "samples_per_s": run["samples_per_s"], "checksum": run["checksum"]}
        log(f"counted epoch, {PATH_TITLES[path]}: {run['samples']:,} samples, "
            f"{sum(calls.values()):,} metadata calls on the server")
    lo, sh = out["loose_netfs"]["calls"], out["shardfs"]["calls"]
    out["ratio"] = sh / lo if lo else None
    out["same_samples"] = out["loose_netfs"]["checksum"] == out["shardfs"]["checksum"]
    return out


def make_rows(rtt, runs):
    rows = []
    for temp in TEMPS:
        ref = runs[("loose_local", temp)]["checksum"]
        row = {"rtt_ms": rtt, "temp": temp, "samples": runs[("loose_local", temp)]["samples"],
               "same_samples": all(runs[(p, temp)]["checksum"] == ref for p in PATHS)}
        for p in PATHS:
            r = runs[(p, temp)]
            row[p] = {k: r[k] for k in ("samples_per_s", "seconds", "scan_seconds",
                                        "first_batch_seconds", "io_share", "bytes")}
        rate = {p: row[p]["samples_per_s"] for p in PATHS}
        ok = row["same_samples"]
        row["ratio_netfs"] = rate["shardfs"] / rate["loose_netfs"] if ok else None
        row["ratio_local"] = rate["shardfs"] / rate["loose_local"] if ok else None
        row["status"] = "ok" if ok else "FAILED"
        rows.append(row)
    return rows


def netfs_targets(report):
    rtts = report["params"]["rtts_ms"]
    rtt = TARGET_RTT_MS if TARGET_RTT_MS in rtts else max(rtts)
    at = f" ({rtt:g} ms)"
    by = {r["temp"]: r for r in report["rows"] if r["rtt_ms"] == rtt}
    pr = next(r for r in report["per_rtt"] if r["rtt_ms"] == rtt)
    md, pk = report["metadata"], report["pack"]
    out = [
        target_row("cold: shardfs vs loose on local disk" + at,
                   by["cold"]["ratio_local"], ">=", 0.9, "x"),
        target_row("cold: shardfs vs loose on sshfs" + at,
                   by["cold"]["ratio_netfs"], ">=", 5.0, "x"),
        target_row("warm: shardfs vs loose on local disk" + at,
                   by["warm"]["ratio_local"], ">=", 0.95, "x"),
        target_row("index build over sshfs vs local" + at, pr["index_build_ratio"], "<=", 2.0,
                   "x"),
        target_row("mount, cold (index copied to the cache)" + at, pr.get("mount_cold_ms"),
                   "<=", 100.0, "ms"),
        target_row("mount, warm (index copy reused)" + at, pr.get("mount_warm_ms"), "<=",
                   100.0, "ms"),
        target_row("server metadata calls: shardfs vs loose",
                   None if md is None or md["ratio"] is None else md["ratio"] * 100, "<=", 1.0,
                   "%"),
        pack_target(pk),
    ]
    if pk is not None and not pk["verify_ok"]:
        out[-1]["status"] = "not met"
    return out


def fmt_rate(v):
    return "-" if v is None else f"{v:,.0f}"


def fmt_x(v):
    return "-" if v is None else f"{v:.2f}x"


def print_netfs_report(report, out=sys.stdout):
    p, d, b, env = report["params"], report["dataset"], report["build"], report["environment"]
    w = out.write
    w("\nshardfs bench --netfs (sshfs over a loopback sshd + delay proxy; shards, index and a "
      "loose copy on it)\n")
    w(f"  dataset: {d['samples']:,} JPEGs, {fmt_bytes(d['bytes'])}, {p['classes']} classes, "
      f"seed {p['seed']}{' (cached)' if d.get('cached') else ''}; {b['shards']} shards, "
      f"{fmt_bytes(b['shard_bytes'])}\n")
    per_run = f"{p['samples']:,} samples" if p["samples"] else "one whole epoch"
    w(f"  loader:  torch {env['torch']}, torchvision {env['torchvision']}: unmodified "
      f"ImageFolder + DataLoader, shuffle=True, {p['workers']} workers, batch {p['batch']}, "
      f"decode + resize {p['size']}, {per_run} per run (the same samples on every path)\n")
    w(f"  machine: {env['cpus']} CPUs, kernel {env['kernel']}, load average at start "
      + "/".join(f"{x:.2f}" for x in env["loadavg_start"]) + ", at end "
      + "/".join(f"{x:.2f}" for x in env["loadavg_end"]) + "\n")
    w(f"  cold:    {env['cold']}; warm: the same mounts again, caches kept\n")
    w(f"  sshfs:   -o {','.join(env['sshfs_options'])} (netfs_testlib), node-local cache "
      f"{b['cache_dir']}\n")
    for n in env["notes"]:
        w(f"  note: {n}\n")
    w("  samples read: " + ("same on every path\n" if report["content"] == "ok" else
                            "FAILED: the paths read other samples\n"))
    w(f"\n  {'rtt':>6} {'temp':<5} {'loose on sshfs':>15} {'shardfs':>10} {'loose local':>12} "
      f"{'shardfs/loose-sshfs':>20} {'shardfs/local':>14}   (samples/s)\n")
    for r in report["rows"]:
        w(f"  {r['rtt_ms']:>4g}ms {r['temp']:<5} "
          f"{fmt_rate(r['loose_netfs']['samples_per_s']):>15} "
          f"{fmt_rate(r['shardfs']['samples_per_s']):>10} "
          f"{fmt_rate(r['loose_local']['samples_per_s']):>12} "
          f"{fmt_x(r['ratio_netfs']) if r['status'] == 'ok' else 'FAILED':>20} "
          f"{fmt_x(r['ratio_local']) if r['status'] == 'ok' else 'FAILED':>14}\n")
    w(f"\n  {'rtt':>6} {'index build sshfs':>18} {'local':>8} {'ratio':>7} "
      f"{'mount cold':>11} {'mount warm':>11}   chunk cache after the warm run\n")
    for r in report["per_rtt"]:
        w(f"  {r['rtt_ms']:>4g}ms {r['index_build_netfs_seconds']:>16.2f} s "
          f"{r['index_build_local_seconds']:>6.2f} s {fmt_x(r['index_build_ratio']):>7} "
          f"{r.get('mount_cold_ms', 0):>8.1f} ms {r.get('mount_warm_ms', 0):>8.1f} ms   "
          f"{stats_line(r.get('stats'))}\n")
    md = report["metadata"]
    if md:
        ratio = "-" if md["ratio"] is None else f"{md['ratio']:.4%}"
        w(f"\n  server metadata calls, one cold epoch ({md['samples']:,} samples, raw reads, "
          f"rtt {md['rtt_ms']:g} ms): loose on sshfs {md['loose_netfs']['calls']:,}, shardfs "
          f"{md['shardfs']['calls']:,} ({ratio})"
          + ("" if md["same_samples"] else "  FAILED: other samples") + "\n")
        w(f"    shardfs: {calls_line(md['shardfs']['by_syscall'])}\n")
        w(f"    loose:   {calls_line(md['loose_netfs']['by_syscall'])}\n")
    pk = report["pack"]
    if pk:
        w(f"\n  {pack_line(pk)}\n")
    w("\ntargets (network storage)\n")
    for t in report["targets"]:
        unit = t["unit"]
        v = "-" if t["value"] is None else (f"{t['value']:.2f}{unit}" if unit != "ms"
                                            else f"{t['value']:.1f} ms")
        goal = f"{t['goal']:g}{unit}" if unit != "ms" else f"{t['goal']:g} ms"
        note = f"  ({t['note']})" if t.get("note") else ""
        w(f"  {t['target']:<50} {v:>10}  {t['op']} {goal:<7} {t['status']}{note}\n")
    w("\n")
    out.flush()


def stats_line(s):
    """Hits, misses, bytes fetched against delivered, from `shardfs stats --json`."""
    if not s:
        return "-"
    if "error" in s:
        return f"stats: {s['error']}"
    keys = [("cache_hits", "hits"), ("cache_misses", "misses"),
            ("chunks_fetched", "chunks fetched"), ("chunks_fetched_ahead", "ahead"),
            ("range_reads", "reads fetched alone first"), ("demand_waits", "reads waited"),
            ("bytes_fetched", "fetched"), ("bytes_delivered", "delivered"),
            ("wait_timeouts", "wait timeouts"), ("fetch_errors", "fetch errors")]
    parts = []
    for k, label in keys:
        v = s.get(k)
        if isinstance(v, (int, float)) and (v or k not in ("wait_timeouts", "fetch_errors")):
            parts.append(f"{label} {fmt_bytes(v) if k.startswith('bytes') else f'{v:,}'}")
    return ", ".join(parts) or "-"


def calls_line(calls):
    return ", ".join(f"{k} {v:,}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])) \
        or "none"
