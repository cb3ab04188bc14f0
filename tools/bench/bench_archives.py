"""--archives: the archives datasets ship as (zip, .tar.gz, compressed packs), side by side in one run.

Zip (a COCO-shaped train2017.zip): --zip-files (100,000) JPEG-sized files (log-normal around
--zip-median-kib, incompressible like JPEG) in `train/<class>/`, written loose once, then zipped
by Python's zipfile twice, stored and deflated, and packed into tar shards by `shardfs pack`.
Measured:
  - `shardfs index build` of each zip: seconds, and bytes read from disk during the build (the
    process's block input after a cache drop) against the archive's size;
  - a shuffled read of --reads random files by --procs readers, cold (cache dropped, a fresh
    mount) and warm (the same list again on that mount), as files/s and as a ratio to the loose
    tree, on: the loose tree, shardfs over the tar pack, shardfs over each zip, fuse-zip over
    each zip, archivemount over each zip. Every read's checksum must equal the loose tree's.
  The target: stored zip members read as fast as tar members (within 10%).

Gzip (a LibriSpeech-shaped .tar.gz): --gz-bytes (2G) of small text-like files (log-normal around
--gz-median-kib) in one tar, compressed by gzip -6 once. Measured:
  - `shardfs index build`: seconds; index bytes per GB of the archive;
  - random single-file reads, one at a time on a fresh mount with the archive in the page cache:
    p50 and p99 latency (bench_reader read-latency), against the time to inflate one interval
    of the index's checkpoint spacing (zlib, here, from the archive's start); again with
    prefill_dirs=0 (no background directory listings beside the reads); how the daemon decoded
    (shardfs stats: intervals whole, prefixes up to a file's end, bytes per decode);
  - a shuffled read by --procs readers, files/s, against the loose tree (GNU tar's extraction)
    and against indexed_gzip (python3-indexed-gzip, ratarmount's gzip backend; ratarmount itself
    is not in Debian): the same files read by --procs processes through IndexedGzipFile.
  The target: p99 at most one checkpoint interval's inflate; shuffled at least 5x indexed_gzip.

Packz (`--archives packz`, not in the default set): `shardfs pack --compress zstd|gzip` on a
JSON/text-heavy tree; see bench_packz.py.

Datasets are cached in --workdir (/var/tmp/shardfs-archives-<seed>) and reused.
"""

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
import zipfile
import zlib

from bench_args import (add_binary_args, add_json_arg, add_phase_timeout_arg, add_seed_arg,
                        add_workdir_arg, resolve_binaries)
import bench_packz
from bench_common import BenchError, fmt_bytes, log, parse_size, tree_bytes
from bench_mounts import Mount, run_in_scratch, run_measured, run_tool
from bench_workloads import can_drop_caches, drop_caches

GENERATOR_VERSION = 1
POOL_BYTES = 8 << 20
MTIME = 1_700_000_000


def lognormal_sizes(rng, n, median, sigma=0.6, lo=64, hi=None):
    hi = hi or median * 20
    return [int(min(hi, max(lo, median * math.exp(sigma * rng.gauss(0, 1))))) for _ in range(n)]


def write_json_atomic(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.rename(path + ".tmp", path)


def cached(meta_path, params):
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        return meta if meta.get("params") == params else None
    except (OSError, ValueError):
        return None


# -- the zip dataset --------------------------------------------------------------------------


def make_zip_dataset(a, wdir):
    params = {"v": GENERATOR_VERSION, "files": a.zip_files, "median_kib": a.zip_median_kib,
              "seed": a.seed}
    meta_path = os.path.join(wdir, "zip.json")
    meta = cached(meta_path, params)
    if meta:
        log(f"zip: reusing {meta['files']:,} files in {wdir}")
        return meta
    rng = random.Random(a.seed)
    pool = rng.randbytes(POOL_BYTES)
    tree = os.path.join(wdir, "zip-tree")
    shutil.rmtree(tree, ignore_errors=True)
    sizes = lognormal_sizes(rng, a.zip_files, int(a.zip_median_kib * 1024))
    classes = 80
    paths = []
    for i, size in enumerate(sizes):
        rel = f"train/c{i % classes:03d}/{i:012d}.jpg"
        full = os.path.join(tree, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        off = rng.randrange(POOL_BYTES - size)
        with open(full, "wb") as f:
            f.write(pool[off:off + size])
        os.utime(full, (MTIME, MTIME))
        paths.append(rel)
    log(f"zip: {len(paths):,} files, {fmt_bytes(sum(sizes))}; zipping (stored, deflated)")
    zips = {}
    for kind, method in (("stored", zipfile.ZIP_STORED), ("deflated", zipfile.ZIP_DEFLATED)):
        out = os.path.join(wdir, f"{kind}.zip")
        with zipfile.ZipFile(out + ".partial", "w", compression=method) as z:
            for rel in paths:
                z.write(os.path.join(tree, rel), rel)
        os.rename(out + ".partial", out)
        zips[kind] = out
    pdir = os.path.join(wdir, "zip-pack")
    shutil.rmtree(pdir, ignore_errors=True)
    rc, out, err, _ = run_tool([a.shardfs, "pack", "--quiet", "--shard-size", "256M", "--out", pdir, tree])
    if rc != 0:
        raise BenchError(f"shardfs pack exited {rc}: {err.decode(errors='replace')[-400:]}")
    meta = {"params": params, "files": len(paths), "bytes": sum(sizes), "tree": tree,
            "zips": zips, "pack_index": os.path.join(pdir, "index"), "paths": paths}
    write_json_atomic(meta_path, meta)
    return meta


# -- the gzip dataset -------------------------------------------------------------------------


def text_like(rng, size):
    words = [b"audio", b"speaker", b"chapter", b"utterance", b"the", b"of", b"and", b"a",
             b"transcript", b"sample", b"rate", b"16000", b"duration", b"flac", b"id"]
    out = bytearray()
    while len(out) < size:
        out += b'{"%s": %d, "%s": "%s"}\n' % (rng.choice(words), rng.randrange(1 << 20),
                                              rng.choice(words), b" ".join(
                                                  rng.choice(words) for _ in range(6)))
    return bytes(out[:size])


def make_gz_dataset(a, wdir):
    params = {"v": GENERATOR_VERSION, "bytes": a.gz_bytes, "median_kib": a.gz_median_kib,
              "seed": a.seed}
    meta_path = os.path.join(wdir, "gz.json")
    meta = cached(meta_path, params)
    if meta:
        log(f"gz: reusing {meta['files']:,} files in {wdir}")
        return meta
    rng = random.Random(a.seed + 1)
    tar_path = os.path.join(wdir, "data.tar")
    paths, total = [], 0
    with tarfile.open(tar_path + ".partial", "w", format=tarfile.GNU_FORMAT) as t:
        i = 0
        while total < a.gz_bytes:
            size = lognormal_sizes(rng, 1, int(a.gz_median_kib * 1024))[0]
            data = text_like(rng, size)
            info = tarfile.TarInfo(f"corpus/s{i // 1000:04d}/{i:09d}.json")
            info.size, info.mtime, info.mode = size, MTIME, 0o644
            t.addfile(info, fileobj=__import__("io").BytesIO(data))
            paths.append(info.name)
            total += size
            i += 1
    os.rename(tar_path + ".partial", tar_path)
    gz = os.path.join(wdir, "data.tar.gz")
    with open(gz + ".partial", "wb") as f:
        if subprocess.run(["gzip", "-6", "-c", tar_path], stdout=f).returncode != 0:
            raise BenchError("gzip failed")
    os.rename(gz + ".partial", gz)
    os.unlink(tar_path)
    tree = os.path.join(wdir, "gz-tree")
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    if subprocess.run(["tar", "-xzf", gz, "-C", tree]).returncode != 0:
        raise BenchError("tar -xzf failed")
    meta = {"params": params, "files": len(paths), "bytes": total, "gz": gz, "tree": tree,
            "gz_bytes": os.path.getsize(gz), "paths": paths}
    write_json_atomic(meta_path, meta)
    log(f"gz: {len(paths):,} files, {fmt_bytes(total)} -> {fmt_bytes(meta['gz_bytes'])} gzip")
    return meta


# -- measuring --------------------------------------------------------------------------------


class Run:
    def __init__(self, a, scratch):
        self.a, self.scratch = a, scratch
        self.can_cold, _ = can_drop_caches()
        self.n = 0

    def drop(self):
        if self.can_cold:
            drop_caches()

    def mnt(self):
        self.n += 1
        p = os.path.join(self.scratch, f"mnt{self.n}")
        os.makedirs(p)
        return p

    def mount(self, name, argv_of, kind):
        mp = self.mnt()
        m = Mount(name, mp, argv_of(mp), kind, os.path.join(self.scratch, f"{name}.log"))
        m.mount(300)
        return m

    def reader(self, mode, lst, root, procs=1):
        argv = [self.a.bench_reader, mode, lst, "--root", root]
        if procs > 1:
            argv += ["--procs", str(procs)]
        rc, out, err, _ = run_tool(argv, timeout=self.a.phase_timeout)
        try:
            res = json.loads(out)
        except ValueError:
            raise BenchError(f"bench_reader {mode} on {root} exited {rc}: "
                             f"{err.decode(errors='replace')[-300:]}")
        if rc != 0:
            raise BenchError(f"bench_reader {mode} on {root}: {res.get('first_error')}")
        return res

    def build(self, archive, out, extra=()):
        """index build of one archive: seconds, and bytes read from disk (cold)."""
        shutil.rmtree(out, ignore_errors=True)
        self.drop()
        rc, secs, cpu, rss, inblock = run_measured(
            [self.a.shardfs, "index", "build", "--quiet", "--out", out, *extra, archive],
            timeout=self.a.phase_timeout, log_path=os.path.join(self.scratch, "build.log"),
            with_io=True)
        if rc != 0:
            raise BenchError(f"index build {archive} exited {rc}; see "
                             f"{os.path.join(self.scratch, 'build.log')}")
        return {"seconds": secs, "cpu_seconds": cpu, "peak_rss_bytes": rss,
                "read_bytes": inblock, "archive_bytes": os.path.getsize(archive),
                "index_bytes": tree_bytes(out)[1]}

    def shuffled(self, name, lst, argv_of, kind, want, first_of=None):
        """Cold then warm shuffled read through a mount (argv_of None: the loose tree).
        With first_of (a file): also "first", a fresh mount's first pass with that file
        in the page cache and nothing decoded yet, as a fresh indexed_gzip process reads."""
        out = {}
        temps = ("cold", "first", "warm") if first_of else ("cold", "warm")
        for temp in temps:
            if temp == "cold" and not self.can_cold:
                continue
            if temp == "cold":
                self.drop()
            if temp == "first":
                with open(first_of, "rb") as f:
                    while f.read(16 << 20):
                        pass
            m = self.mount(name, argv_of, kind) if argv_of else None
            root = m.mountpoint if m else want["root"]
            try:
                if temp == "warm":
                    self.reader("read", lst, root, self.a.procs)  # Untimed: fills the caches.
                res = self.reader("read", lst, root, self.a.procs)
            finally:
                if m:
                    m.unmount()
            if want.get("checksum") and res["checksum"] != want["checksum"]:
                raise BenchError(f"{name}: checksum {res['checksum']}, loose tree "
                                 f"{want['checksum']}: other bytes")
            want.setdefault("checksum", res["checksum"])
            out[temp] = res["files"] / res["seconds"]
        log(f"{name}: shuffled " + ", ".join(f"{k} {v:,.0f} files/s" for k, v in out.items()))
        return out


def write_list(path, items):
    with open(path, "w") as f:
        f.write("".join(p + "\n" for p in items))
    return path


def run_zip(r, meta):
    a = r.a
    rng = random.Random(a.seed * 7 + 1)
    lst = write_list(os.path.join(r.scratch, "zip-reads.txt"),
                     rng.sample(meta["paths"], min(a.reads, meta["files"])))
    res = {"files": meta["files"], "bytes": meta["bytes"], "builds": {}, "reads": {}}
    want = {"root": meta["tree"]}
    res["reads"]["loose"] = r.shuffled("loose", lst, None, None, want)
    shardfs_mount = lambda idx: (lambda mp: [a.shardfs, "mount", "-f", idx, mp])  # noqa: E731
    res["reads"]["shardfs-tar"] = r.shuffled("shardfs-tar", lst, shardfs_mount(meta["pack_index"]),
                                             "fuse3", want)
    for kind, z in meta["zips"].items():
        idx = os.path.join(r.scratch, f"{kind}-index")
        b = r.build(z, idx)
        res["builds"][kind] = b
        log(f"zip {kind}: index build {b['seconds']:.2f} s, read {fmt_bytes(b['read_bytes'])} of "
            f"{fmt_bytes(b['archive_bytes'])}")
        res["reads"][f"shardfs-zip-{kind}"] = r.shuffled(f"shardfs-zip-{kind}", lst,
                                                         shardfs_mount(idx), "fuse3", want)
        if shutil.which("fuse-zip"):
            res["reads"][f"fuse-zip-{kind}"] = r.shuffled(
                f"fuse-zip-{kind}", lst, lambda mp, z=z: ["fuse-zip", "-r", "-f", z, mp], "fuse2",
                want)
        if shutil.which("archivemount") and not a.skip_archivemount:
            res["reads"][f"archivemount-{kind}"] = r.shuffled(
                f"archivemount-{kind}", lst,
                lambda mp, z=z: ["archivemount", "-f", "-o", "readonly", z, mp], "fuse2", want)
    return res


def inflate_interval_seconds(gz, spacing):
    """Seconds zlib takes to inflate `spacing` bytes of output from the archive's start
    (median of 3): what one checkpoint interval costs a reader."""
    times = []
    for _ in range(3):
        d = zlib.decompressobj(31)
        with open(gz, "rb") as f:
            start, out = time.perf_counter(), 0
            while out < spacing:
                chunk = f.read(1 << 16)
                if not chunk:
                    break
                out += len(d.decompress(chunk))
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def indexed_gzip_read(r, meta, offsets, lst_paths):
    """The same shuffled read through indexed_gzip (one IndexedGzipFile per process, its index
    built once and imported by every process, as ratarmount does): files/s, checksum-free but
    byte counts checked."""
    script = os.path.join(r.scratch, "igz.py")
    with open(script, "w") as f:
        f.write("""import indexed_gzip, json, multiprocessing, os, sys, time
gz, idx, lst, procs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
offs = json.load(open(lst))
def work(i):
    f = indexed_gzip.IndexedGzipFile(gz, spacing=4 << 20)
    f.import_index(idx)
    n = 0
    for off, size in offs[i::procs]:
        f.seek(off)
        n += len(f.read(size))
    return n
if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(procs) as p:
        p.map(len, [[]] * procs)
        start = time.perf_counter()
        total = sum(p.map(work, range(procs)))
        print(json.dumps({"bytes": total, "seconds": time.perf_counter() - start}))
""")
    build = os.path.join(r.scratch, "igz-build.py")
    idx = os.path.join(r.scratch, "igz.index")
    with open(build, "w") as f:
        f.write("""import indexed_gzip, sys
f = indexed_gzip.IndexedGzipFile(sys.argv[1], spacing=4 << 20)
f.build_full_index()
f.export_index(sys.argv[2])
""")
    rc, secs, _, _ = run_measured(["/usr/bin/python3", build, meta["gz"], idx],
                                     timeout=r.a.phase_timeout)
    if rc != 0:
        raise BenchError("indexed_gzip: building its index failed")
    offs_path = os.path.join(r.scratch, "igz-offsets.json")
    with open(offs_path, "w") as f:
        json.dump([offsets[p] for p in lst_paths], f)
    rc, out, err, _ = run_tool(["/usr/bin/python3", script, meta["gz"], idx, offs_path,
                                str(r.a.procs)], timeout=r.a.phase_timeout)
    if rc != 0:
        raise BenchError(f"indexed_gzip read failed: {err.decode(errors='replace')[-300:]}")
    res = json.loads(out)
    want = sum(offsets[p][1] for p in lst_paths)
    if res["bytes"] != want:
        raise BenchError(f"indexed_gzip read {res['bytes']} bytes, expected {want}")
    return {"index_build_seconds": secs, "files_per_s": len(lst_paths) / res["seconds"],
            "index_bytes": os.path.getsize(idx)}


def run_gz(r, meta):
    a = r.a
    res = {"files": meta["files"], "bytes": meta["bytes"], "gz_bytes": meta["gz_bytes"]}
    idx = os.path.join(r.scratch, "gz-index")
    b = r.build(meta["gz"], idx, ["--seek-spacing", str(a.gz_spacing)])
    res["build"] = b
    res["index_bytes_per_gb"] = b["index_bytes"] / (meta["gz_bytes"] / 1e9)
    log(f"gz: index build {b['seconds']:.2f} s, index {fmt_bytes(b['index_bytes'])} "
        f"({fmt_bytes(res['index_bytes_per_gb'])} per GB of archive)")
    rng = random.Random(a.seed * 11 + 3)
    lat_list = write_list(os.path.join(r.scratch, "gz-latency.txt"),
                          rng.sample(meta["paths"], min(a.latency_reads, meta["files"])))
    with open(meta["gz"], "rb") as f:
        while f.read(16 << 20):
            pass
    # Twice on a fresh mount: as mounted by default, and without the
    # background directory listings (prefill_dirs=0) that the first lookups
    # in each directory start, which share the two cores with the reads.
    for key, opts in (("latency_us", []), ("latency_no_prefill_us", ["-o", "prefill_dirs=0"])):
        m = r.mount("shardfs-gz", lambda mp: [a.shardfs, "mount", "-f"] + opts + [idx, mp],
                    "fuse3")
        try:
            res[key] = r.reader("read-latency", lat_list, m.mountpoint)["latency_us"]
            if key == "latency_us":
                rc, out, _, _ = run_tool([a.shardfs, "stats", "--json", m.mountpoint], timeout=60)
                st = json.loads(out) if rc == 0 else {}
                res["latency_decodes"] = {k: st.get(k, 0) for k in (
                    "stream_intervals_whole", "stream_intervals_prefix", "decoded_bytes")}
        finally:
            m.unmount()
    lat = res["latency_us"]
    res["inflate_interval_s"] = inflate_interval_seconds(meta["gz"], a.gz_spacing)
    log(f"gz: random read p50 {lat['p50']:.0f} us, p99 {lat['p99']:.0f} us "
        f"(prefill_dirs=0: p50 {res['latency_no_prefill_us']['p50']:.0f} us, p99 "
        f"{res['latency_no_prefill_us']['p99']:.0f} us); inflating "
        f"{fmt_bytes(a.gz_spacing)} takes {res['inflate_interval_s'] * 1e6:.0f} us")
    reads = rng.sample(meta["paths"], min(a.reads, meta["files"]))
    lst = write_list(os.path.join(r.scratch, "gz-reads.txt"), reads)
    want = {"root": meta["tree"]}
    res["reads"] = {"loose": r.shuffled("loose-gz", lst, None, None, want),
                    "shardfs": r.shuffled("shardfs-gz", lst,
                                          lambda mp: [a.shardfs, "mount", "-f", idx, mp],
                                          "fuse3", want, first_of=meta["gz"])}
    offsets = {}
    with tarfile.open(meta["gz"], "r:gz") as t:
        for info in t:
            if info.isfile():
                offsets[info.name] = (info.offset_data, info.size)
    res["indexed_gzip"] = indexed_gzip_read(r, meta, offsets, reads)
    log(f"gz: indexed_gzip shuffled {res['indexed_gzip']['files_per_s']:,.0f} files/s")
    return res


def print_report(rep, out=sys.stdout):
    w = out.write
    z = rep.get("zip")
    if z:
        w(f"\nzip: {z['files']:,} files, {fmt_bytes(z['bytes'])}; shuffled read of "
          f"{rep['params']['reads']:,} files, {rep['params']['procs']} readers\n")
        for kind, b in z["builds"].items():
            w(f"  index build {kind:<9} {b['seconds']:7.2f} s, read {fmt_bytes(b['read_bytes'])}"
              f" of a {fmt_bytes(b['archive_bytes'])} archive "
              f"({b['read_bytes'] / b['archive_bytes']:.3f}x), index "
              f"{fmt_bytes(b['index_bytes'])}\n")
        loose = z["reads"]["loose"]
        w(f"  {'system':<24}{'cold files/s':>14}{'x loose':>9}{'warm files/s':>14}{'x loose':>9}\n")
        for name, v in z["reads"].items():
            cells = ""
            for temp in ("cold", "warm"):
                if temp in v:
                    cells += f"{v[temp]:>14,.0f}{v[temp] / loose[temp]:>9.2f}"
                else:
                    cells += f"{'n/a':>14}{'':>9}"
            w(f"  {name:<24}{cells}\n")
        tar = z["reads"]["shardfs-tar"]
        st = z["reads"].get("shardfs-zip-stored")
        if st:
            for temp in ("cold", "warm"):
                if temp in st:
                    w(f"  stored zip / tar pack, {temp}: {st[temp] / tar[temp]:.2f} "
                      f"(target >= 0.90)\n")
    g = rep.get("gz")
    if g:
        lat = g["latency_us"]
        w(f"\ngzip: {g['files']:,} files, {fmt_bytes(g['bytes'])} in a "
          f"{fmt_bytes(g['gz_bytes'])} .tar.gz\n"
          f"  index build {g['build']['seconds']:.2f} s; index {fmt_bytes(g['build']['index_bytes'])}"
          f" = {fmt_bytes(g['index_bytes_per_gb'])} per GB of archive\n"
          f"  random read (one at a time, archive in page cache): p50 {lat['p50']:.0f} us, "
          f"p99 {lat['p99']:.0f} us; one {fmt_bytes(rep['params']['gz_spacing'])} interval "
          f"inflates in {g['inflate_interval_s'] * 1e6:.0f} us (target: p99 <= that)\n")
        nop = g.get("latency_no_prefill_us")
        if nop:
            w(f"  the same without directory prefill (prefill_dirs=0): p50 {nop['p50']:.0f} us, "
              f"p99 {nop['p99']:.0f} us\n")
        dec = g.get("latency_decodes")
        if dec:
            n = dec["stream_intervals_whole"] + dec["stream_intervals_prefix"]
            w(f"  its decodes: {dec['stream_intervals_prefix']:,} up to a file's end, "
              f"{dec['stream_intervals_whole']:,} whole intervals; "
              f"{fmt_bytes(dec['decoded_bytes'] / max(n, 1))} per decode\n")
        for name, v in g["reads"].items():
            w(f"  shuffled {name:<10} " + ", ".join(f"{k} {x:,.0f} files/s" for k, x in v.items())
              + "\n")
        igz = g["indexed_gzip"]["files_per_s"]
        sh = g["reads"]["shardfs"].get("first", 0)
        w(f"  shuffled indexed_gzip {igz:,.0f} files/s (its index built in "
          f"{g['indexed_gzip']['index_build_seconds']:.1f} s); shardfs first pass / "
          f"indexed_gzip = {sh / igz:.1f}x (target >= 5; both: archive in the page cache, "
          f"nothing decoded yet)\n")


def print_report_packz(rep, out=sys.stdout):
    if rep.get("packz"):
        bench_packz.print_packz(rep["packz"], out.write)


def parse_archives_args(argv):
    ap = argparse.ArgumentParser(prog="shardfs_bench.py --archives",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--archives", nargs="?", const="zip,gz", default="zip,gz",
                    help="which: zip, gz, packz, comma-separated (default zip,gz)")
    ap.add_argument("--zip-files", type=int, default=100_000)
    ap.add_argument("--zip-median-kib", type=float, default=12.0)
    ap.add_argument("--gz-bytes", type=parse_size, default="2G")
    ap.add_argument("--gz-median-kib", type=float, default=4.0)
    ap.add_argument("--gz-spacing", type=parse_size, default="2M",
                    help="the index's --seek-spacing, and the interval of the inflate figure (2M)")
    bench_packz.add_args(ap)
    ap.add_argument("--reads", type=int, default=20_000)
    ap.add_argument("--latency-reads", type=int, default=2_000)
    ap.add_argument("--procs", type=int, default=4)
    add_seed_arg(ap)
    ap.add_argument("--skip-archivemount", action="store_true")
    add_workdir_arg(ap, "cache and scratch dir (default /var/tmp/shardfs-archives-<seed>)")
    add_phase_timeout_arg(ap)
    add_binary_args(ap)
    add_json_arg(ap)
    a = ap.parse_args(argv)
    a.kinds = {k.strip() for k in a.archives.split(",") if k.strip()}
    if not a.kinds <= {"zip", "gz", "packz"}:
        ap.error(f"--archives: zip, gz and/or packz, not {a.archives}")
    resolve_binaries(a)
    a.workdir = a.workdir or f"/var/tmp/shardfs-archives-{a.seed}"
    return a


def archives_main(argv):
    a = parse_archives_args(argv)
    os.makedirs(a.workdir, exist_ok=True)

    def body(scratch):
        r = Run(a, scratch)
        rep = {"schema": "shardfs-bench-archives/1",
               "params": {k: v for k, v in vars(a).items() if k != "kinds"},
               "loadavg_start": os.getloadavg()}
        rep["params"]["kinds"] = sorted(a.kinds)
        if "zip" in a.kinds:
            rep["zip"] = run_zip(r, make_zip_dataset(a, a.workdir))
        if "gz" in a.kinds:
            rep["gz"] = run_gz(r, make_gz_dataset(a, a.workdir))
        if "packz" in a.kinds:
            rep["packz"] = bench_packz.run_packz(r, bench_packz.make_packz_dataset(a, a.workdir))
        rep["loadavg_end"] = os.getloadavg()
        for part in ("zip",):
            if part in rep:
                rep[part].pop("paths", None)
        if a.json_out:
            write_json_atomic(a.json_out, rep)
        print_report(rep)
        print_report_packz(rep)
        return 0

    return run_in_scratch(a.workdir, "run-", body)
