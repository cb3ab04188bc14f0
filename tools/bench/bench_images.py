"""What the systems mount, built from the dataset's tree: tar shards and their index
(shardfs, raw), a squashfs image (squashfuse, kernel) and one tar (archivemount).
"""

import json
import os
import shutil
import subprocess
import time

from bench_common import BenchError, log, parse_size
from bench_mounts import run_tool


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


def pack_or_reuse(a, ddir, tree, files, scratch):
    """pack_dataset into DDIR/pack-SHARD_SIZE, or with --reuse-pack the pack already there
    (all its shards present). Returns (pack dir, pack dict with "cached" set)."""
    pdir = os.path.join(ddir, f"pack-{a.shard_size}")
    pmeta = os.path.join(pdir, "pack.json")
    if a.reuse_pack and os.path.exists(pmeta):
        with open(pmeta) as f:
            pack = json.load(f)
        if all(os.path.exists(p) for p in pack["shards"]):
            log(f"pack: reusing {pdir}")
            pack["cached"] = True
            return pdir, pack
    shutil.rmtree(pdir, ignore_errors=True)
    os.makedirs(pdir)
    log(f"pack: {len(files)} files into ~{a.shard_size} shards")
    pack = pack_dataset(a, tree, files, pdir, scratch)
    with open(pmeta, "w") as f:
        json.dump(pack, f)
    pack["cached"] = False
    return pdir, pack
