#!/usr/bin/env python3
"""shardfs bench --python: the Python package (src/python/shardfs) against the
loose tree, the FUSE mount and `mount --kernel`, from inside one Python
process.

Rows, each warm (a first pass unmeasured, then --reps measured passes, the
median reported), all over the same --files small JPEGs in one fixed
shuffled order:
  read loop     `Index.read(rel)` for the package; `open(path, "rb").read()`
                (Python's default, as a loader does) on the loose tree, the
                FUSE mount and the kernel mount.
  ImageFolder   `shardfs.torch.ImageFolder(index)[i]` against torchvision's
                `ImageFolder(root)[i]` on the loose tree and the mounts (PIL
                decode to RGB, no transform): files/s in the same shuffled
                order.
Every file's bytes are checked against the loose tree before timing; a
system whose bytes differ is reported FAILED.

Usage (after `ninja -C build`; as root for the mounts, else those rows are
skipped):
    /usr/bin/python3 tools/bench/shardfs_bench.py --python [--files 20000] [--reps 3]
        [--build-dir build] [--json out.json]
The interpreter must be the one the package was built for (Debian's
/usr/bin/python3 has torch and torchvision); the package is imported from
BUILD/src/python.
"""

import argparse
import hashlib
import os
import random
import statistics
import subprocess
import sys
import time

from bench_args import (add_build_dir_arg, add_json_arg, add_seed_arg, add_workdir_arg,
                        resolve_binaries, write_report_json)
from bench_common import BenchError, log
from bench_mounts import Mount, run_in_scratch

TARGET_READ_RATIO = 2.0  # The package's read loop against the loose tree's.


def parse_python_args(argv):
    ap = argparse.ArgumentParser(prog="shardfs_bench.py --python",
                                 description="The Python package against the loose tree and "
                                 "the mounts (warm, shuffled).")
    ap.add_argument("--python", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--files", type=int, default=20000, help="small JPEGs (default 20000)")
    ap.add_argument("--classes", type=int, default=20, help="class directories (default 20)")
    ap.add_argument("--reps", type=int, default=3, help="measured passes (default 3)")
    add_seed_arg(ap)
    add_build_dir_arg(ap)
    add_workdir_arg(ap, "default /var/tmp/shardfs-bench-python-<files>-<seed>")
    ap.add_argument("--no-loader", action="store_true", help="leave out the ImageFolder rows")
    ap.add_argument("--no-kernel", action="store_true", help="leave out mount --kernel")
    add_json_arg(ap)
    a = ap.parse_args(argv)
    a.workdir = a.workdir or f"/var/tmp/shardfs-bench-python-{a.files}-{a.seed}"
    resolve_binaries(a)  # shardfs from --build-dir: the package beside it is the one measured.
    return a


def make_dataset(a):
    """train/<class>/<n>.jpg, small noise JPEGs (about 2-9 KiB), cached in
    the work dir; and one GNU tar shard of it with its index."""
    from PIL import Image
    base = os.path.join(a.workdir, "data")
    tree = os.path.join(base, "tree")
    done = os.path.join(base, "done")
    if not os.path.exists(done):
        log(f"generating {a.files} JPEGs in {tree}")
        rnd = random.Random(a.seed)
        for i in range(a.files):
            cls = f"c{i % a.classes:03d}"
            d = os.path.join(tree, "train", cls)
            os.makedirs(d, exist_ok=True)
            w, h = rnd.randrange(16, 48), rnd.randrange(16, 48)
            img = Image.frombytes("RGB", (w, h), rnd.randbytes(w * h * 3))
            img.save(os.path.join(d, f"{i:07d}.jpg"), "JPEG", quality=90)
        shard = os.path.join(base, "shard-000.tar")
        subprocess.run(["tar", "--format=posix", "--sort=name", "-cf", shard, "-C", tree,
                        "train"], check=True)
        subprocess.run([a.shardfs, "index", "build", "--quiet", "--out",
                        os.path.join(base, "idx"), shard], check=True)
        open(done, "w").close()
    rels = []
    for root, _, files in os.walk(os.path.join(tree, "train")):
        for f in files:
            rels.append(os.path.relpath(os.path.join(root, f), tree))
    rels.sort()
    return tree, os.path.join(base, "idx"), rels


def timed_passes(a, fn):
    fn()  # Warm: caches filled, files verified.
    rates = []
    for _ in range(a.reps):
        t = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - t))
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def import_package(a):
    """The shardfs package built in --build-dir, for the interpreter running this; SystemExit
    saying so when it is not there."""
    sys.path.insert(0, os.path.join(a.build_dir, "src", "python"))
    try:
        import shardfs
    except ImportError as e:
        raise SystemExit(f"cannot import shardfs from {a.build_dir}/python ({e}); build first, "
                         f"with the interpreter that runs this ({sys.executable})")
    return shardfs


def mount_systems(a, scratch, idx_path, rep):
    """The FUSE mount and (unless --no-kernel) `mount --kernel` of the index, as root; returns
    ({system: mountpoint}, [Mount]). A mount that fails is a skipped row in rep["read"]."""
    roots, mounts = {}, []
    if os.geteuid() != 0:
        log("not root: the mount rows are skipped")
        return roots, mounts
    for system, extra in (("fuse", []), ("kernel", ["--kernel"])):
        if system == "kernel" and a.no_kernel:
            continue
        mnt = os.path.join(scratch, system)
        os.makedirs(mnt)
        argv = [a.shardfs, "mount", *extra, idx_path, mnt]
        if system == "fuse":
            argv.insert(2, "-f")
        m = Mount(f"shardfs-{system}", mnt, argv, "kernel" if extra else "fuse3",
                  os.path.join(scratch, f"{system}.log"))
        try:
            m.mount(120)
        except (BenchError, TimeoutError, OSError) as e:
            log(f"{system}: not mounted: {e}")
            rep["read"][system] = {"skipped": str(e)}
            continue
        mounts.append(m)
        roots[system] = mnt
    return roots, mounts


def time_read_loops(a, rep, index, roots, rels, order, want):
    """rep["read"]: Index.read and open().read() on every root, in `order`, after checking
    every file's digest against `want`."""
    readers = {"shardfs.Index": index.read}
    for system, root in roots.items():
        def read_file(r, root=root):
            with open(os.path.join(root, r), "rb") as f:
                return f.read()
        readers[system] = read_file
    for name, read in readers.items():
        bad = [r for r in rels if hashlib.blake2b(read(r), digest_size=16).digest() != want[r]]
        if bad:
            rep["read"][name] = {"failed": f"{len(bad)} files differ, e.g. {bad[0]}"}
            continue

        def loop(read=read):
            for r in order:
                read(r)
            return len(order)
        rep["read"][name] = timed_passes(a, loop)
        log(f"read {name}: {rep['read'][name]['median']:.0f} files/s")


def time_imagefolder(a, rep, index, roots):
    """rep["imagefolder"]: shardfs.torch.ImageFolder against torchvision's on every root, in
    one shuffled order; a dataset other than the loose tree's is failed, not timed."""
    import shardfs.torch as st
    import torchvision
    datasets = {"shardfs.torch": st.ImageFolder(index, root="train")}
    for system, root in roots.items():
        datasets[system] = torchvision.datasets.ImageFolder(os.path.join(root, "train"))
    ref = datasets["loose"]
    n = len(ref)
    pick = list(range(n))
    random.Random(a.seed + 1).shuffle(pick)
    for name, ds in datasets.items():
        if len(ds) != n or ds.classes != ref.classes:
            rep["imagefolder"][name] = {"failed": "another dataset than the loose tree's"}
            continue

        def loop(ds=ds):
            for i in pick:
                ds[i]
            return n
        rep["imagefolder"][name] = timed_passes(a, loop)
        log(f"ImageFolder {name}: {rep['imagefolder'][name]['median']:.0f} samples/s")


def main_python(argv):
    a = parse_python_args(argv)
    shardfs = import_package(a)
    os.makedirs(a.workdir, exist_ok=True)
    tree, idx_path, rels = make_dataset(a)
    order = list(rels)
    random.Random(a.seed).shuffle(order)
    want = {r: hashlib.blake2b(open(os.path.join(tree, r), "rb").read(), digest_size=16).digest()
            for r in rels}

    def body(scratch):
        rep = {"schema": "shardfs-bench-python/1", "files": len(rels), "reps": a.reps,
               "python": sys.version.split()[0], "read": {}, "imagefolder": {}}
        roots, mounts = mount_systems(a, scratch, idx_path, rep)
        roots = {"loose": tree} | roots
        index = shardfs.Index(idx_path)
        time_read_loops(a, rep, index, roots, rels, order, want)
        if not a.no_loader:
            time_imagefolder(a, rep, index, roots)
        index.close()
        for m in mounts:
            m.unmount()
        print_python_report(rep)
        write_report_json(a.json_out, rep)
        return 0

    return run_in_scratch(a.workdir, "run-", body)


def print_python_report(rep):
    print(f"\nshardfs Python package, {rep['files']} files, warm, shuffled, "
          f"median of {rep['reps']} (Python {rep['python']})")
    for part, unit, base in (("read", "files/s", "loose"), ("imagefolder", "samples/s", "loose")):
        rows = rep[part]
        if not rows:
            continue
        ref = rows.get(base, {}).get("median")
        print(f"\n{'read loop' if part == 'read' else 'ImageFolder[i]'} ({unit})")
        for name, r in rows.items():
            if "median" not in r:
                print(f"  {name:16} {r.get('failed') or 'skipped: ' + r.get('skipped', '')}")
                continue
            ratio = f"{r['median'] / ref:5.2f}x loose" if ref else ""
            print(f"  {name:16} {r['median']:10.0f}  [{r['min']:.0f}..{r['max']:.0f}]  {ratio}")
    r = rep["read"].get("shardfs.Index", {}).get("median")
    ref = rep["read"].get("loose", {}).get("median")
    if r and ref:
        met = "met" if r / ref >= TARGET_READ_RATIO else "NOT met"
        print(f"\ntarget: Index.read loop >= {TARGET_READ_RATIO}x open().read() on the loose "
              f"tree: {r / ref:.2f}x, {met}")
