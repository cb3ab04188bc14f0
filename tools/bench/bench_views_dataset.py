"""--views's dataset and references: N small files written straight into ~256 MiB GNU tar
shards plus one extra shard for `index add` (cached in the work dir with their manifests and
their index, so reruns start at once), and what bench_reader must see over them: checksums
computed here (XXH3-64 through libxxhash), not by shardfs.
"""

import hashlib
import io
import json
import math
import os
import random
import shutil
import tarfile
import time

from bench_common import BenchError, fmt_bytes, log, parse_size, tree_bytes
from bench_dataset import class_names
from bench_mounts import run_tool

VIEWS_GENERATOR_VERSION = 1
MTIME = 1_700_000_000
POOL_BYTES = 8 << 20
MIN_SIZE, MAX_SIZE = 128, 16 << 10

def views_dataset_key(a):
    params = {"v": VIEWS_GENERATOR_VERSION, "files": a.files, "classes": a.classes,
              "seed": a.seed, "median": a.median_kib, "sigma": a.sigma,
              "shard_size": parse_size(a.shard_size)}
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12], params


def sample_members(rng, pool, names, mu, sigma):
    """(path, size, pool offset) per name; content = path line + pool bytes (see content())."""
    out = []
    for name in names:
        size = max(MIN_SIZE, min(MAX_SIZE, int(rng.lognormvariate(mu, sigma))))
        out.append((name, size, rng.randrange(POOL_BYTES - MAX_SIZE)))
    return out


def content(pool, path, size, off):
    head = path.encode() + b"\n"
    return head + pool[off:off + size - len(head)]


def write_shards(members, pool, out_dir, prefix, limit, xxh, manifest):
    """Writes members (in their order) into out_dir/prefix-NNNNN.tar of about `limit` bytes each,
    each directory as a member before the first file below it in that shard. Appends
    `path<TAB>size<TAB>xxh3` lines to manifest. Returns the shard paths."""
    os.makedirs(out_dir, exist_ok=True)
    shards, tf, raw, used, seen = [], None, None, 0, set()

    def close():
        if tf is not None:
            tf.close()
            raw.close()

    try:
        for path, size, off in members:
            member = 512 + (size + 511) // 512 * 512
            if tf is None or used + member > limit:
                close()
                shard = os.path.join(out_dir, f"{prefix}-{len(shards):05d}.tar")
                raw = open(shard, "wb")
                tf = tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT)
                shards.append(shard)
                used, seen = 0, set()
            parts = path.split("/")
            for k in range(1, len(parts)):
                d = "/".join(parts[:k])
                if d not in seen:
                    seen.add(d)
                    ti = tarfile.TarInfo(d)
                    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, MTIME
                    tf.addfile(ti)
                    used += 512
            data = content(pool, path, size, off)
            ti = tarfile.TarInfo(path)
            ti.size, ti.mode, ti.mtime = size, 0o644, MTIME
            tf.addfile(ti, io.BytesIO(data))
            used += member
            manifest.write(f"{path}\t{size}\t{xxh(data):016x}\n")
    finally:
        close()
    return shards


def generate_views_dataset(a, ddir, xxh):
    """ddir/shards/*.tar (N files, tree order), ddir/extra/extra-00000.tar (one more shard of
    new files), manifests and dataset.json. Deterministic; reused when its parameters match."""
    key, params = views_dataset_key(a)
    meta_path = os.path.join(ddir, "dataset.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("params") == params and all(os.path.exists(p) for p in
                                                meta["shards"] + meta["extra_shards"]):
            log(f"views dataset: reusing {ddir} ({meta['files']:,} files, "
                f"{fmt_bytes(meta['bytes'])})")
            meta["cached"] = True
            return meta
    for sub in ("shards", "extra"):
        shutil.rmtree(os.path.join(ddir, sub), ignore_errors=True)
    os.makedirs(ddir, exist_ok=True)
    start = time.perf_counter()
    rng = random.Random(a.seed)
    pool = rng.randbytes(POOL_BYTES)
    classes = class_names(a.classes)
    mu = math.log(a.median_kib * 1024)
    names = [f"train/{classes[i % a.classes]}/{classes[i % a.classes]}_{i // a.classes}.jpg"
             for i in range(a.files)]
    members = sample_members(rng, pool, names, mu, a.sigma)
    members.sort(key=lambda m: m[0].encode())
    limit = parse_size(a.shard_size)
    log(f"views dataset: writing {a.files:,} files into ~{a.shard_size} shards")
    with open(os.path.join(ddir, "manifest.tsv"), "w") as man:
        shards = write_shards(members, pool, os.path.join(ddir, "shards"), "shard", limit, xxh,
                              man)
    total = sum(m[1] for m in members)
    # The new shard for `index add`: new files in the existing class directories, one shard full.
    extra, used, i = [], 0, 0
    while True:
        c = classes[i % a.classes]
        (m,) = sample_members(rng, pool, [f"train/{c}/{c}_new{i // a.classes}.jpg"], mu, a.sigma)
        member = 512 + (m[1] + 511) // 512 * 512
        if used + member + 512 * (1 + a.classes) > limit:
            break
        extra.append(m)
        used += member
        i += 1
    extra.sort(key=lambda m: m[0].encode())
    with open(os.path.join(ddir, "extra-manifest.tsv"), "w") as man:
        extra_shards = write_shards(extra, pool, os.path.join(ddir, "extra"), "extra",
                                    limit, xxh, man)
    meta = {"params": params, "key": key, "files": a.files, "dirs": 1 + a.classes,
            "bytes": total, "shards": shards, "extra_shards": extra_shards,
            "extra_files": len(extra), "extra_bytes": sum(m[1] for m in extra),
            "generate_seconds": time.perf_counter() - start}
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f, indent=1)
    os.rename(meta_path + ".tmp", meta_path)
    log(f"views dataset: {a.files:,} files, {fmt_bytes(total)}, {len(shards)} shards + "
        f"{len(extra):,} files in the extra shard, in {meta['generate_seconds']:.1f} s")
    meta["cached"] = False
    return meta


def read_manifest(ddir):
    rows = []
    with open(os.path.join(ddir, "manifest.tsv")) as f:
        for line in f:
            p, s, h = line.rstrip("\n").split("\t")
            rows.append((p, int(s), int(h, 16)))
    return rows


def binary_stamp(path):
    st = os.stat(path)
    return f"{st.st_size}-{st.st_mtime_ns}"


def base_index(a, ddir, shards, scratch):
    """The pristine N-entry index, built once per shardfs binary (the format may change with
    it) and copied for each run, since views write into it."""
    idir = os.path.join(ddir, "index-base")
    meta_path = idir + ".json"
    stamp = binary_stamp(a.shardfs)
    if os.path.exists(meta_path) and os.path.isdir(idir):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("binary") == stamp:
            meta["cached"] = True
            return idir, meta
    shutil.rmtree(idir, ignore_errors=True)
    log(f"index build: {len(shards)} shards")
    rc, _, se, secs = run_tool([a.shardfs, "index", "build", "--quiet", "--out", idir] + shards,
                               log_path=os.path.join(scratch, "index-build.log"))
    if rc != 0:
        raise BenchError(f"shardfs index build exited {rc}; see {scratch}/index-build.log")
    meta = {"binary": stamp, "seconds": secs, "bytes": tree_bytes(idir)[0]}
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    meta["cached"] = False
    return idir, meta


# -- the references: what bench_reader must see ----------------------------------------------

def reference(xxh, file_rows, dir_paths):
    """bench_reader's walk / lstat / read results over these files and directories."""
    mask = (1 << 64) - 1
    walk = lstat = read = 0
    nbytes = 0
    for p, size, h in file_rows:
        ph = xxh(p.encode())
        walk += ph
        lstat += ph + size
        read += h
        nbytes += size
    for d in dir_paths:
        walk += xxh(d.encode())
    hexs = lambda v: f"{v & mask:016x}"  # noqa: E731
    n = len(file_rows)
    return {"walk": {"files": n, "dirs": len(dir_paths), "bytes": 0, "checksum": hexs(walk)},
            "lstat": {"files": n, "dirs": 0, "bytes": nbytes, "checksum": hexs(lstat)},
            "read": {"files": n, "dirs": 0, "bytes": nbytes, "checksum": hexs(read)}}


def dirs_of(paths):
    out = set()
    for p in paths:
        parts = p.split("/")
        for k in range(1, len(parts)):
            out.add("/".join(parts[:k]))
    return out
