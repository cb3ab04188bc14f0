#!/usr/bin/env python3
"""The training job of the cluster rehearsal: an unmodified torchvision
ImageFolder + torch DataLoader over one rank's mount. It runs under the interpreter that has
torch, torchvision and PIL (Debian's /usr/bin/python3); cluster_rig.py starts one per rank.

  cluster_loader.py load --root DIR [--workers N] [--batch B] [--step S] [--seed S] [--gate]
      ImageFolder(DIR, loader=...) and DataLoader(shuffle=True, num_workers=N). The loader does
      what torchvision's pil_loader does (open, read, PIL decode, convert('RGB')) and returns,
      beside the image's size, the file's path relative to DIR, its byte count and the CRC-32
      of its bytes, so the driver can check every sample against the source. Prints, one JSON
      object per line on stdout:
        {"ready": true, "classes": [...], "dataset_samples": N}   after the dataset scan;
        then, with --gate, waits for one line on stdin (all ranks start together);
        {"batch": i, "samples": n, "t": T}                       per batch received;
        {"done": true, "start": T, "end": T, "samples": [[rel, bytes, crc32, t], ...]}.
      T is time.monotonic(), one clock for every process of the machine. --step S sleeps S
      seconds per batch in the main process: the training step that consumes the batch.
      One epoch; a sample that cannot be read or decoded ends the job with exit status 1.

  cluster_loader.py jpegs --out DIR --classes C --per-class N [--seed S]
      Writes DIR/cNN/sNNNNN.jpg: small real JPEGs (PIL, noise, 24..96 px a side), each file's
      bytes different. Prints one JSON line {"files": n, "bytes": b}.
"""

import argparse
import io
import json
import os
import random
import sys
import time
import zlib


class ReadAndDecode:
    """ImageFolder's loader=: torchvision's pil_loader, plus what identifies the sample."""

    def __init__(self, root):
        self.root = root

    def __call__(self, path):
        from PIL import Image
        with open(path, "rb") as f:
            data = f.read()
        img = Image.open(io.BytesIO(data)).convert("RGB")
        return (os.path.relpath(path, self.root), len(data), zlib.crc32(data),
                img.size[0] * img.size[1])


def one_thread(_worker_id):
    import torch
    torch.set_num_threads(1)


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def load(a):
    import torch
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    torch.set_num_threads(1)
    ds = ImageFolder(a.root, loader=ReadAndDecode(a.root))
    emit({"ready": True, "classes": ds.classes, "dataset_samples": len(ds)})
    if a.gate and not sys.stdin.readline():
        return 2  # The driver went away before the start.
    g = torch.Generator()
    g.manual_seed(a.seed)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, generator=g,
                    worker_init_fn=one_thread if a.workers else None)
    start = time.monotonic()
    samples = []
    for i, ((rel, nbytes, crc, _pixels), _target) in enumerate(dl):
        t = time.monotonic()
        samples += [[r, int(n), int(c), t] for r, n, c in zip(rel, nbytes.tolist(),
                                                               crc.tolist())]
        emit({"batch": i, "samples": len(samples), "t": t})
        if a.step > 0:
            time.sleep(a.step)
    emit({"done": True, "start": start, "end": time.monotonic(), "samples": samples})
    return 0


def jpegs(a):
    from PIL import Image
    rnd = random.Random(a.seed)
    total = files = 0
    for c in range(a.classes):
        d = os.path.join(a.out, "c%02d" % c)
        os.makedirs(d, exist_ok=True)
        for i in range(a.per_class):
            w, h = rnd.randrange(24, 97), rnd.randrange(24, 97)
            img = Image.frombytes("RGB", (w, h), rnd.randbytes(w * h * 3))
            out = io.BytesIO()
            img.save(out, "JPEG", quality=rnd.randrange(70, 96))
            with open(os.path.join(d, "s%05d.jpg" % (c * a.per_class + i)), "wb") as f:
                f.write(out.getvalue())
            total += out.tell()
            files += 1
    emit({"files": files, "bytes": total})
    return 0


def main(argv):
    ap = argparse.ArgumentParser(prog="cluster_loader.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--root", required=True)
    ld.add_argument("--workers", type=int, default=2)
    ld.add_argument("--batch", type=int, default=8)
    ld.add_argument("--step", type=float, default=0.0)
    ld.add_argument("--seed", type=int, default=0)
    ld.add_argument("--gate", action="store_true")
    jp = sub.add_parser("jpegs")
    jp.add_argument("--out", required=True)
    jp.add_argument("--classes", type=int, required=True)
    jp.add_argument("--per-class", type=int, required=True)
    jp.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    return load(a) if a.cmd == "load" else jpegs(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
