#!/usr/bin/env python3
"""The torch side of `shardfs_bench.py --loader` (bench_loader.py drives it).

Runs under the interpreter that has torch, torchvision and PIL (Debian's /usr/bin/python3), so
the driver itself can stay on the standard library. Two commands:

  loader_worker.py generate --out TREE --files N --classes C --seed S [--scale F]
      Writes TREE/train/<class>/<n>.jpg: real JPEGs made with PIL, deterministic by seed.
      Encoding 100,000 images one by one would take a quarter of an hour on two cores, so a
      pool of distinct images (varied sizes 256..500 x 256..375, smooth colour fields plus
      noise, quality 80..90, so ~10-60 KiB like ImageNet thumbnails) is encoded once and each
      file is a pool image with its own JPEG comment segment: every file's bytes differ, every
      file decodes like a photo thumbnail. Prints one JSON line (files, bytes, seconds).

  loader_worker.py serve
      Imports torch once, then reads one JSON request per stdin line and answers one JSON
      line on stdout: an unmodified torchvision ImageFolder + torch DataLoader
      (shuffle=True, N workers) over the request's root. The driver drops caches and
      remounts between requests, so torch's import is neither timed nor repeated.

The loader= function given to ImageFolder is torchvision's pil_loader split in two and timed:
open + read the bytes (I/O), then PIL decode from BytesIO + convert('RGB') (decode). The
times travel with each sample and are summed in the main process. Mode "raw" is the same
DataLoader whose loader stops after the read (no decode, no transform): the storage path alone.
"""

import argparse
import io
import json
import math
import multiprocessing
import os
import random
import sys
import time
import zlib

from bench_dataset import class_names

POOL_MAX = 1024  # Distinct encoded images; files beyond that reuse them with their own comment.


def make_image(seed, k, scale=1.0):
    """Pool image k: (JPEG bytes). Deterministic for a given seed, scale and PIL/libjpeg."""
    from PIL import Image
    r = random.Random(seed * 1_000_003 + k)
    w, h = r.randrange(256, 501), r.randrange(256, 376)
    w, h = max(16, round(w * scale)), max(16, round(h * scale))
    sw, sh = max(8, w // r.randrange(6, 14)), max(8, h // r.randrange(6, 14))
    chans = []
    for _ in range(3):
        field = Image.frombytes("L", (sw, sh), r.randbytes(sw * sh)).resize((w, h),
                                                                           Image.BICUBIC)
        noise = Image.frombytes("L", (w, h), r.randbytes(w * h))
        chans.append(Image.blend(field, noise, r.uniform(0.02, 0.15)))
    out = io.BytesIO()
    Image.merge("RGB", chans).save(out, "JPEG", quality=r.randrange(80, 91))
    return out.getvalue()


def with_comment(jpeg, text):
    """jpeg with a COM segment right after SOI: other bytes, same image."""
    payload = text.encode()
    return jpeg[:2] + b"\xff\xfe" + (len(payload) + 2).to_bytes(2, "big") + payload + jpeg[2:]


_POOL = []  # The encoded pool, set in each writer process (inherited, not pickled per job).


def set_pool(pool):
    _POOL[:] = pool


def write_files(job):
    """One slice of the files: (tree, seed, classes, first, last) -> bytes written."""
    tree, seed, classes, first, last = job
    pool = _POOL
    total = 0
    for i in range(first, last):
        cls = classes[i % len(classes)]
        r = random.Random(seed * 7_919 + i)
        data = with_comment(pool[r.randrange(len(pool))], f"shardfs-bench seed {seed} file {i}")
        with open(os.path.join(tree, "train", cls, f"{i // len(classes)}.jpg"), "wb") as f:
            f.write(data)
        total += len(data)
    return total


def generate(args):
    start = time.perf_counter()
    classes = class_names(args.classes)
    for c in classes:
        os.makedirs(os.path.join(args.out, "train", c), exist_ok=True)
    n_pool = min(args.files, POOL_MAX)
    procs = max(1, os.cpu_count() or 1)
    with multiprocessing.Pool(procs) as p:
        pool = p.starmap(make_image, [(args.seed, k, args.scale) for k in range(n_pool)],
                         chunksize=16)
    step = max(1, math.ceil(args.files / (procs * 8)))
    jobs = [(args.out, args.seed, classes, a, min(a + step, args.files))
            for a in range(0, args.files, step)]
    with multiprocessing.Pool(procs, initializer=set_pool, initargs=(pool,)) as p:
        total = sum(p.imap_unordered(write_files, jobs))
    print(json.dumps({"files": args.files, "bytes": total, "pool": n_pool,
                      "seconds": time.perf_counter() - start}), flush=True)
    return 0


# --- serve -------------------------------------------------------------------------------

def read_bytes(source):
    """A file's bytes: `source` is a path (torchvision's ImageFolder) or a binary file object
    (shardfs.torch.ImageFolder's loader argument)."""
    if hasattr(source, "read"):
        return source.read()
    with open(source, "rb") as f:
        return f.read()


class TimedRead:
    """ImageFolder's loader=, raw mode: read the bytes (timed), no decode."""

    def __call__(self, path):
        t0 = time.perf_counter()
        data = read_bytes(path)
        t1 = time.perf_counter()
        return (len(data), zlib.crc32(data), t1 - t0)


class TimedPilLoader:
    """ImageFolder's loader=: torchvision's pil_loader in two timed halves. The image goes on to
    the transform with its times and its bytes' length and CRC (the sample checksum)."""

    def __call__(self, path):
        from PIL import Image
        t0 = time.perf_counter()
        data = read_bytes(path)
        t1 = time.perf_counter()
        img = Image.open(io.BytesIO(data)).convert("RGB")
        t2 = time.perf_counter()
        return (img, t1 - t0, t2 - t1, len(data), zlib.crc32(data))


class TimedTransform:
    """Resize + CenterCrop + ToTensor on the image; passes the loader's figures through and adds
    the tensor's sum (checks that both paths decoded the same pixels)."""

    def __init__(self, size):
        from torchvision import transforms
        self.t = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size),
                                     transforms.ToTensor()])

    def __call__(self, x):
        img, io_s, dec_s, nbytes, crc = x
        tensor = self.t(img)
        return (tensor, io_s, dec_s, nbytes, crc, float(tensor.sum()))


def one_thread(_worker_id):
    import torch
    torch.set_num_threads(1)


def run_loader(req):
    import torch
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    raw = req["mode"] == "raw"
    t0 = time.perf_counter()
    if req.get("index"):
        # The Python package: the same ImageFolder over the index, read in-process. Its
        # loader gets a file object over bytes already read; the same timed halves.
        if req["pythonpath"] not in sys.path:
            sys.path.insert(0, req["pythonpath"])
        import shardfs.torch
        ds = shardfs.torch.ImageFolder(req["index"], root=req["index_root"],
                                       loader=TimedRead() if raw else TimedPilLoader(),
                                       transform=None if raw else TimedTransform(req["size"]))
    else:
        ds = ImageFolder(req["root"], loader=TimedRead() if raw else TimedPilLoader(),
                         transform=None if raw else TimedTransform(req["size"]))
    scan = time.perf_counter() - t0
    want = req["samples"] or len(ds)
    g = torch.Generator()
    g.manual_seed(req["seed"])  # The same permutation on every path: the same samples.
    dl = DataLoader(ds, batch_size=req["batch"], shuffle=True, num_workers=req["workers"],
                    generator=g, worker_init_fn=one_thread, drop_last=False,
                    persistent_workers=False)
    samples = nbytes = 0
    io_s = dec_s = 0.0
    crc_sum = 0
    pixel_sums = []
    per_class = [0] * len(ds.classes)
    start = time.perf_counter()
    it = iter(dl)
    first_batch = None
    for batch, target in it:
        if first_batch is None:
            first_batch = time.perf_counter() - start
        if raw:
            b_bytes, b_crc, b_io = batch
        else:
            _, b_io, b_dec, b_bytes, b_crc, b_pix = batch
            dec_s += float(b_dec.sum())
            pixel_sums += b_pix.tolist()
        io_s += float(b_io.sum())
        nbytes += int(b_bytes.sum())
        crc_sum = (crc_sum + int(b_crc.sum())) % (1 << 64)
        for t in target.tolist():
            per_class[t] += 1
        samples += len(target)
        if samples >= want:
            break
    seconds = time.perf_counter() - start
    del it  # Shuts the workers down before the next request.
    busy = req["workers"] * seconds
    return {"mode": req["mode"], "workers": req["workers"], "batch": req["batch"],
            "samples": samples, "dataset_samples": len(ds), "bytes": nbytes,
            "seconds": seconds, "scan_seconds": scan, "first_batch_seconds": first_batch,
            "samples_per_s": samples / seconds if seconds > 0 else None,
            "io_seconds": io_s, "decode_seconds": dec_s,
            "io_share": io_s / busy if busy > 0 else None,
            "decode_share": dec_s / busy if busy > 0 else None,
            "checksum": {"samples": samples, "bytes": nbytes, "crc32_sum": crc_sum,
                         "pixel_sum": round(math.fsum(pixel_sums), 3), "per_class": per_class}}


def serve(_args):
    import torch
    import torchvision
    import PIL
    torch.set_num_threads(1)
    print(json.dumps({"ready": True, "torch": torch.__version__,
                      "torchvision": torchvision.__version__, "pil": PIL.__version__}),
          flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            out = run_loader(req)
        except Exception as e:  # Reported to the driver; the next request may still work.
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)
    return 0


def main(argv):
    ap = argparse.ArgumentParser(prog="loader_worker.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--out", required=True)
    g.add_argument("--files", type=int, required=True)
    g.add_argument("--classes", type=int, required=True)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--scale", type=float, default=1.0, help="the images' sides times this")
    s = sub.add_parser("serve")
    s.add_argument("--run-dir", help="the bench run's scratch dir (names the process only)")
    a = ap.parse_args(argv)
    return generate(a) if a.cmd == "generate" else serve(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
