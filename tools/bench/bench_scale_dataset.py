"""--scale's dataset: N small files written straight into ~1 GiB GNU tar shards
(`train/<class>/<class>_<n>.jpg`, sizes log-normal around 700 bytes, 200..4096), cached in
/var/tmp/shardfs-scale-<N>-<seed>/ and reused when the parameters match.

The content of every file is a pure function of (seed, class, n), so the shards are written by
--gen-procs processes in parallel and any sample of files can be checked without a manifest.
"""

import json
import math
import multiprocessing
import os
import random
import shutil
import time

from bench_common import BenchError, fmt_bytes, log, parse_size
from bench_dataset import class_names

SCALE_GENERATOR_VERSION = 1
MTIME = 1_700_000_000
POOL_BYTES = 4 << 20
MIN_SIZE, MAX_SIZE = 200, 4096
MEDIAN_SIZE, SIGMA = 700, 0.6
MASK64 = (1 << 64) - 1

def mix64(x):
    """splitmix64's finaliser: a cheap, well-mixed 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def file_params(seed, c, n):
    """(size, pool offset) of file n of class c: log-normal size from two hashed uniforms."""
    h1 = mix64((seed << 40) ^ (c << 24) ^ n)
    h2 = mix64(h1)
    u1 = ((h1 >> 11) + 1) / 9007199254740993.0  # (0, 1]
    u2 = (h2 >> 11) / 9007199254740992.0
    z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    size = int(MEDIAN_SIZE * math.exp(SIGMA * z))
    size = MIN_SIZE if size < MIN_SIZE else MAX_SIZE if size > MAX_SIZE else size
    return size, mix64(h2) % (POOL_BYTES - MAX_SIZE)


def make_pool(seed):
    return random.Random(seed).randbytes(POOL_BYTES)


def file_content(pool, path_bytes, size, off):
    if size == 0:
        return b""  # --empty
    head = path_bytes + b"\n"
    return head + pool[off:off + size - len(head)]


class Layout:
    """Which files exist, in which class directory and which shard. Classes are contiguous in
    shards, files in a class in bytewise name order, so the shards hold the tree in path order."""

    def __init__(self, files, classes, seed, shard_bytes, empty=False):
        self.files, self.seed, self.empty = files, seed, empty
        self.classes = min(classes, files)
        self.names = class_names(self.classes)
        base, extra = divmod(files, self.classes)
        self.count = [base + (1 if c < extra else 0) for c in range(self.classes)]
        est = 512 if empty else 512 + 1024  # A typical member: header (+ two blocks).
        per_shard = max(1, shard_bytes // max(1, base * est))
        self.shards = [list(range(s, min(s + per_shard, self.classes)))
                       for s in range(0, self.classes, per_shard)]

    def class_files(self, c):
        """Bytewise-sorted [(path bytes, n)] of class c."""
        name = self.names[c]
        out = [(f"train/{name}/{name}_{n}.jpg".encode(), n) for n in range(self.count[c])]
        out.sort()
        return out


def _tar_header_parts():
    """A GNU tar header split around its name, size and checksum fields."""
    t = bytearray(512)
    t[100:108] = b"0000644\0"
    t[108:116] = b"0000000\0"
    t[116:124] = b"0000000\0"
    t[136:148] = b"%011o\0" % MTIME
    t[148:156] = b" " * 8
    t[156:157] = b"0"
    t[257:265] = b"ustar  \0"
    t[265:269] = b"root"
    t[297:301] = b"root"
    return bytes(t[100:124]), bytes(t[136:148]), bytes(t[156:512]), sum(t)


HDR_MID, HDR_MTIME, HDR_TAIL, HDR_BASE_SUM = _tar_header_parts()
ZEROS = bytes(512)


def tar_header(name, size, typeflag=b"0", mode=b"0000644\0"):
    if len(name) >= 100:
        raise BenchError(f"tar member name too long for this writer: {name!r}")
    size_field = b"%011o\0" % size
    mid, tail = HDR_MID, HDR_TAIL
    chk = HDR_BASE_SUM + sum(name) + sum(size_field)
    if typeflag != b"0":
        tail = typeflag + HDR_TAIL[1:]
        mid = mode + HDR_MID[8:]
        chk += typeflag[0] - ord("0") + sum(mode) - sum(b"0000644\0")
    return b"".join((name, ZEROS[:100 - len(name)], mid, size_field, HDR_MTIME,
                     b"%06o\0 " % chk, tail))


def write_shard(job):
    """Writes one shard (a list of classes) to path.partial then renames it. Returns
    (path, files, content bytes, tar bytes)."""
    path, files, classes, seed, class_list, empty = job
    lay = Layout(files, classes, seed, 1, empty)
    pool = make_pool(seed)
    nbytes = 0
    with open(path + ".partial", "wb", buffering=8 << 20) as f:
        f.write(tar_header(b"train/", 0, b"5", b"0000755\0"))
        for c in class_list:
            chunks = [tar_header(f"train/{lay.names[c]}/".encode(), 0, b"5", b"0000755\0")]
            for pb, n in lay.class_files(c):
                size, off = (0, 0) if empty else file_params(seed, c, n)
                chunks.append(tar_header(pb, size))
                chunks.append(file_content(pool, pb, size, off))
                pad = -size % 512
                if pad:
                    chunks.append(ZEROS[:pad])
                nbytes += size
            f.write(b"".join(chunks))
        f.write(ZEROS + ZEROS)
        total = f.tell()
    os.rename(path + ".partial", path)
    return path, sum(lay.count[c] for c in class_list), nbytes, total


def scale_params(a, n):
    return {"v": SCALE_GENERATOR_VERSION, "files": n, "classes": a.scale_classes,
            "seed": a.seed, "median": MEDIAN_SIZE, "sigma": SIGMA, "min": MIN_SIZE,
            "max": MAX_SIZE, "shard_bytes": parse_size(a.scale_shard_size),
            **({"empty": True} if a.empty else {})}


def generate(a, n, wdir):
    """wdir/shards/shard-NNNNN.tar and wdir/dataset.json; reused when the parameters match."""
    params = scale_params(a, n)
    meta_path = os.path.join(wdir, "dataset.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("params") == params and all(os.path.exists(p) for p in meta["shards"]):
            log(f"scale {n:,}: reusing the shards in {wdir} ({fmt_bytes(meta['shard_bytes'])})")
            meta["cached"] = True
            return meta
    sdir = os.path.join(wdir, "shards")
    shutil.rmtree(sdir, ignore_errors=True)
    os.makedirs(sdir)
    lay = Layout(n, a.scale_classes, a.seed, params["shard_bytes"], a.empty)
    jobs = [(os.path.join(sdir, f"shard-{i:05d}.tar"), n, a.scale_classes, a.seed, cl, a.empty)
            for i, cl in enumerate(lay.shards)]
    procs = max(1, min(a.gen_procs, len(jobs)))
    log(f"scale {n:,}: writing {len(jobs)} shard(s) of ~{a.scale_shard_size} with {procs} "
        "process(es)")
    start = time.perf_counter()
    if procs == 1:
        results = [write_shard(j) for j in jobs]
    else:
        # Not "fork": the bench has threads (the slab sampler, the pool's own
        # handlers), and a child forked while one of them held a lock waits on
        # it for ever (an orphan worker on a futex was found after a smoke run
        # that timed out in pool.map).
        with multiprocessing.get_context("spawn").Pool(procs) as pool:
            results = pool.map(write_shard, jobs, chunksize=1)
    meta = {"params": params, "files": n, "classes": lay.classes,
            "content_bytes": sum(r[2] for r in results),
            "shard_bytes": sum(r[3] for r in results),
            "shards": [r[0] for r in results],
            "generate_seconds": time.perf_counter() - start}
    if sum(r[1] for r in results) != n:
        raise BenchError(f"scale {n}: wrote {sum(r[1] for r in results)} files, expected {n}")
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f, indent=1)
    os.rename(meta_path + ".tmp", meta_path)
    log(f"scale {n:,}: {n:,} files, {fmt_bytes(meta['content_bytes'])} of content, "
        f"{fmt_bytes(meta['shard_bytes'])} of tar in {meta['generate_seconds']:.1f} s")
    meta["cached"] = False
    return meta


def file_path(lay, i):
    """File i of the layout (i < files): class i mod classes, number i div classes."""
    c, n = i % lay.classes, i // lay.classes
    name = lay.names[c]
    return c, n, f"train/{name}/{name}_{n}.jpg"


def write_lists(lay, wdir):
    """wdir/all.txt: every file in tree order (cached: it depends on the layout alone)."""
    path = os.path.join(wdir, "all.txt")
    if not os.path.exists(path):
        with open(path + ".tmp", "wb", buffering=8 << 20) as f:
            for c in range(lay.classes):
                f.write(b"".join(pb + b"\n" for pb, _ in lay.class_files(c)))
        os.rename(path + ".tmp", path)
    return path
