"""`shardfs_bench.py --python-peers`: the Python package against webdataset's own readers, on
the same tar shards, in one run.

Dataset: --samples WebDataset samples, each a key's .jpg (a real JPEG of noise, --kib-min to
--kib-max KiB), .cls (the class, text) and .json ({"cls", "w", "h"}), written by Python's
tarfile into shards of about --shard-size (cut by bytes, as webdataset's ShardWriter cuts
them, so shards hold different numbers of samples) and indexed by `shardfs index build`;
cached in the work dir. Rows (peers_worker.py does the reading, under this interpreter,
with the package of --build-dir and whatever else is on PYTHONPATH):

  random access  one process, every sample once in one shuffled order:
                 shardfs.torch.SampleDataset[i] against wids' ShardListDataset[i]
                 (webdataset's indexed reader); cold (page cache dropped, the dataset
                 opened in the timed pass) and warm (the pass right after);
  stream         --world ranks started together, each a torch DataLoader of --workers
                 forked workers, one epoch: shardfs.torch.SampleStream(index, rank=, world=,
                 seed=, shuffle_buffer=) against webdataset's WebDataset(urls,
                 shardshuffle=True, nodesplitter=split_by_node,
                 workersplitter=split_by_worker).shuffle(--shuffle-buffer); cold then warm.
                 Job samples/s (every rank's samples over the slowest rank's seconds) and
                 the samples each rank yields.

each with --modes raw (the bytes as each library gives them) and decode (.jpg to an RGB PIL
image, .json and .cls decoded: webdataset's own .decode("pilrgb"); shardfs and wids the same
steps by peers_worker.decode_item). Every item is checked against the generated data. A peer
that does not import is a row saying "not installed"; the run goes on. Cold rows need root
(drop_caches). The libraries alternate within each of the --reps rounds; each figure is the
median of the rounds.

Usage (after `ninja -C build`; the interpreter the package was built for):
    /usr/bin/python3 tools/bench/shardfs_bench.py --python-peers [--samples 20000]
        [--reps 3] [--json out.json]
"""

import argparse
import hashlib
import io
import json
import math
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import zlib

from bench_args import (SOURCE_ROOT, add_binary_args, add_json_arg, add_seed_arg,
                        add_workdir_arg, host_facts, resolve_binaries, write_report_json)
from bench_common import BenchError, fmt_bytes, log, parse_size
from bench_mounts import run_in_scratch
from bench_workloads import can_drop_caches, drop_caches

TARGET_RANDOM_RATIO = 1.5  # SampleDataset[i] against ShardListDataset[i], raw, warm.
DATASET_VERSION = 1
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers_worker.py")
STEP_TIMEOUT_S = 1800.0
PEERS = {"random": ("shardfs", "wids"), "stream": ("shardfs", "webdataset")}
NAMES = {"shardfs": {"random": "shardfs.torch.SampleDataset",
                     "stream": "shardfs.torch.SampleStream"},
         "wids": {"random": "wids.ShardListDataset"},
         "webdataset": {"stream": "webdataset.WebDataset"}}


def parse_peers_args(argv):
    ap = argparse.ArgumentParser(prog="shardfs_bench.py --python-peers",
                                 description="The Python package against webdataset's readers "
                                 "(wids' ShardListDataset, webdataset's pipeline), same shards.")
    ap.add_argument("--python-peers", action="store_true", required=True)
    ap.add_argument("--samples", type=int, default=20000, help="samples (20000)")
    ap.add_argument("--classes", type=int, default=100, help="classes of the .cls (100)")
    ap.add_argument("--kib-min", type=float, default=4, help="smallest .jpg, KiB (4)")
    ap.add_argument("--kib-max", type=float, default=16, help="largest .jpg, KiB (16)")
    ap.add_argument("--shard-size", default="24MiB", help="shards cut at this size (24MiB)")
    ap.add_argument("--reps", type=int, default=3, help="rounds of every row (3)")
    ap.add_argument("--modes", default="raw,decode", help="raw, decode or both (raw,decode)")
    ap.add_argument("--parts", default="random,stream", help="random, stream or both")
    ap.add_argument("--world", type=int, default=2, help="ranks of the stream rows (2)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank (2)")
    ap.add_argument("--batch", type=int, default=32, help="samples per batch (32)")
    ap.add_argument("--shuffle-buffer", type=int, default=1000, help="samples (1000)")
    add_seed_arg(ap)
    add_binary_args(ap)
    add_workdir_arg(ap, "dataset and scratch (/var/tmp/shardfs-bench-peers-<samples>-<seed>)")
    add_json_arg(ap)
    a = ap.parse_args(argv)
    resolve_binaries(a)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    a.parts = [p.strip() for p in a.parts.split(",") if p.strip()]
    if not set(a.modes) <= {"raw", "decode"} or not set(a.parts) <= {"random", "stream"}:
        ap.error("--modes takes raw,decode and --parts random,stream")
    if a.samples < a.world or a.reps < 1 or a.world < 1 or a.workers < 0 or \
            not 0 < a.kib_min <= a.kib_max:
        ap.error("--samples at least --world, --reps and --world positive, "
                 "0 < --kib-min <= --kib-max")
    a.workdir = a.workdir or f"/var/tmp/shardfs-bench-peers-{a.samples}-{a.seed}"
    return a


def jpeg_of(rnd, kib_min, kib_max):
    """A JPEG of noise of about a random size in [kib_min, kib_max] KiB (noise at quality 90
    takes about a byte per pixel), and its width and height."""
    from PIL import Image
    area = rnd.uniform(kib_min, kib_max) * 1024
    aspect = rnd.uniform(0.75, 1.33)
    w = max(8, round(math.sqrt(area * aspect)))
    h = max(8, round(area / w))
    out = io.BytesIO()
    Image.frombytes("RGB", (w, h), rnd.randbytes(w * h * 3)).save(out, "JPEG", quality=90)
    return out.getvalue(), w, h


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))


def write_shards(a, base):
    """The samples into base/shard-NNNNN.tar; the data description (peers_worker.py's)."""
    rnd = random.Random(a.seed)
    limit = parse_size(a.shard_size)
    data = {"samples": a.samples, "keys": [], "crc": [], "cls": [], "shards": [],
            "jpg_bytes": []}
    tar = None
    for i in range(a.samples):
        if tar is None or tar.offset >= limit:
            if tar is not None:
                tar.close()
            path = os.path.join(base, f"shard-{len(data['shards']):05d}.tar")
            tar = tarfile.open(path, "w", format=tarfile.USTAR_FORMAT)
            data["shards"].append({"url": path, "nsamples": 0})
        key = f"s{i:07d}"
        jpg, w, h = jpeg_of(rnd, a.kib_min, a.kib_max)
        cls = rnd.randrange(a.classes)
        add_member(tar, key + ".jpg", jpg)
        add_member(tar, key + ".cls", b"%d" % cls)
        add_member(tar, key + ".json", json.dumps({"cls": cls, "w": w, "h": h}).encode())
        data["shards"][-1]["nsamples"] += 1
        data["keys"].append(key)
        data["crc"].append(zlib.crc32(jpg))
        data["cls"].append(cls)
        data["jpg_bytes"].append(len(jpg))
    tar.close()
    for s in data["shards"]:
        s["bytes"] = os.path.getsize(s["url"])
    return data


def make_dataset(a):
    """The shards, their index and the data description, cached in the work dir by their
    parameters; returns (path of the description, the description)."""
    key = json.dumps([DATASET_VERSION, a.samples, a.classes, a.kib_min, a.kib_max,
                      parse_size(a.shard_size), a.seed])
    base = os.path.join(a.workdir, "data-" + hashlib.sha256(key.encode()).hexdigest()[:12])
    desc = os.path.join(base, "data.json")
    if os.path.exists(desc):
        with open(desc) as f:
            return desc, json.load(f)
    os.makedirs(base, exist_ok=True)
    log(f"writing {a.samples} samples into tar shards of {a.shard_size} in {base}")
    start = time.monotonic()
    data = write_shards(a, base)
    data["index"] = os.path.join(base, "idx")
    subprocess.run([a.shardfs, "index", "build", "--quiet", "--out", data["index"]]
                   + [s["url"] for s in data["shards"]], check=True)
    data["order"] = list(range(a.samples))
    random.Random(a.seed + 1).shuffle(data["order"])
    log(f"dataset: {len(data['shards'])} shards, {time.monotonic() - start:.1f} s")
    with open(desc + ".tmp", "w") as f:
        json.dump(data, f)
    os.rename(desc + ".tmp", desc)
    return desc, data


def worker_env(pkg):
    """This environment with the folder `pkg` (the package's copy) first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([pkg] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                 else []))
    return env


def package_identity(pkg):
    """Which code of the package (its copy in folder `pkg`) is measured: the source tree's
    commit, and whether the Python files built are that commit's (an edit may be built but
    not committed)."""
    pkg = os.path.join(pkg, "shardfs")

    def git(*args):
        p = subprocess.run(["git", "-C", SOURCE_ROOT] + list(args), capture_output=True,
                           text=True)
        return p.stdout.strip() if p.returncode == 0 else None

    head = git("rev-parse", "--short=12", "HEAD")
    if head is None:
        return "not in a git checkout"
    differ = []
    for name in sorted(os.listdir(pkg)) if os.path.isdir(pkg) else []:
        built = os.path.join(pkg, name)
        if not name.endswith(".py") or os.path.islink(built):
            continue
        if git("hash-object", built) != git("rev-parse", f"HEAD:src/python/shardfs/{name}"):
            differ.append(name)
    return f"source {head}" + (f"; built Python files not as committed: {', '.join(differ)}"
                                if differ else "; built Python files as committed")


def probe(env, module, version_expr):
    """(True, "version from path") if `module` imports here, else (False, why)."""
    code = f"import {module} as m; print({version_expr}, 'from', os.path.dirname(m.__file__))"
    p = subprocess.run([sys.executable, "-c", "import os; " + code], env=env,
                       capture_output=True, text=True)
    if p.returncode == 0:
        return True, p.stdout.strip()
    lines = p.stderr.strip().splitlines()
    return False, "not installed: " + (lines[-1] if lines else f"exit {p.returncode}")


class Worker:
    """One peers_worker.py process, in a session of its own (stopped with its DataLoader
    workers by its process group if it outlives the run)."""

    def __init__(self, args, env, log_path):
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, WORKER] + args, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True)
        self.buf = b""

    def expect(self, word, timeout=STEP_TIMEOUT_S):
        """The rest of the next stdout line starting with `word`; other lines go to the
        log."""
        end = time.monotonic() + timeout
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line, self.buf = self.buf[:nl], self.buf[nl + 1:]
                if line.startswith(word.encode()):
                    return line[len(word):].decode().strip()
                self.log.write(line + b"\n")
                continue
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise BenchError(f"peers_worker: no {word} within {timeout:.0f} s "
                                 f"(log: {self.log_path})")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                self.log.flush()
                raise BenchError(f"peers_worker exited ({self.proc.wait()}) before {word}: "
                                 + tail(self.log_path))
            self.buf += chunk

    def go(self):
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def tail(path, lines=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def run_steps(workers, temps, cold_ok):
    """Each step at once on every worker; a "cold" step after drop_caches (when cold_ok).
    [[result per worker] per step]."""
    out = []
    try:
        for temp in temps:
            for w in workers:
                w.expect("READY")
            if temp == "cold" and cold_ok:
                drop_caches()
            for w in workers:
                w.go()
            out.append([json.loads(w.expect("RESULT")) for w in workers])
    finally:
        for w in workers:
            w.close()
    return out


def random_round(a, env, desc, lib, mode, verify, cold_ok, scratch):
    """One worker: a cold pass (the dataset opened in it) and a warm one; (cold, warm)."""
    args = ["random", "--lib", lib, "--mode", mode, "--data", desc] + \
        (["--verify"] if verify else [])
    w = Worker(args, env, os.path.join(scratch, f"random-{lib}-{mode}.log"))
    (cold,), (warm,) = run_steps([w], ["cold", "warm"], cold_ok)
    return cold, warm


def stream_round(a, env, desc, lib, mode, cold_ok, scratch):
    """--world rank processes at once, one cold epoch then one warm; per step, each rank's
    result."""
    workers = []
    try:
        for rank in range(a.world):
            args = ["stream", "--lib", lib, "--mode", mode, "--data", desc, "--rank", str(rank),
                    "--world", str(a.world), "--workers", str(a.workers), "--batch",
                    str(a.batch), "--shuffle-buffer", str(a.shuffle_buffer), "--seed",
                    str(a.seed), "--steps", "2"]
            workers.append(Worker(args, env,
                                  os.path.join(scratch, f"stream-{lib}-{mode}-{rank}.log")))
    except BaseException:
        for w in workers:
            w.close()
        raise
    return run_steps(workers, ["cold", "warm"], cold_ok)


def stream_figures(results, n):
    """A job's epoch: samples/s (all ranks' samples over the slowest rank's seconds), the
    samples of each rank, and what is wrong (None: nothing)."""
    problem = next((r["problem"] for r in results if r["problem"]), None)
    seen = set()
    for r in results:
        seen.update(r["numbers"])
    if problem is None and seen != set(range(n)):
        problem = f"{n - len(seen & set(range(n)))} samples not read in the epoch"
    return {"samples_per_s": sum(r["samples"] for r in results) /
            max(r["seconds"] for r in results),
            "per_rank": [r["samples"] for r in results], "problem": problem}


def new_row(status):
    return {"status": status, "cold": [], "warm": [], "per_rank": {"cold": [], "warm": []},
            "problem": None}


def measure(a, env, desc, data, avail, cold_ok, scratch):
    """rows[part][mode][lib], the libraries alternating within each round."""
    rows = {part: {mode: {lib: new_row("ok" if avail[lib][0] else avail[lib][1])
                          for lib in PEERS[part]} for mode in a.modes} for part in a.parts}
    for rep in range(a.reps):
        for part in a.parts:
            for mode in a.modes:
                for lib in PEERS[part]:
                    row = rows[part][mode][lib]
                    if row["status"] != "ok":
                        continue
                    if part == "random":
                        record_random(row, random_round(a, env, desc, lib, mode, rep == 0,
                                                        cold_ok, scratch), cold_ok)
                    else:
                        steps = stream_round(a, env, desc, lib, mode, cold_ok, scratch)
                        record_stream(row, steps, data["samples"], cold_ok)
                    log(f"round {rep + 1}: {part} {mode} {lib}: "
                        + ", ".join(f"{t} {row[t][-1]:,.0f} samples/s"
                                    for t in ("cold", "warm") if row[t]) +
                        (f"; FAILED: {row['problem']}" if row["problem"] else ""))
    return rows


def record_random(row, steps, cold_ok):
    """A random-access round into its row; without cold_ok the first pass (caches not
    dropped) is not a figure."""
    cold, warm = steps
    row["problem"] = row["problem"] or cold.get("problem")
    if cold_ok:
        row["cold"].append(cold["samples"] / cold["seconds"])
        row.setdefault("open_seconds", []).append(cold["open_seconds"])
    row["warm"].append(warm["samples"] / warm["seconds"])


def record_stream(row, steps, n, cold_ok):
    for temp, results in zip(("cold", "warm"), steps):
        f = stream_figures(results, n)
        row["problem"] = row["problem"] or f["problem"]
        if temp == "warm" or cold_ok:
            row[temp].append(f["samples_per_s"])
            row["per_rank"][temp].append(f["per_rank"])


def storage_of(path):
    """'fstype (source)' of the filesystem holding `path`, from /proc/self/mountinfo."""
    path, best = os.path.realpath(path), ("", "?")
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            mp = left.split()[4].replace("\\040", " ")
            inside = path == mp or path.startswith(mp.rstrip("/") + "/")
            if inside and len(mp) >= len(best[0]):
                fstype, source = right.split()[:2]
                best = (mp, f"{fstype} ({source})")
    return best[1]


def med(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)} if xs else None


def summarize(rows):
    """Each row's figures as median/min/max, and ratios shardfs/peer."""
    out = {}
    for part, modes in rows.items():
        out[part] = {}
        for mode, libs in modes.items():
            out[part][mode] = {}
            for lib, row in libs.items():
                out[part][mode][lib] = dict(row, **{f"{t}_samples_per_s": med(row[t])
                                                    for t in ("cold", "warm")})
            peer = PEERS[part][1]
            out[part][mode]["ratio"] = {
                t: (out[part][mode]["shardfs"][f"{t}_samples_per_s"]["median"] /
                    out[part][mode][peer][f"{t}_samples_per_s"]["median"])
                if all(out[part][mode][x][f"{t}_samples_per_s"] for x in PEERS[part]) else None
                for t in ("cold", "warm")}
    return out


def cell(fig):
    if not fig:
        return "-"
    return f"{fig['median']:,.0f} [{fig['min']:,.0f}..{fig['max']:,.0f}]"


def row_cells(libs, lib, temp):
    """A library's cell: its figure, or why there is none."""
    row = libs[lib]
    if row["status"] != "ok":
        return row["status"].split(":")[0]  # The reason is on the library's line.
    if row["problem"]:
        return "FAILED: " + row["problem"]
    return cell(row[f"{temp}_samples_per_s"])


def print_part(rep, part, title):
    peer = PEERS[part][1]
    a, b = NAMES["shardfs"][part], NAMES[peer][part]
    print(f"\n{title}")
    extra = "  per rank (last round): shardfs | " + peer if part == "stream" else ""
    print(f"{'mode':7} {'temp':5} {a:>30} {b:>30} {'ratio':>7}{extra}")
    for mode, libs in rep["rows"][part].items():
        for temp in ("cold", "warm"):
            if temp == "cold" and not rep["environment"]["cold_runs"]:
                print(f"{mode:7} {temp:5} skipped: {rep['environment']['cold_why']}")
                continue
            ratio = libs["ratio"][temp]
            line = (f"{mode:7} {temp:5} {row_cells(libs, 'shardfs', temp):>30} "
                    f"{row_cells(libs, peer, temp):>30} "
                    f"{(f'{ratio:.2f}x' if ratio else '-'):>7}")
            if part == "stream":
                counts = [libs[x]["per_rank"][temp][-1] if libs[x]["per_rank"][temp] else "-"
                          for x in ("shardfs", peer)]
                line += f"  {counts[0]} | {counts[1]}"
            print(line)


def print_peers_report(rep):
    d, env, p = rep["dataset"], rep["environment"], rep["params"]
    sizes = d["jpg_bytes"]
    print(f"\nshardfs against webdataset's readers: {d['samples']:,} samples (.jpg "
          f"{fmt_bytes(sizes['min'])} to {fmt_bytes(sizes['max'])}, median "
          f"{fmt_bytes(sizes['median'])}; .cls; .json) in {len(d['shards'])} tar shards "
          f"({fmt_bytes(d['shard_bytes'])}, {min(d['per_shard'])} to {max(d['per_shard'])} "
          f"samples each); storage {env['storage']}; {env['cpus']} CPUs; load "
          f"{env['loadavg_start'][0]:.2f} at start, {env['loadavg_end'][0]:.2f} at end")
    for lib, why in env["libraries"].items():
        print(f"  {lib}: {why}")
    print("raw: the bytes as each library gives them; decode: .jpg to an RGB PIL image, .json "
          "and .cls (webdataset: .decode(\"pilrgb\"); shardfs and wids: the same steps)")
    if "random" in rep["rows"]:
        print_part(rep, "random", "Random access, one process, every sample once in a "
                   f"shuffled order: samples/s, median [min..max] of {p['reps']}; cold: page "
                   "cache dropped, the dataset opened in the pass")
    if "stream" in rep["rows"]:
        print_part(rep, "stream", f"Stream, {p['world']} ranks started together x "
                   f"{p['workers']} forked DataLoader workers, batch {p['batch']}, shuffle "
                   f"buffer {p['shuffle_buffer']}: job samples/s (all ranks' samples over the "
                   f"slowest rank's epoch), median [min..max] of {p['reps']}")
    t = rep["target"]
    if t["value"] is not None:
        print(f"\ntarget: SampleDataset[i] >= {t['goal']}x ShardListDataset[i] (raw, warm): "
              f"{t['value']:.2f}x, {t['status']}")
    else:
        print(f"\ntarget: SampleDataset[i] >= {t['goal']}x ShardListDataset[i] (raw, warm): "
              "not measured")


def target_of(rows):
    ratio = rows.get("random", {}).get("raw", {}).get("ratio", {}).get("warm")
    return {"goal": TARGET_RANDOM_RATIO, "value": ratio,
            "status": None if ratio is None else
            ("met" if ratio >= TARGET_RANDOM_RATIO else "NOT met")}


def peers_report(a, ctx, data, rows):
    """The report (shardfs-bench-peers/1)."""
    return {"schema": "shardfs-bench-peers/1",
            "params": {k: getattr(a, k) for k in ("samples", "classes", "kib_min", "kib_max",
                                                  "shard_size", "reps", "modes", "parts",
                                                  "world", "workers", "batch",
                                                  "shuffle_buffer", "seed")},
            "environment": host_facts(a) | ctx | {"storage": storage_of(a.workdir),
                                                  "interpreter": sys.executable,
                                                  "loadavg_end": os.getloadavg()},
            "dataset": {"samples": data["samples"], "shards": data["shards"],
                        "per_shard": [s["nsamples"] for s in data["shards"]],
                        "shard_bytes": sum(s["bytes"] for s in data["shards"]),
                        "jpg_bytes": med(data["jpg_bytes"]), "index": data["index"]},
            "rows": rows, "target": target_of(rows)}


def snapshot_package(a, scratch):
    """A copy of the package of --build-dir in the run's scratch (links followed), so that
    a rebuild of the tree during the run does not change what is measured; the folder to put
    on PYTHONPATH."""
    src = os.path.join(a.build_dir, "src", "python", "shardfs")
    if not os.path.isdir(src):
        raise BenchError(f"no package at {src}: build first")
    dst = os.path.join(scratch, "package")
    shutil.copytree(src, os.path.join(dst, "shardfs"),
                    ignore=shutil.ignore_patterns("*.p", "__pycache__"))
    return dst


def main_peers(argv):
    a = parse_peers_args(argv)
    if not os.access(a.shardfs, os.X_OK):
        raise SystemExit(f"shardfs_bench.py --python-peers: {a.shardfs} is not an executable; "
                         "build first or pass --build-dir/--shardfs")
    os.makedirs(a.workdir, exist_ok=True)

    def body(scratch):
        ctx = {"loadavg_start": os.getloadavg()}
        pkg = snapshot_package(a, scratch)
        env = worker_env(pkg)
        ok, why = probe(env, "shardfs.torch", "'shardfs', __import__('shardfs').__version__")
        if not ok:
            raise BenchError(f"cannot import shardfs.torch of {a.build_dir}/src/python with "
                             f"{sys.executable} ({why}); build first")
        avail = {"shardfs": (True, f"{why} ({package_identity(pkg)})"),
                 "wids": probe(env, "wids", "'wids'"),
                 "webdataset": probe(env, "webdataset",
                                     "'webdataset', getattr(m, '__version__', '?')")}
        desc, data = make_dataset(a)
        cold_ok, cold_why = can_drop_caches()
        ctx |= {"cold_runs": cold_ok, "cold_why": cold_why,
                "libraries": {lib: why for lib, (_, why) in avail.items()}}
        rows = summarize(measure(a, env, desc, data, avail, cold_ok, scratch))
        rep = peers_report(a, ctx, data, rows)
        print_peers_report(rep)
        write_report_json(a.json_out, rep)
        failed = [f"{part} {mode} {lib}" for part, modes in rows.items()
                  for mode, libs in modes.items() for lib, r in libs.items()
                  if lib != "ratio" and r["problem"]]
        if failed:
            log(f"FAILED: {', '.join(failed)}")
        return 1 if failed else 0

    return run_in_scratch(a.workdir, "run-", body)
