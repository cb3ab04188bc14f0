#!/usr/bin/env python3
"""Writes the small built-in sample dataset: an ImageFolder-style tree.

    sample/train/<class>/<class>_<n>.ppm   tiny images (deterministic pixels)
    sample/train/<class>/<class>_<n>.json  a sidecar per sample
    sample/README.txt, an empty dir, a symlink and a hard link

Usage: make_sample.py DEST_DIR
"""
import json
import os
import random
import sys

CLASSES = ["cat", "dog", "fox"]
PER_CLASS = 8


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: make_sample.py DEST_DIR", file=sys.stderr)
        return 2
    dest = sys.argv[1]
    rng = random.Random(20261130)
    mtime = 1_764_460_800  # Fixed, so the sample is the same everywhere.
    for cls in CLASSES:
        d = os.path.join(dest, "train", cls)
        os.makedirs(d, exist_ok=True)
        for n in range(PER_CLASS):
            stem = os.path.join(d, f"{cls}_{n:03d}")
            w, h = 16, 16
            pixels = rng.randbytes(w * h * 3)
            with open(stem + ".ppm", "wb") as f:
                f.write(b"P6\n%d %d\n255\n" % (w, h) + pixels)
            with open(stem + ".json", "w") as f:
                json.dump({"label": cls, "index": n, "width": w, "height": h}, f)
                f.write("\n")
            for p in (stem + ".ppm", stem + ".json"):
                os.utime(p, ns=(mtime * 10**9, mtime * 10**9 + n * 1000))
    os.makedirs(os.path.join(dest, "empty"), exist_ok=True)
    with open(os.path.join(dest, "README.txt"), "w") as f:
        f.write("shardfs sample: 3 classes x 8 samples, each a 16x16 PPM and a JSON sidecar.\n")
    link = os.path.join(dest, "latest")
    if not os.path.lexists(link):
        os.symlink("train/cat/cat_000.ppm", link)
    hard = os.path.join(dest, "train", "cat", "cat_000.copy.ppm")
    if not os.path.exists(hard):
        os.link(os.path.join(dest, "train", "cat", "cat_000.ppm"), hard)
    return 0


if __name__ == "__main__":
    sys.exit(main())
