"""--archives packz: `shardfs pack --compress zstd|gzip` on a JSON/text-heavy tree.

The tree: --packz-samples samples in `samples/dNNN/`, each a JSON sidecar (~1-3 KiB), a text
file (~2-10 KiB) and a numpy-like array (.npy header + float32 values rounded to 2 decimals,
~4-16 KiB), written loose once and cached in --workdir. Measured:
  - pack time and shard bytes: plain, --compress zstd (level 3, 1 MiB groups), --compress gzip;
  - the compression ratio of `pack --compress zstd` against single-frame `zstd -3` of the
    uncompressed pack's shards (target: within 3%), and of --compress gzip against `gzip -6`;
  - index bytes of each pack (no 32 KiB windows: the seek points are the group boundaries);
  - a shuffled read of --reads files by --procs readers, cold and warm, files/s, over the
    compressed mounts against the uncompressed pack's mount (checksums equal the loose tree's).
"""

import array
import json
import os
import random
import shutil
import subprocess

from bench_common import BenchError, fmt_bytes, log, tree_bytes
from bench_mounts import run_measured

GENERATOR_VERSION = 1
MTIME = 1_700_000_000
WORDS = ("the of and a to in is was for on that with as by at from image person car dog cat "
         "street tree sky building water road table chair window light people sitting standing "
         "holding walking red blue green white black small large young old two three").split()


def add_args(ap):
    ap.add_argument("--packz-samples", type=int, default=20_000,
                    help="samples of the packz tree (3 files each; default 20,000)")


def _sample(rng, i):
    caption = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
    meta = {"id": i, "file": f"{i:08d}.jpg", "width": rng.choice([480, 640, 800]),
            "height": rng.choice([360, 480, 600]), "label": rng.choice(WORDS),
            "captions": [caption, caption.replace("a ", "the ")],
            "boxes": [[round(rng.uniform(0, 600), 1) for _ in range(4)]
                      for _ in range(rng.randint(1, 12))]}
    js = json.dumps(meta, indent=1).encode()
    lines = []
    for _ in range(rng.randint(20, 120)):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))))
    txt = ("\n".join(lines) + "\n").encode()
    n = rng.randint(1000, 4000)
    arr = array.array("f", (round(rng.gauss(0, 1), 2) for _ in range(n)))
    npy = b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n
    npy = npy.ljust(128 - 1, b" ") + b"\n" + arr.tobytes()
    return js, txt, npy


def make_packz_dataset(a, wdir):
    params = {"v": GENERATOR_VERSION, "samples": a.packz_samples, "seed": a.seed}
    meta_path = os.path.join(wdir, "packz.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("params") == params:
            log(f"packz: reusing {meta['files']:,} files in {wdir}")
            return meta
    except (OSError, ValueError):
        pass
    rng = random.Random(a.seed + 24)
    tree = os.path.join(wdir, "packz-tree")
    shutil.rmtree(tree, ignore_errors=True)
    paths, total = [], 0
    for i in range(a.packz_samples):
        d = os.path.join(tree, "samples", f"d{i // 1000:03d}")
        os.makedirs(d, exist_ok=True)
        for ext, data in zip(("json", "txt", "npy"), _sample(rng, i)):
            rel = f"samples/d{i // 1000:03d}/{i:08d}.{ext}"
            full = os.path.join(tree, rel)
            with open(full, "wb") as f:
                f.write(data)
            os.utime(full, (MTIME, MTIME))
            paths.append(rel)
            total += len(data)
    meta = {"params": params, "files": len(paths), "bytes": total, "tree": tree, "paths": paths}
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f)
    os.rename(meta_path + ".tmp", meta_path)
    log(f"packz: {len(paths):,} files, {fmt_bytes(total)}")
    return meta


def _shards(out):
    return sorted(os.path.join(out, n) for n in os.listdir(out)
                  if n.endswith((".tar", ".tar.zst", ".tar.gz")))


def _single_stream_bytes(shards, argv):
    """Bytes of each shard compressed as one stream by `argv` (zstd -3 / gzip -6), summed."""
    total = 0
    for s in shards:
        with open(s, "rb") as f:
            p = subprocess.run(argv, stdin=f, stdout=subprocess.PIPE)
        if p.returncode != 0:
            raise BenchError(f"{' '.join(argv)} on {s} exited {p.returncode}")
        total += len(p.stdout)
    return total


def run_packz(r, meta):
    a = r.a
    res = {"files": meta["files"], "bytes": meta["bytes"], "packs": {}}
    packs = {"plain": [], "zstd": ["--compress", "zstd"], "gzip": ["--compress", "gzip"]}
    for name, extra in packs.items():
        out = os.path.join(r.scratch, f"packz-{name}")
        rc, secs, cpu, rss = run_measured(
            [a.shardfs, "pack", "--quiet", "--shard-size", "256M", "--out", out, meta["tree"]]
            + extra, timeout=a.phase_timeout, log_path=os.path.join(r.scratch, "packz.log"))
        if rc != 0:
            raise BenchError(f"pack {name} exited {rc}; see {os.path.join(r.scratch, 'packz.log')}")
        shards = _shards(out)
        res["packs"][name] = {"seconds": secs, "cpu_seconds": cpu, "peak_rss_bytes": rss,
                              "shards": len(shards),
                              "shard_bytes": sum(os.path.getsize(s) for s in shards),
                              "index_bytes": tree_bytes(os.path.join(out, "index"))[1],
                              "index": os.path.join(out, "index")}
        log(f"packz: pack {name} {secs:.2f} s, {fmt_bytes(res['packs'][name]['shard_bytes'])}")
    plain = _shards(os.path.join(r.scratch, "packz-plain"))
    res["single_zstd3_bytes"] = _single_stream_bytes(plain, ["zstd", "-3", "-q", "-T1", "-c"])
    res["single_gzip6_bytes"] = _single_stream_bytes(plain, ["gzip", "-6", "-c"])
    res["zstd_vs_single"] = res["packs"]["zstd"]["shard_bytes"] / res["single_zstd3_bytes"]
    res["gzip_vs_single"] = res["packs"]["gzip"]["shard_bytes"] / res["single_gzip6_bytes"]
    log(f"packz: zstd groups / single-frame zstd -3 = {res['zstd_vs_single']:.4f}; "
        f"gzip groups / gzip -6 = {res['gzip_vs_single']:.4f}")
    rng = random.Random(a.seed * 13 + 5)
    lst = os.path.join(r.scratch, "packz-reads.txt")
    with open(lst, "w") as f:
        f.write("".join(p + "\n" for p in rng.sample(meta["paths"],
                                                     min(a.reads, meta["files"]))))
    want = {"root": meta["tree"]}
    res["reads"] = {}
    for name in packs:
        idx = res["packs"][name]["index"]
        res["reads"][name] = r.shuffled(f"packz-{name}", lst,
                                        lambda mp, idx=idx: [a.shardfs, "mount", "-f", idx, mp],
                                        "fuse3", want)
    return res


def print_packz(p, w):
    w(f"\npackz: {p['files']:,} files (JSON, text, float arrays), {fmt_bytes(p['bytes'])}\n")
    w(f"  {'pack':<8}{'seconds':>9}{'shard bytes':>14}{'x plain':>9}{'index':>12}"
      f"{'cold files/s':>14}{'warm files/s':>14}\n")
    plain = p["packs"]["plain"]["shard_bytes"]
    for name, v in p["packs"].items():
        rd = p["reads"].get(name, {})
        cells = "".join(f"{rd[t]:>14,.0f}" if t in rd else f"{'n/a':>14}" for t in ("cold", "warm"))
        w(f"  {name:<8}{v['seconds']:>9.2f}{v['shard_bytes']:>14,}{v['shard_bytes'] / plain:>9.3f}"
          f"{fmt_bytes(v['index_bytes']):>12}{cells}\n")
    w(f"  zstd groups vs single-frame zstd -3 of the plain shards: {p['zstd_vs_single']:.4f} "
      f"({p['single_zstd3_bytes']:,} bytes; target <= 1.03)\n")
    w(f"  gzip groups vs gzip -6 of the plain shards: {p['gzip_vs_single']:.4f} "
      f"({p['single_gzip6_bytes']:,} bytes)\n")
    for name in ("zstd", "gzip"):
        rd, base = p["reads"].get(name, {}), p["reads"].get("plain", {})
        ratios = [f"{t} {rd[t] / base[t]:.2f}" for t in ("cold", "warm") if t in rd and t in base]
        if ratios:
            w(f"  shuffled {name} / plain pack: {', '.join(ratios)}\n")
