#!/usr/bin/env python3
"""shardfs benchmark: shardfs against the loose tree and its peers, same data, same run.

Usage (from the source tree, after `ninja -C build`):

    sudo python3 tools/bench/shardfs_bench.py --build-dir build [--files 100000] [--reps 3]
        [--systems loose,squashfuse,kernel,archivemount,raw,shardfs] [--json out.json]

What it does (see tools/bench/README.md for the full description):
  1. Generates a deterministic ImageNet-like tree train/<class>/<class>_<n>.jpg of incompressible
     bytes (log-normal sizes around --median-kib) with a JSON sidecar for a fraction of samples, and
     caches it in --workdir (default /var/tmp/shardfs-bench-<files>-<seed>) keyed by its
     parameters, so reruns reuse it. Also cached there: the squashfs image and the single tar.
  2. Packs it into ~256 MiB tar shards and indexes them (`shardfs pack` when the binary has it,
     else `tar` + `shardfs index build`), timing both.
  3. For each system measures mount time, a readdir walk, an lstat walk, a read of every file in
     tree order with one reader and in a fixed shuffled order with 4 readers, each warm and cold
     (caches dropped and a fresh mount before each cold run), after checking the content: the
     reader's checksum over all files must equal the loose tree's, else the system is FAILED.
  4. Prints a table with median [min..max], ratios against the loose tree of the same run and
     the issue's targets (met / not met); --json writes everything.

Cleanup: every mount made is unmounted, also on failure, Ctrl-C or SIGTERM; only processes the
script started are signalled. Needs root for drop_caches (cold runs) and loop mounts (kernel
squashfs); without root those parts are skipped and the report says so.

Disk: the tree, the shards, the squashfs image and the single tar each take about the dataset's
size (100,000 files ~ 1.3 GB each; 1,000,000 files ~ 13 GB each).

Python 3 standard library only.
"""

import argparse
import hashlib
import json
import math
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

GENERATOR_VERSION = 1
ALL_SYSTEMS = ["loose", "squashfuse", "kernel", "archivemount", "raw", "shardfs"]
PHASES = ["walk", "lstat", "read_tree1", "read_rand4"]
PHASE_TITLES = {
    "walk": "readdir walk",
    "lstat": "lstat walk",
    "read_tree1": "read tree order, 1 reader",
    "read_rand4": "read shuffled, 4 readers",
    "read_seq": "raw shard read, sequential",
}
MB = 1e6
MOUNT_TIMEOUT = 300.0  # Seconds; archivemount's budget is shorter.


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


class ContentMismatch(BenchError):
    """A system returned other bytes or metadata than the loose tree: it is FAILED."""


def parse_size(text):
    """'256MiB', '1GiB', '64M' (binary), '500MB' (decimal) or a byte count."""
    t = text.strip()
    units = [("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("KB", 10**3), ("MB", 10**6),
             ("GB", 10**9), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("B", 1)]
    for suffix, mult in units:
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


def fmt_bytes(n):
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def tree_bytes(path):
    """(apparent bytes, allocated bytes) of a file or a directory tree."""
    if os.path.isfile(path):
        st = os.stat(path)
        return st.st_size, st.st_blocks * 512
    apparent = allocated = 0
    for d, _, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(d, n))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


# ---------------------------------------------------------------------------------------------
# Processes and mounts. Everything started is recorded here so cleanup can end it, and only it.


class Registry:
    def __init__(self):
        self.mounts = []  # Mount objects still mounted (or whose daemon still runs).
        self.procs = set()  # Popen objects of running readers / builders (own sessions).

    def cleanup(self):
        for p in list(self.procs):
            kill_group(p)
        for m in list(reversed(self.mounts)):
            try:
                m.unmount()
            except Exception as e:  # Keep going: every other mount must still go.
                log(f"cleanup: {m.mountpoint}: {e}")


REG = Registry()


def kill_group(p):
    """SIGKILL the process group of a child we started in its own session, and reap it."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log(f"process {p.pid} did not exit after SIGKILL")
    REG.procs.discard(p)


def run_tool(argv, timeout=None, log_path=None):
    """Runs a command in its own session; returns (rc, stdout, stderr, seconds). rc None = timeout."""
    out = open(log_path, "ab") if log_path else None
    try:
        start = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE,
                             stderr=out if out else subprocess.PIPE, start_new_session=True)
        REG.procs.add(p)
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            return None, b"", b"", time.perf_counter() - start
        secs = time.perf_counter() - start
        REG.procs.discard(p)
        return p.returncode, so, se or b"", secs
    finally:
        if out:
            out.close()


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            if decode_mountinfo_path(line.split()[4]) == path:
                return True
    return False


def decode_mountinfo_path(field):
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = bytearray(), 0
    while i < len(field):
        if field[i] == 0x5C and field[i + 1:i + 4].isdigit() and i + 4 <= len(field):
            out.append(int(field[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return os.fsdecode(bytes(out))


def mounts_under(prefix):
    prefix = os.path.realpath(prefix).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            p = decode_mountinfo_path(line.split()[4])
            if (p + "/").startswith(prefix):
                found.append(p)
    return found


class Mount:
    """One mount made by the bench: a FUSE daemon in the foreground or a kernel mount."""

    def __init__(self, system, mountpoint, argv, kind, log_path):
        self.system = system
        self.mountpoint = mountpoint
        self.argv = argv
        self.kind = kind  # "fuse3", "fuse2" or "kernel"
        self.log_path = log_path
        self.proc = None
        self.seconds = None
        self.mounted = False

    def mount(self, timeout):
        """Launch until the root stats and is a mountpoint. Returns seconds; raises on failure."""
        REG.mounts.append(self)
        logf = open(self.log_path, "ab")
        try:
            start = time.perf_counter()
            if self.kind == "kernel":
                rc = subprocess.run(self.argv, stdout=logf, stderr=logf, timeout=timeout).returncode
                if rc != 0:
                    raise BenchError(f"{' '.join(self.argv)} exited {rc}; see {self.log_path}")
            else:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=logf,
                                             stderr=logf, start_new_session=True)
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    raise BenchError(f"{self.argv[0]} exited {self.proc.returncode} before "
                                     f"mounting; see {self.log_path}: {self.log_tail()}")
                if os.path.ismount(self.mountpoint):
                    os.stat(self.mountpoint)
                    break
                if time.perf_counter() - start > timeout:
                    raise TimeoutError(f"not mounted after {timeout:.0f} s")
                time.sleep(0.0002)
            self.seconds = time.perf_counter() - start
            self.mounted = True
            return self.seconds
        except BaseException:
            self.unmount()
            raise
        finally:
            logf.close()

    def log_tail(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-400:].decode(errors="replace").strip()
        except OSError:
            return ""

    def peak_rss_bytes(self):
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def unmount(self):
        if is_mounted(self.mountpoint):
            if self.kind == "kernel":
                attempts = [["umount", self.mountpoint], ["umount", "-l", self.mountpoint]]
            else:
                fm = "fusermount3" if self.kind == "fuse3" else "fusermount"
                attempts = [[fm, "-u", self.mountpoint]]
                if os.geteuid() == 0:
                    attempts.append(["umount", self.mountpoint])
                attempts.append([fm, "-u", "-z", self.mountpoint])
            for argv in attempts:
                if shutil.which(argv[0]) is None:
                    continue
                subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if not is_mounted(self.mountpoint):
                    break
            if is_mounted(self.mountpoint):
                log(f"could not unmount {self.mountpoint}")
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log(f"{self.argv[0]} (pid {self.proc.pid}) still running after unmount; "
                    "sending SIGTERM")
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self.mounted = False
        if self in REG.mounts:
            REG.mounts.remove(self)


# ---------------------------------------------------------------------------------------------
# Dataset: generation, caching, packing, images.


def dataset_key(a):
    params = {"v": GENERATOR_VERSION, "files": a.files, "classes": a.classes, "seed": a.seed,
              "median": a.median_kib, "sigma": a.sigma, "json": a.json_fraction}
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12], params


def class_names(n):
    return [f"n{1440764 + 7919 * c:08d}" for c in range(n)]


def generate_dataset(a, ddir):
    """Writes ddir/tree (atomically via tree.partial) and ddir/dataset.json. Deterministic."""
    key, params = dataset_key(a)
    meta_path = os.path.join(ddir, "dataset.json")
    tree = os.path.join(ddir, "tree")
    if os.path.exists(meta_path) and os.path.isdir(tree):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("params") == params:
            log(f"dataset: reusing {tree} ({meta['files']} files, {fmt_bytes(meta['bytes'])})")
            meta["cached"] = True
            return meta
    os.makedirs(ddir, exist_ok=True)
    partial = os.path.join(ddir, "tree.partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(tree, ignore_errors=True)
    rng = random.Random(a.seed)
    classes = class_names(a.classes)
    for c in classes:
        os.makedirs(os.path.join(partial, "train", c))
    median = a.median_kib * 1024
    mu = math.log(median)
    total = sidecars = 0
    start = time.perf_counter()
    step = max(1, a.files // 10)
    for i in range(a.files):
        cls = classes[i % a.classes]
        n = i // a.classes
        size = int(rng.lognormvariate(mu, a.sigma))
        size = max(256, min(size, 64 * median))
        base = os.path.join(partial, "train", cls, f"{cls}_{n}")
        with open(base + ".jpg", "wb") as f:
            f.write(rng.randbytes(size))
        total += size
        if rng.random() < a.json_fraction:
            side = json.dumps({"class": cls, "label": i % a.classes, "index": n,
                               "width": rng.randrange(200, 1200),
                               "height": rng.randrange(200, 1200),
                               "bbox": [rng.randrange(100) for _ in range(4)]},
                              sort_keys=True).encode() + b"\n"
            with open(base + ".json", "wb") as f:
                f.write(side)
            total += len(side)
            sidecars += 1
        if (i + 1) % step == 0:
            log(f"dataset: {i + 1}/{a.files} samples")
    os.rename(partial, tree)
    meta = {"params": params, "key": key, "samples": a.files, "sidecars": sidecars,
            "files": a.files + sidecars, "dirs": 1 + a.classes, "bytes": total,
            "generate_seconds": time.perf_counter() - start}
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f, indent=1)
    os.rename(meta_path + ".tmp", meta_path)
    log(f"dataset: generated {meta['files']} files, {fmt_bytes(total)} in "
        f"{meta['generate_seconds']:.1f} s")
    meta["cached"] = False
    return meta


def tree_file_list(tree):
    """Relative paths of every file, sorted bytewise: the tree order used everywhere."""
    out = []
    for d, dirs, names in os.walk(tree):
        rel = os.path.relpath(d, tree)
        for n in names:
            out.append(n if rel == "." else f"{rel}/{n}")
    out.sort(key=os.fsencode)
    return out


def shardfs_has_pack(shardfs):
    try:
        return subprocess.run([shardfs, "pack", "--help"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pack_dataset(a, tree, files, out, scratch):
    """Packs `tree` into shards + an index under `out`. The one place that chooses how."""
    method = a.pack_method
    if method == "auto":
        method = "pack" if shardfs_has_pack(a.shardfs) else "tar"
    if method == "pack":
        return pack_with_shardfs_pack(a, tree, out, scratch)
    return pack_with_tar(a, tree, files, out)


def find_shards(out):
    shards = []
    for d, dirs, names in os.walk(out):
        if d == out and "index" in dirs:
            dirs.remove("index")  # The RocksDB index, not a shard directory.
        shards += [os.path.join(d, n) for n in names if n.endswith(".tar")]
    return sorted(shards)


def file_tail(path, n=600):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace").strip()
    except OSError:
        return ""


def index_build(a, shards, index_dir, log_path):
    argv = [a.shardfs, "index", "build", "--quiet", "--out", index_dir] + shards
    rc, _, _, secs = run_tool(argv, log_path=log_path)
    if rc != 0:
        raise BenchError(f"shardfs index build exited {rc}: {file_tail(log_path)}")
    return secs


def pack_with_shardfs_pack(a, tree, out, scratch):
    log_path = os.path.join(scratch, "pack.log")
    rc, _, _, secs = run_tool([a.shardfs, "pack", tree, "--out", out, "--shard-size",
                               a.shard_size], log_path=log_path)
    if rc != 0:
        raise BenchError(f"shardfs pack exited {rc}: {file_tail(log_path)}")
    shards = find_shards(out)
    if not shards or not os.path.isdir(os.path.join(out, "index")):
        raise BenchError(f"shardfs pack left no OUT/index or no *.tar shards in {out}")
    # The index-build time on its own: index the same shards again into scratch.
    tmp_index = os.path.join(scratch, "index-rebuild")
    ib = index_build(a, shards, tmp_index, log_path)
    shutil.rmtree(tmp_index, ignore_errors=True)
    return {"method": "shardfs pack", "pack_seconds": secs, "index_build_seconds": ib,
            "index": os.path.join(out, "index"), "shards": shards}


def pack_with_tar(a, tree, files, out):
    """Fallback until `shardfs pack` exists: GNU tar per ~shard-size group, then index build."""
    limit = parse_size(a.shard_size)
    groups, cur, cur_bytes, seen_dirs = [], [], 0, set()
    for rel in files:
        size = os.lstat(os.path.join(tree, rel)).st_size
        member = 512 + (size + 511) // 512 * 512
        if cur and cur_bytes + member > limit:
            groups.append(cur)
            cur, cur_bytes = [], 0
        parts = rel.split("/")
        for k in range(1, len(parts)):
            d = "/".join(parts[:k])
            if d not in seen_dirs:
                seen_dirs.add(d)
                cur.append(d)
                cur_bytes += 512
        cur.append(rel)
        cur_bytes += member
    if cur:
        groups.append(cur)
    log_path = os.path.join(out, "pack.log")
    start = time.perf_counter()
    shards = []
    for i, g in enumerate(groups):
        lst = os.path.join(out, f"shard-{i:05d}.list")
        with open(lst, "w") as f:
            f.write("\n".join(g) + "\n")
        shard = os.path.join(out, f"shard-{i:05d}.tar")
        rc, _, _, _ = run_tool(["tar", "-cf", shard, "-C", tree, "--no-recursion", "-T", lst],
                               log_path=log_path)
        if rc != 0:
            raise BenchError(f"tar exited {rc} for {shard}: {file_tail(log_path)}")
        os.unlink(lst)
        shards.append(shard)
    tar_secs = time.perf_counter() - start
    ib = index_build(a, shards, os.path.join(out, "index"), log_path)
    return {"method": "tar + shardfs index build (fallback: no shardfs pack)",
            "pack_seconds": tar_secs + ib, "index_build_seconds": ib,
            "index": os.path.join(out, "index"), "shards": shards}


def cached_artifact(ddir, name, build):
    """Builds ddir/name once (via name.partial) and records how long it took."""
    path = os.path.join(ddir, name)
    meta_path = path + ".json"
    if os.path.exists(path) and os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        meta["cached"] = True
        return path, meta
    partial = path + ".partial"
    if os.path.exists(partial):
        os.unlink(partial)
    start = time.perf_counter()
    extra = build(partial) or {}
    meta = {"seconds": time.perf_counter() - start, "bytes": os.path.getsize(partial), **extra}
    os.rename(partial, path)
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    meta["cached"] = False
    return path, meta


def squashfs_comp():
    try:
        p = subprocess.run(["mksquashfs", "-help"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
        text = p.stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return None
    return "lz4" if "\tlz4" in text or " lz4" in text else "gzip"


def build_squashfs(tree, ddir, log_path):
    comp = squashfs_comp()

    def build(out):
        argv = ["mksquashfs", tree, out, "-noappend", "-no-progress", "-quiet"]
        if comp == "lz4":
            argv += ["-comp", "lz4"]
        rc, _, _, _ = run_tool(argv, log_path=log_path)
        if rc != 0:
            raise BenchError(f"mksquashfs exited {rc}: {file_tail(log_path)}")
        return {"comp": comp}

    return cached_artifact(ddir, f"image-{comp}.squashfs", build)


def build_single_tar(tree, ddir, log_path):
    def build(out):
        rc, _, _, _ = run_tool(["tar", "-cf", out, "--sort=name", "-C", tree, "train"],
                               log_path=log_path)
        if rc != 0:
            raise BenchError(f"tar exited {rc}: {file_tail(log_path)}")

    return cached_artifact(ddir, "whole.tar", build)


# ---------------------------------------------------------------------------------------------
# Measuring.


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def can_drop_caches():
    if os.geteuid() != 0:
        return False, "not root: cannot write /proc/sys/vm/drop_caches"
    try:
        drop_caches()
        return True, ""
    except OSError as e:
        return False, f"drop_caches not allowed here: {e}"


class Figure:
    """Samples of one measurement of one system. Reads keep files/bytes for rates."""

    def __init__(self, phase, temp):
        self.phase = phase
        self.temp = temp  # "warm" | "cold" | "" (mounts)
        self.samples = []  # seconds
        self.files = 0
        self.bytes = 0
        self.status = "ok"  # ok | timeout | skipped | failed | not run
        self.note = ""

    @property
    def is_read(self):
        return self.phase.startswith("read")

    def values(self):
        """What the table reports: files/s for reads, MB/s for raw, ms for walks and mounts."""
        if self.phase == "read_seq":
            return [self.bytes / s / MB for s in self.samples if s > 0]
        if self.is_read:
            return [self.files / s for s in self.samples if s > 0]
        return [s * 1000 for s in self.samples]

    def unit(self):
        if self.phase == "read_seq":
            return "MB/s"
        if self.is_read:
            return "files/s"
        return "ms"

    def median(self):
        v = self.values()
        return statistics.median(v) if v and self.status == "ok" else None

    def mb_per_s(self):
        if not self.samples or self.status != "ok":
            return None
        return statistics.median([self.bytes / s / MB for s in self.samples if s > 0])

    def to_json(self):
        v = self.values()
        ok = self.status == "ok" and v
        return {"phase": self.phase, "temp": self.temp, "unit": self.unit(),
                "status": self.status, "note": self.note, "samples_seconds": self.samples,
                "files": self.files, "bytes": self.bytes,
                "median": statistics.median(v) if ok else None,
                "min": min(v) if ok else None, "max": max(v) if ok else None,
                "mb_per_s_median": self.mb_per_s() if self.is_read else None}


class SystemRun:
    def __init__(self, name, label):
        self.name = name
        self.label = label
        self.status = "ok"  # ok | FAILED | timeout | skipped | error
        self.reason = ""
        self.checksum = None
        self.figures = {}
        self.rss_bytes = None
        self.info = {}

    def fig(self, phase, temp):
        key = f"{phase}_{temp}" if temp else phase
        if key not in self.figures:
            self.figures[key] = Figure(phase, temp)
        return self.figures[key]

    def to_json(self, loose=None):
        figures = {}
        for k, f in self.figures.items():
            figures[k] = f.to_json()
            if f.phase not in ("mount", "read_seq") and self.name != "loose":
                figures[k]["ratio_vs_loose"] = ratio(self, loose, k)
        return {"label": self.label, "status": self.status, "reason": self.reason,
                "checksum": self.checksum, "peak_rss_bytes": self.rss_bytes,
                "info": self.info, "figures": figures}


class PhaseTimeout(Exception):
    pass


class Bench:
    def __init__(self, a, ddir, scratch, meta, files, can_cold):
        self.a = a
        self.ddir = ddir
        self.tree = os.path.join(ddir, "tree")
        self.scratch = scratch
        self.meta = meta
        self.can_cold = can_cold
        self.lists = {}
        self.write_list("tree", files)
        shuffled = list(files)
        random.Random(a.seed + 1).shuffle(shuffled)
        self.write_list("rand", shuffled)
        self.reference = {}

    def write_list(self, name, paths):
        path = os.path.join(self.scratch, f"{name}.list")
        with open(path, "w") as f:
            f.write("\n".join(paths) + "\n")
        self.lists[name] = path

    def reader(self, mode, root, budget, list_name=None, procs=1):
        argv = [self.a.bench_reader, mode]
        if list_name:
            argv.append(self.lists[list_name])
        if root:
            argv += ["--root", root]
        if procs != 1:
            argv += ["--procs", str(procs)]
        rc, so, se, _ = run_tool(argv, timeout=budget)
        if rc is None:
            raise PhaseTimeout(f"{mode} took longer than {budget:.0f} s")
        try:
            r = json.loads(so.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise BenchError(f"bench_reader {mode} exited {rc} without a result: "
                             f"{se.decode(errors='replace').strip()}")
        r["rc"] = rc
        return r

    def run_phase(self, phase, root, budget):
        if phase == "walk":
            return self.reader("walk", root, budget)
        if phase == "lstat":
            return self.reader("lstat", root, budget, "tree")
        if phase == "read_tree1":
            return self.reader("read", root, budget, "tree")
        if phase == "read_rand4":
            return self.reader("read", root, budget, "rand", procs=self.a.procs)
        if phase == "read_seq":
            return self.reader("read", None, budget, "shards")
        raise ValueError(phase)

    def check(self, phase, r):
        """None when the result matches the loose tree's, else what differs."""
        if r.get("errors"):
            return f"{r['errors']} error(s), first: {r.get('first_error', '?')}"
        ref = self.reference.get("read" if phase.startswith("read") else phase)
        if phase == "read_seq" or ref is None:
            return None
        for k in ("files", "dirs", "bytes", "checksum"):
            if r[k] != ref[k]:
                return f"{k} {r[k]} != loose tree's {ref[k]}"
        return None

    def measure(self, s, phase, temp, root, budget, prepare=None):
        """Runs one sample of phase; records it in figure (phase, temp)."""
        f = s.fig(phase, temp)
        if f.status != "ok":
            return
        if prepare:
            prepare()
        try:
            r = self.run_phase(phase, root, budget)
        except PhaseTimeout as e:
            f.status, f.note = "timeout", str(e)
            return
        bad = self.check(phase, r)
        if bad:
            f.status, f.note = "failed", bad
            raise ContentMismatch(f"{phase} {temp}: {bad}")
        f.samples.append(r["seconds"])
        f.files, f.bytes = r["files"], r["bytes"]

    # -- the loose tree: the reference ---------------------------------------------------------

    def run_loose(self):
        s = SystemRun("loose", "loose tree")
        budget = self.a.phase_timeout
        log("loose: reference runs")
        for phase in ("walk", "lstat", "read"):
            r = self.run_phase("read_tree1" if phase == "read" else phase, self.tree, budget)
            if r.get("errors"):
                raise BenchError(f"loose tree {phase}: {r.get('first_error')}")
            self.reference[phase] = {k: r[k] for k in ("files", "dirs", "bytes", "checksum")}
        ref = self.reference
        if ref["read"]["files"] != self.meta["files"] or ref["read"]["bytes"] != self.meta["bytes"]:
            raise BenchError(f"the cached tree {self.tree} does not match dataset.json "
                             f"({ref['read']['files']} files, {ref['read']['bytes']} bytes); "
                             "delete the work dir and rerun")
        if ref["walk"]["files"] != self.meta["files"] or ref["walk"]["dirs"] != self.meta["dirs"]:
            raise BenchError("the loose tree's walk does not match dataset.json")
        s.checksum = ref["read"]["checksum"]
        for rep in range(self.a.reps):
            for phase in PHASES:
                self.measure(s, phase, "warm", self.tree, budget)
        if self.can_cold:
            for rep in range(self.a.reps):
                for phase in PHASES:
                    self.measure(s, phase, "cold", self.tree, budget, prepare=drop_caches)
        return s

    def run_raw(self, shards):
        s = SystemRun("raw", "raw shard read")
        self.write_list("shards", shards)
        budget = self.a.phase_timeout
        total = sum(os.path.getsize(p) for p in shards)
        log(f"raw: sequential read of {len(shards)} shards ({fmt_bytes(total)})")
        r = self.run_phase("read_seq", None, budget)
        if r.get("errors") or r["bytes"] != total:
            s.status, s.reason = "FAILED", f"read {r['bytes']} of {total} bytes"
            return s
        for rep in range(self.a.reps):
            self.measure(s, "read_seq", "warm", None, budget)
        if self.can_cold:
            for rep in range(self.a.reps):
                self.measure(s, "read_seq", "cold", None, budget, prepare=drop_caches)
        s.info = {"shards": len(shards), "bytes": total}
        return s

    # -- mounted systems -----------------------------------------------------------------------

    def run_mounted(self, name, label, make_mount, budget):
        """Validates and measures one mounted system. make_mount() returns an unmounted Mount."""
        s = SystemRun(name, label)
        log(f"{name}: mounting")

        def mount(temp):
            m = make_mount()
            try:
                secs = m.mount(min(budget, MOUNT_TIMEOUT))
            except TimeoutError as e:
                raise PhaseTimeout(f"mount: {e}")
            if temp:
                s.fig("mount", temp).samples.append(secs)
            else:
                s.info["first_mount_ms"] = secs * 1000
            return m

        def note_rss(m):
            rss = m.peak_rss_bytes()
            if rss is not None:
                s.rss_bytes = max(s.rss_bytes or 0, rss)

        m = None
        try:
            # The first mount is not a warm sample: earlier cold runs may have dropped the
            # binary and its libraries from the page cache. Warm samples come after it.
            m = mount(None)
            root = m.mountpoint
            if self.a.hold:
                log(f"{name}: holding the mount {self.a.hold} s (--hold)")
                time.sleep(self.a.hold)
            # Content check first: nothing is timed before the bytes are known right.
            for phase in ("walk", "lstat", "read_tree1"):
                try:
                    r = self.run_phase(phase, root, budget)
                except PhaseTimeout as e:
                    for t in ("warm", "cold"):
                        for p in ([phase] if phase != "read_tree1" else ["read_tree1",
                                                                          "read_rand4"]):
                            f = s.fig(p, t)
                            f.status, f.note = "timeout", f"check run: {e}"
                    continue
                bad = self.check(phase, r)
                if bad:
                    s.status, s.reason = "FAILED", f"{phase}: {bad}"
                    if phase == "read_tree1":
                        s.checksum = r["checksum"]
                    log(f"{name}: FAILED: {s.reason}")
                    return s
                if phase == "read_tree1":
                    s.checksum = r["checksum"]
            if s.checksum is None:
                s.status = "timeout"
                s.reason = ("content not checked: the check read took longer than "
                            f"{budget:.0f} s; reads not timed")
            for rep in range(self.a.reps):
                for phase in PHASES:
                    self.measure(s, phase, "warm", root, budget)
            note_rss(m)
            m.unmount()
            m = None
            for rep in range(self.a.reps):  # Mount-time samples, caches warm.
                m = mount("warm")
                note_rss(m)
                m.unmount()
                m = None
            if self.can_cold:
                for rep in range(self.a.reps):
                    for phase in PHASES:
                        if s.fig(phase, "cold").status != "ok":
                            continue
                        drop_caches()
                        m = mount("cold")
                        self.measure(s, phase, "cold", m.mountpoint, budget)
                        note_rss(m)
                        m.unmount()
                        m = None
        except PhaseTimeout as e:
            s.status, s.reason = "timeout", str(e)
            log(f"{name}: timeout: {e}")
        except ContentMismatch as e:
            s.status, s.reason = "FAILED", str(e)
            log(f"{name}: FAILED: {e}")
        except BenchError as e:
            s.status, s.reason = "error", str(e)
            log(f"{name}: error: {e}")
        finally:
            if m is not None:
                note_rss(m)
                m.unmount()
        for f in s.figures.values():
            if f.status == "ok" and not f.samples and s.status != "ok":
                f.status = "not run"
        return s


# ---------------------------------------------------------------------------------------------
# Report.


def fmt_num(v, unit):
    if v is None:
        return "-"
    if unit == "files/s":
        return f"{v:,.0f}"
    if unit == "ms" and v < 10:
        return f"{v:.2f}"
    return f"{v:,.1f}"


def ratio(s, loose, key):
    """files/s (reads) or time (walks) of s over the loose tree's, same figure."""
    if loose is None or key not in s.figures or key not in loose.figures:
        return None
    a, b = s.figures[key].median(), loose.figures[key].median()
    if a is None or not b:
        return None
    return a / b


def compute_targets(systems):
    sh, lo, raw = systems.get("shardfs"), systems.get("loose"), systems.get("raw")
    targets = []

    def add(name, value, op, goal, unit, note=""):
        if value is None:
            status = "n/a"
        else:
            status = "met" if (value >= goal if op == ">=" else value <= goal) else "not met"
        targets.append({"target": name, "value": value, "op": op, "goal": goal, "unit": unit,
                        "status": status, "note": note})

    def r(key):
        return ratio(sh, lo, key) if sh and sh.status == "ok" else None

    add("warm read, tree order, 1 reader vs loose", r("read_tree1_warm"), ">=", 0.8, "x")
    add("warm read, shuffled, 4 readers vs loose", r("read_rand4_warm"), ">=", 0.8, "x")
    add("cold read, tree order, 1 reader vs loose", r("read_tree1_cold"), ">=", 3.0, "x")
    cold_mb = raw_mb = None
    if sh and sh.status == "ok" and "read_tree1_cold" in sh.figures:
        cold_mb = sh.figures["read_tree1_cold"].mb_per_s()
    if raw and raw.status == "ok" and "read_seq_cold" in raw.figures:
        raw_mb = raw.figures["read_seq_cold"].median()
    add("cold read, tree order, 1 reader MB/s vs raw shard MB/s",
        cold_mb / raw_mb if cold_mb and raw_mb else None, ">=", 0.8, "x")
    add("cold read, shuffled, 4 readers vs loose", r("read_rand4_cold"), ">=", 2.0, "x")
    add("lstat walk time, warm, vs loose", r("lstat_warm"), "<=", 1.2, "x")
    add("lstat walk time, cold, vs loose", r("lstat_cold"), "<=", 1.0, "x")
    for temp in ("warm", "cold"):
        v = None
        if sh and sh.status == "ok" and f"mount_{temp}" in sh.figures:
            v = sh.figures[f"mount_{temp}"].median()
        add(f"mount time ({temp} caches)", v, "<=", 50.0, "ms")
    rss = sh.rss_bytes / MB if sh and sh.rss_bytes else None
    add("daemon peak RSS (VmHWM)", rss, "<=", 100.0, "MB")
    return targets


def print_report(report, systems, out=sys.stdout):
    p = report["params"]
    d = report["dataset"]
    b = report["build"]
    env = report["environment"]
    w = out.write
    w("\nshardfs bench\n")
    w(f"  dataset: {d['samples']:,} samples + {d['sidecars']:,} sidecars = {d['files']:,} files, "
      f"{fmt_bytes(d['bytes'])}, {p['classes']} classes, median {p['median_kib']} KiB, "
      f"seed {p['seed']}{' (cached)' if d.get('cached') else ''}\n")
    w(f"  machine: {env['cpus']} CPUs, kernel {env['kernel']}, "
      f"{'root' if env['root'] else 'NOT root'}; reps {p['reps']}; readers {p['procs']} "
      "for the shuffled reads\n")
    if "pack_seconds" in b:
        w(f"  pack:    {b['pack_method']}: {b['pack_seconds']:.2f} s (index build "
          f"{b['index_build_seconds']:.2f} s); {b['shards']} shards, "
          f"{fmt_bytes(b['shard_bytes'])}; index {fmt_bytes(b['index_bytes'])} "
          f"({fmt_bytes(b['index_disk_bytes'])} on disk)\n")
    if "squashfs_seconds" in b:
        w(f"  squashfs: mksquashfs -comp {b['squashfs_comp']}: {b['squashfs_seconds']:.2f} s"
          f"{' (cached)' if b.get('squashfs_cached') else ''}, {fmt_bytes(b['squashfs_bytes'])}\n")
    if "tar_bytes" in b:
        w(f"  archivemount tar: {fmt_bytes(b['tar_bytes'])}; budget "
          f"{p['archivemount_budget']:.0f} s per phase\n")
    for sk in env["skipped"]:
        w(f"  SKIPPED: {sk}\n")
    for n in env.get("notes", []):
        w(f"  note: {n}\n")

    w("\nsystems\n")
    for name, s in systems.items():
        line = f"  {s.label:<28} {s.status:<8}"
        if s.checksum:
            line += f" checksum {s.checksum}"
        if s.reason:
            line += f"  ({s.reason})"
        if s.rss_bytes:
            line += f"  peak RSS {s.rss_bytes / MB:.1f} MB"
        w(line + "\n")

    loose = systems.get("loose")
    rows = [("mount", "warm"), ("mount", "cold")]
    rows += [(ph, t) for ph in PHASES for t in ("warm", "cold")]
    rows += [("read_seq", "warm"), ("read_seq", "cold")]
    w(f"\n  {'figure':<36} {'system':<22} {'unit':>7} {'median':>12} {'min..max':>23} "
      f"{'MB/s':>8} {'vs loose':>9}\n")
    for phase, temp in rows:
        key = f"{phase}_{temp}"
        title = f"{'mount time' if phase == 'mount' else PHASE_TITLES[phase]}, {temp}"
        first = True
        for name, s in systems.items():
            f = s.figures.get(key)
            if f is None:
                continue
            v = f.values()
            unit = f.unit()
            if f.status == "ok" and v:
                med = fmt_num(statistics.median(v), unit)
                rng = f"{fmt_num(min(v), unit)}..{fmt_num(max(v), unit)}"
            else:
                med, rng = (f.status if f.status != "failed" else "FAILED"), ""
            mbs = fmt_num(f.mb_per_s(), "MB/s") if f.is_read and f.phase != "read_seq" else ""
            rt = ""
            if name != "loose" and phase != "mount" and phase != "read_seq":
                rv = ratio(s, loose, key)
                rt = f"{rv:.2f}x" if rv is not None else "-"
            w(f"  {title if first else '':<36} {s.label:<22} {unit:>7} {med:>12} {rng:>23} "
              f"{mbs:>8} {rt:>9}\n")
            first = False
    w("  (vs loose: files/s ratio for reads, time ratio for walks; loose measured in this run)\n")

    w("\ntargets (shardfs)\n")
    for t in report["targets"]:
        v = "-" if t["value"] is None else (f"{t['value']:.2f}x" if t["unit"] == "x"
                                             else f"{t['value']:.1f} {t['unit']}")
        goal = f"{t['op']} {t['goal']:g}{'x' if t['unit'] == 'x' else ' ' + t['unit']}"
        w(f"  {t['target']:<56} {v:>10}  {goal:<10} {t['status']}\n")
    w("\n")
    out.flush()


# ---------------------------------------------------------------------------------------------


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    source_root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(
        prog="shardfs_bench.py",
        description="Benchmark shardfs against the loose tree, squashfuse, kernel squashfs, "
        "archivemount and raw shard reads on a generated ImageNet-like dataset.",
        epilog="Needs root for cold runs (drop_caches) and kernel squashfs (loop mount). "
        "See tools/bench/README.md.")
    ap.add_argument("--files", type=int, default=100_000, help="samples (default 100000)")
    ap.add_argument("--classes", type=int, default=100, help="class directories (default 100)")
    ap.add_argument("--seed", type=int, default=1, help="PRNG seed (default 1)")
    ap.add_argument("--median-kib", type=float, default=12.0, help="median file size (12)")
    ap.add_argument("--sigma", type=float, default=0.6, help="log-normal sigma of sizes (0.6)")
    ap.add_argument("--json-fraction", type=float, default=0.1,
                    help="fraction of samples with a JSON sidecar (0.1)")
    ap.add_argument("--workdir", help="cache and scratch dir "
                    "(default /var/tmp/shardfs-bench-<files>-<seed>)")
    ap.add_argument("--reps", type=int, default=3, help="samples of every figure (default 3)")
    ap.add_argument("--procs", type=int, default=4, help="readers for the shuffled read (4)")
    ap.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                    help=f"comma-separated subset of {','.join(ALL_SYSTEMS)}; the loose tree is "
                    "always measured (it is the reference)")
    ap.add_argument("--shard-size", default="256MiB", help="target shard size (256MiB)")
    ap.add_argument("--pack-method", choices=["auto", "pack", "tar"], default="auto",
                    help="auto: `shardfs pack` when it exists, else tar + index build")
    ap.add_argument("--reuse-pack", action="store_true",
                    help="reuse the shards and index of an earlier run (pack time is then the "
                    "recorded one)")
    ap.add_argument("--mount-options", default="", help="-o options for `shardfs mount`")
    ap.add_argument("--archivemount-budget", type=float, default=60.0,
                    help="seconds per archivemount phase before it is reported as timeout (60)")
    ap.add_argument("--phase-timeout", type=float, default=3600.0,
                    help="seconds per phase for the other systems (3600)")
    ap.add_argument("--build-dir", default=os.environ.get("SHARDFS_BUILD_ROOT",
                                                          os.path.join(source_root, "build")),
                    help="meson build dir holding src/shardfs and tools/bench/bench_reader")
    ap.add_argument("--shardfs", default=os.environ.get("SHARDFS"), help="shardfs binary")
    ap.add_argument("--bench-reader", help="bench_reader binary")
    ap.add_argument("--json", dest="json_out", help="write the full results here")
    ap.add_argument("--keep", action="store_true",
                    help="keep this run's scratch (mountpoints, lists, logs) in the work dir")
    ap.add_argument("--clean", action="store_true",
                    help="delete the whole work dir at the end, cached dataset included")
    ap.add_argument("--hold", type=float, default=0.0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.shardfs = a.shardfs or os.path.join(a.build_dir, "src", "shardfs")
    a.bench_reader = a.bench_reader or os.path.join(a.build_dir, "tools", "bench",
                                                    "bench_reader")
    a.systems = [x.strip() for x in a.systems.split(",") if x.strip()]
    bad = [x for x in a.systems if x not in ALL_SYSTEMS]
    if bad:
        ap.error(f"unknown system(s): {','.join(bad)}")
    if "loose" not in a.systems:
        a.systems.insert(0, "loose")
    if a.files < 1 or a.classes < 1 or a.reps < 1 or a.procs < 1:
        ap.error("--files, --classes, --reps and --procs must be positive")
    parse_size(a.shard_size)
    a.workdir = a.workdir or f"/var/tmp/shardfs-bench-{a.files}-{a.seed}"
    return a


def on_signal(signum, frame):
    raise SystemExit(128 + signum)


def main(argv):
    a = parse_args(argv)
    for exe in (a.shardfs, a.bench_reader):
        if not os.access(exe, os.X_OK):
            print(f"shardfs_bench: {exe} is not an executable; build first or pass "
                  "--build-dir/--shardfs/--bench-reader", file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    os.makedirs(a.workdir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="run-", dir=a.workdir)
    try:
        return run(a, scratch)
    except BenchError as e:
        log(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        # Cleanup must finish even if the user presses Ctrl-C again.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        REG.cleanup()
        left = mounts_under(scratch)
        for mnt in left:  # Last resort for anything mounted under our scratch dir.
            subprocess.run(["umount", "-l", mnt], stderr=subprocess.DEVNULL)
        if mounts_under(scratch):
            log(f"still mounted: {mounts_under(scratch)}; scratch {scratch} kept")
        elif a.clean:
            shutil.rmtree(a.workdir, ignore_errors=True)
        elif not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            log(f"kept {scratch}")
        signal.signal(signal.SIGINT, signal.default_int_handler)


def run(a, scratch):
    is_root = os.geteuid() == 0
    skipped, notes = [], []
    can_cold, why = can_drop_caches()
    if not can_cold:
        skipped.append(f"cold runs (all systems): {why}")
    key, params = dataset_key(a)
    ddir = os.path.join(a.workdir, f"dataset-{key}")
    meta = generate_dataset(a, ddir)
    tree = os.path.join(ddir, "tree")
    files = tree_file_list(tree)

    build = {}
    systems_wanted = list(a.systems)

    # Peers that cannot run here are reported, not silently dropped.
    skipped_systems = {}

    def skip(system, why):
        skipped.append(f"{system}: {why}")
        skipped_systems[system] = why
        systems_wanted.remove(system)

    def need(tool_names, system):
        for t in tool_names:
            if shutil.which(t):
                return t
        skip(system, f"{' or '.join(tool_names)} not installed")
        return None

    squashfuse_bin = need(["squashfuse_ll", "squashfuse"], "squashfuse") \
        if "squashfuse" in systems_wanted else None
    if "archivemount" in systems_wanted:
        need(["archivemount"], "archivemount")
    if "kernel" in systems_wanted and not is_root:
        skip("kernel", "squashfs loop mount needs root")
    if ("squashfuse" in systems_wanted or "kernel" in systems_wanted) \
            and not shutil.which("mksquashfs"):
        for sname in ("squashfuse", "kernel"):
            if sname in systems_wanted:
                skip(sname, "mksquashfs not installed")

    build_log = os.path.join(scratch, "build.log")
    pack = None
    if "shardfs" in systems_wanted or "raw" in systems_wanted:
        pdir = os.path.join(ddir, f"pack-{a.shard_size}")
        pmeta = os.path.join(pdir, "pack.json")
        if a.reuse_pack and os.path.exists(pmeta):
            with open(pmeta) as f:
                pack = json.load(f)
            pack["cached"] = True
            log(f"pack: reusing {pdir}")
        else:
            shutil.rmtree(pdir, ignore_errors=True)
            os.makedirs(pdir)
            log(f"pack: {len(files)} files into ~{a.shard_size} shards")
            pack = pack_dataset(a, tree, files, pdir, scratch)
            with open(pmeta, "w") as f:
                json.dump(pack, f)
            pack["cached"] = False
        idx_apparent, idx_alloc = tree_bytes(pack["index"])
        build.update({"pack_method": pack["method"], "pack_seconds": pack["pack_seconds"],
                      "index_build_seconds": pack["index_build_seconds"],
                      "pack_cached": pack["cached"], "index_bytes": idx_apparent,
                      "index_disk_bytes": idx_alloc, "shards": len(pack["shards"]),
                      "shard_bytes": sum(os.path.getsize(p) for p in pack["shards"])})
        log(f"pack: {pack['method']}: {pack['pack_seconds']:.2f} s, index "
            f"{fmt_bytes(idx_apparent)}")
    image = None
    if "squashfuse" in systems_wanted or "kernel" in systems_wanted:
        log("squashfs: building image (cached after the first run)")
        image, im = build_squashfs(tree, ddir, build_log)
        build.update({"squashfs_comp": im["comp"], "squashfs_seconds": im["seconds"],
                      "squashfs_bytes": im["bytes"], "squashfs_cached": im["cached"]})
    whole_tar = None
    if "archivemount" in systems_wanted:
        log("archivemount: building the single tar (cached after the first run)")
        whole_tar, tm = build_single_tar(tree, ddir, build_log)
        build.update({"tar_seconds": tm["seconds"], "tar_bytes": tm["bytes"]})

    bench = Bench(a, ddir, scratch, meta, files, can_cold)
    systems = {}
    mnt_root = os.path.join(scratch, "mnt")
    os.makedirs(mnt_root)

    def maker(name, argv_fn, kind):
        mp = os.path.join(mnt_root, name)
        os.makedirs(mp, exist_ok=True)
        log_path = os.path.join(scratch, f"{name}.log")
        return lambda: Mount(name, mp, argv_fn(mp), kind, log_path)

    systems["loose"] = bench.run_loose()
    for name in ALL_SYSTEMS[1:]:
        if name in skipped_systems:
            systems[name] = SystemRun(name, name)
            systems[name].status, systems[name].reason = "skipped", skipped_systems[name]
            continue
        if name not in systems_wanted:
            continue
        if name == "raw":
            systems["raw"] = bench.run_raw(pack["shards"])
        elif name == "squashfuse":
            systems[name] = bench.run_mounted(
                name, squashfuse_bin,
                maker(name, lambda mp: [squashfuse_bin, "-f", image, mp], "fuse3"),
                a.phase_timeout)
        elif name == "kernel":
            systems[name] = bench.run_mounted(
                name, "kernel squashfs",
                maker(name, lambda mp: ["mount", "-t", "squashfs", "-o", "loop,ro", image, mp],
                      "kernel"),
                a.phase_timeout)
        elif name == "archivemount":
            systems[name] = bench.run_mounted(
                name, "archivemount",
                maker(name, lambda mp: ["archivemount", "-f", "-o", "readonly", whole_tar, mp],
                      "fuse2"),
                a.archivemount_budget)
        elif name == "shardfs":
            opts = ["-o", a.mount_options] if a.mount_options else []
            systems[name] = bench.run_mounted(
                name, "shardfs",
                maker(name, lambda mp: [a.shardfs, "mount", "-f"] + opts + [pack["index"], mp],
                      "fuse3"),
                a.phase_timeout)
    if "squashfuse" in systems:
        systems["squashfuse"].info["binary"] = squashfuse_bin
    if "kernel" in systems and build.get("squashfs_comp"):
        systems["kernel"].info["comp"] = build["squashfs_comp"]

    if os.cpu_count() and os.cpu_count() <= 2:
        notes.append("2 CPUs or fewer: 4-reader figures are CPU-bound here")
    report = {
        "schema": "shardfs-bench/1",
        "params": {"files": a.files, "classes": a.classes, "seed": a.seed,
                   "median_kib": a.median_kib, "sigma": a.sigma,
                   "json_fraction": a.json_fraction, "reps": a.reps, "procs": a.procs,
                   "shard_size": a.shard_size, "systems": a.systems,
                   "archivemount_budget": a.archivemount_budget,
                   "mount_options": a.mount_options, "workdir": a.workdir},
        "environment": {"root": is_root, "cold_runs": can_cold, "cpus": os.cpu_count(),
                        "kernel": platform.release(), "python": platform.python_version(),
                        "shardfs": a.shardfs, "skipped": skipped, "notes": notes},
        "dataset": {k: meta[k] for k in ("samples", "sidecars", "files", "dirs", "bytes")}
        | {"cached": meta.get("cached", False), "path": tree},
        "build": build,
        "reference": bench.reference,
        "systems": {n: s.to_json(systems["loose"]) for n, s in systems.items()},
    }
    report["targets"] = compute_targets(systems)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(report, f, indent=1)
        log(f"wrote {a.json_out}")
    print_report(report, systems)
    bad = [n for n, s in systems.items() if s.status == "error"]
    if bad:
        log(f"errors in: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
