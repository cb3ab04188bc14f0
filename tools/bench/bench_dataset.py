"""The dataset: a deterministic ImageNet-like tree, generated once and cached by its parameters."""

import hashlib
import json
import math
import os
import random
import shutil
import time

from bench_common import fmt_bytes, log

GENERATOR_VERSION = 1


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
