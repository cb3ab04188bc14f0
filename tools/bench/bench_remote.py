"""--remote: tar shards read over HTTP in chunks through a bounded cache, their targets
measured in one run, against the same work on local shards and on loose files over HTTP.

One nginx on loopback serves the dataset's shards (/shards/...) and its loose tree (/tree/...);
a FaultProxy (tests/integration/remote_servers.py) in front of it adds --latency per request
(5 ms) and counts requests. The HTTP index is built over the proxy's URL. Rows:
  1. metadata walks through an HTTP mount (`find -type f`, `ls -lR`, lstat of every file):
     requests seen by the proxy and by `shardfs stats`;
  2. a cold tree-order epoch (fresh mount, memory cache as large as the shards, page cache
     dropped) over HTTP against the same epoch from a local-shard mount, cold;
  3. shuffled, --procs readers, cold: the HTTP mount against loose files fetched through the
     same proxy one GET per file by --procs keep-alive clients (how per-object mounts read);
  4. bytes fetched over shard bytes for the full tree-order epoch of row 2;
  5. a second tree-order epoch with a disk cache as large as the shards (remounted, so only the
     chunk files are warm, in the page cache): requests, and files/s against the warm
     local-shard mount (also remounted before each epoch);
  6. a memory cache of a quarter of the shards: hit rate and amplification of one tree-order
     and one shuffled epoch (reported, no target).
Every read is checked against the loose tree's walk of the same run (file count, bytes, sum of
XXH3-64), as in the main bench. `python3 bench_remote.py http-get ...` is the loose-over-HTTP
client the bench runs as its own process (see http_get_main).
"""

import http.client
import json
import os
import shutil
import statistics
import sys
import time
import urllib.parse

from bench_args import host_facts, use_test_rig, write_report_json
from bench_common import BenchError, ContentMismatch, Xxh3, fmt_bytes, log, parse_size
from bench_dataset import dataset_key, generate_dataset, tree_file_list
from bench_images import file_tail, find_shards, pack_or_reuse
from bench_mounts import Mount, run_tool
from bench_report import fmt_num, ratio, target_row
from bench_workloads import SystemRun, Workloads, can_drop_caches, drop_caches

use_test_rig()  # remote_servers: the integration tests' nginx and proxy, by path.
import remote_servers  # noqa: E402

WALKS = [("find", "find -type f"), ("ls", "ls -lR"), ("lstat", "lstat of every file")]
# Cache bytes beyond the shards' own: chunks are aligned, so the last one of a shard may be
# charged in full.
CACHE_SLACK_CHUNKS = 2


# -- the loose-over-HTTP client ----------------------------------------------------------------

def http_get_main(argv):
    """http-get BASE_URL FILELIST [--procs N]: GET BASE_URL/<path> for every path, N processes
    (process i takes entries i, i+N, ...), one keep-alive connection each, opened before the
    clock starts. Prints one JSON object like bench_reader read's (checksum: sum of XXH3-64 of
    every body, mod 2^64)."""
    base, list_path = argv[0], argv[1]
    procs = int(argv[argv.index("--procs") + 1]) if "--procs" in argv else 1
    with open(list_path) as f:
        paths = [line.rstrip("\n") for line in f if line.strip()]
    u = urllib.parse.urlsplit(base)
    prefix = u.path.rstrip("/")
    ready_r, ready_w = os.pipe()
    gate_r, gate_w = os.pipe()
    results = []
    kids = []
    for i in range(procs):
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.close(gate_w)
            os.close(res_r)
            code = 1
            try:
                out = http_get_worker(u.hostname, u.port, prefix, paths[i::procs], Xxh3(),
                                      ready_w, gate_r)
                os.write(res_w, json.dumps(out).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(res_w)
        kids.append(pid)
        results.append(res_r)
    os.close(ready_w)
    os.close(gate_r)
    got = 0
    while got < procs:
        b = os.read(ready_r, procs)
        if not b:
            break
        got += len(b)
    start = time.perf_counter()
    os.close(gate_w)  # Every worker's read of the gate returns: go.
    tally = {"files": 0, "bytes": 0, "checksum": 0, "errors": 0, "first_error": ""}
    for fd in results:
        data = b""
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        os.close(fd)
        if not data:
            tally["errors"] += 1
            tally["first_error"] = tally["first_error"] or "a worker died without a result"
            continue
        r = json.loads(data)
        for k in ("files", "bytes", "checksum", "errors"):
            tally[k] += r[k]
        tally["first_error"] = tally["first_error"] or r["first_error"]
    seconds = time.perf_counter() - start
    for pid in kids:
        os.waitpid(pid, 0)
    out = {"mode": "http-get", "procs": procs, "files": tally["files"], "dirs": 0,
           "bytes": tally["bytes"], "seconds": seconds,
           "checksum": f"{tally['checksum'] % (1 << 64):016x}", "errors": tally["errors"],
           "first_error": tally["first_error"]}
    print(json.dumps(out), flush=True)
    return 1 if tally["errors"] else 0


def http_get_worker(host, port, prefix, paths, xxh, ready_w, gate_r):
    out = {"files": 0, "bytes": 0, "checksum": 0, "errors": 0, "first_error": ""}
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.connect()
    except OSError as e:
        out["errors"], out["first_error"] = len(paths), f"connect to {host}:{port}: {e}"
        paths = []
    # Ready even after a failure: the parent and the other workers wait for every worker.
    os.write(ready_w, b"r")
    os.read(gate_r, 1)
    for p in paths:
        target = prefix + "/" + urllib.parse.quote(p)
        try:
            conn.request("GET", target)
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as e:
            out["errors"] += 1
            out["first_error"] = out["first_error"] or f"GET {target}: {e}"
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=60)
            continue
        if resp.status != 200:
            out["errors"] += 1
            out["first_error"] = out["first_error"] or f"GET {target}: HTTP {resp.status}"
            continue
        out["files"] += 1
        out["bytes"] += len(body)
        out["checksum"] += xxh(body)
    out["checksum"] %= 1 << 64
    conn.close()
    return out


# -- the run ---------------------------------------------------------------------------------

class RemoteRun(Workloads):
    """Mounts (local shards, HTTP shards), their reads checked as the main bench's, and the
    daemon's stats around them."""

    def __init__(self, a, ddir, scratch, meta, files, can_cold, proxy):
        super().__init__(a, ddir, scratch, meta, files, can_cold)
        self.proxy = proxy
        self.mnt_root = os.path.join(scratch, "mnt")
        os.makedirs(self.mnt_root)
        self.nmounts = 0
        self.stats_text = {}

    def mount(self, index, opts):
        self.nmounts += 1
        name = f"m{self.nmounts:03d}"
        mp = os.path.join(self.mnt_root, name)
        os.makedirs(mp)
        argv = [self.a.shardfs, "mount", "-f"] + (["-o", opts] if opts else []) + [index, mp]
        m = Mount("shardfs", mp, argv, "fuse3", os.path.join(self.scratch, f"{name}.log"))
        try:
            m.mount(min(self.a.phase_timeout, 300))
        except TimeoutError as e:
            raise BenchError(f"mount {' '.join(argv)}: {e}")
        return m

    def stats(self, m, text=False):
        argv = [self.a.shardfs, "stats"] + ([] if text else ["--json"]) + [m.mountpoint]
        rc, so, se, _ = run_tool(argv, timeout=60)
        if rc != 0:
            raise BenchError(f"shardfs stats exited {rc}: {se.decode(errors='replace').strip()}")
        return so.decode(errors="replace") if text else json.loads(so)

    def epoch(self, s, phase, temp, index, opts, cold, after=None):
        """One timed, checked read (phase) on a fresh mount of index; after(m) runs before the
        unmount. cold: page cache dropped before the mount."""
        if cold and self.can_cold:
            drop_caches()
        m = self.mount(index, opts)
        try:
            self.proxy.reset_counters()
            self.measure(s, phase, temp, m.mountpoint, self.a.phase_timeout)
            if after:
                after(m)
        finally:
            m.unmount()

    def http_get(self, s, temp, base, cold):
        """Loose files over HTTP, shuffled, --procs keep-alive clients, recorded as
        read_rand4 of s."""
        f = s.fig("read_rand4", temp)
        if cold and self.can_cold:
            drop_caches()
        self.proxy.reset_counters()
        argv = [sys.executable, os.path.abspath(__file__), "http-get", base, self.lists["rand"],
                "--procs", str(self.a.procs)]
        rc, so, se, _ = run_tool(argv, timeout=self.a.phase_timeout)
        if rc is None:
            f.status, f.note = "timeout", f"longer than {self.a.phase_timeout:.0f} s"
            return
        try:
            r = json.loads(so.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise BenchError(f"http-get exited {rc} without a result: "
                             f"{se.decode(errors='replace').strip()[-600:]}")
        bad = self.check("read_rand4", r)
        if bad:
            f.status, f.note = "failed", bad
            raise ContentMismatch(f"loose over HTTP: {bad}")
        f.samples.append(r["seconds"])
        f.files, f.bytes = r["files"], r["bytes"]
        s.info.setdefault("proxy_requests", []).append(self.proxy.requests)


def remote_pack(a, ddir, tree, files, scratch):
    """The dataset's shards and local index, reused with --reuse-pack as in the main bench."""
    return pack_or_reuse(a, ddir, tree, files, scratch)


def hit_rate(st):
    n = st.get("cache_hits", 0) + st.get("cache_misses", 0)
    return st["cache_hits"] / n if n else None


class RemoteSetup:
    """What the run reads, set up once: the dataset and its shards (packed or reused), the
    cache sizes and mount options, and the root nginx serves (the shards and the loose tree, as
    links)."""

    def __init__(self, a, scratch):
        key, _ = dataset_key(a)
        self.ddir = os.path.join(a.workdir, f"dataset-{key}")
        self.meta = generate_dataset(a, self.ddir)
        self.tree = os.path.join(self.ddir, "tree")
        self.files = tree_file_list(self.tree)
        self.pdir, self.pack = remote_pack(a, self.ddir, self.tree, self.files, scratch)
        self.shards = find_shards(self.pdir)
        self.shard_bytes = sum(os.path.getsize(p) for p in self.shards)
        chunk = parse_size(a.chunk_size)
        self.full_cache = self.shard_bytes + CACHE_SLACK_CHUNKS * chunk * len(self.shards)
        self.quarter_cache = max(chunk, self.shard_bytes // 4)
        self.base_opts = f"chunk_size={a.chunk_size}" + \
            (f",fetch_threads={a.fetch_threads}" if a.fetch_threads else "")
        self.full_opts = f"{self.base_opts},cache_size={self.full_cache}"
        self.served = os.path.join(scratch, "served")
        os.makedirs(self.served)
        os.symlink(self.pdir, os.path.join(self.served, "shards"))
        os.symlink(self.tree, os.path.join(self.served, "tree"))
        self.shard_list = os.path.join(scratch, "shards.list")
        with open(self.shard_list, "w") as f:
            f.write("".join(os.path.relpath(p, self.pdir) + "\n" for p in self.shards))


def loose_reference(run, su):
    """The loose tree's lstat and read results: the reference every mount is checked against."""
    log("loose tree: reference lstat and read")
    for phase, ref in (("lstat", "lstat"), ("read_tree1", "read")):
        r = run.run_phase(phase, su.tree, run.a.phase_timeout)
        if r.get("errors"):
            raise BenchError(f"loose tree {phase}: {r.get('first_error')}")
        run.reference[ref] = {k: r[k] for k in ("files", "dirs", "bytes", "checksum")}
    if run.reference["read"]["files"] != su.meta["files"]:
        raise BenchError(f"the cached tree {su.tree} does not match dataset.json; delete the "
                         "work dir and rerun")


def build_http_index(a, scratch, su, proxy):
    """`shardfs index build --url-prefix` of the shards through the proxy; returns (index
    path, its row: seconds, requests, bytes)."""
    log(f"index build over HTTP: {len(su.shards)} shards through the proxy")
    http_index = os.path.join(scratch, "http.idx")
    proxy.reset_counters()
    rc, _, _, secs = run_tool([a.shardfs, "index", "build", "--quiet", "--out", http_index,
                               "--from-list", su.shard_list, "--url-prefix",
                               proxy.url + "/shards"],
                              timeout=a.phase_timeout,
                              log_path=os.path.join(scratch, "index-build.log"))
    if rc != 0:
        raise BenchError(f"shardfs index build over HTTP exited {rc}: "
                         f"{file_tail(os.path.join(scratch, 'index-build.log'))}")
    return http_index, {"seconds": secs, "requests": proxy.requests, "bytes": proxy.bytes_sent}


def metadata_walks(run, su, proxy, http_index):
    """Step 1: find, ls -lR and an lstat walk of the HTTP mount, each checked, with the
    requests each sent (there should be none)."""
    a = run.a
    log("1. metadata walks through the HTTP mount")
    walks = {}
    m = run.mount(http_index, su.full_opts)
    try:
        for name, title in WALKS:
            before_proxy, before_stats = proxy.requests, run.stats(m)["requests"]
            if name == "lstat":
                r = run.reader("lstat", m.mountpoint, a.phase_timeout, "tree")
                bad = run.check("lstat", r)
                if bad:
                    raise ContentMismatch(f"lstat walk of the HTTP mount: {bad}")
                seen = r["files"]
            else:
                argv = ["find", m.mountpoint, "-type", "f"] if name == "find" else \
                    ["ls", "-lR", m.mountpoint]
                rc, so, se, secs = run_tool(argv, timeout=a.phase_timeout)
                if rc != 0:
                    raise BenchError(f"{title} of the HTTP mount exited {rc}: "
                                     f"{se.decode(errors='replace')[-300:]}")
                seen = len(so.splitlines()) if name == "find" else None
                if name == "find" and seen != su.meta["files"]:
                    raise ContentMismatch(f"find -type f listed {seen} files, the tree "
                                          f"has {su.meta['files']}")
            walks[name] = {"title": title, "files": seen,
                           "proxy_requests": proxy.requests - before_proxy,
                           "stats_requests": run.stats(m)["requests"] - before_stats}
    finally:
        m.unmount()
    return walks


def note_epoch(run, proxy, m, where, text_key):
    """Appends the mount's stats and the proxy's counters to `where`; keeps the text stats."""
    where.append({"stats": run.stats(m), "proxy_requests": proxy.requests,
                  "proxy_bytes": proxy.bytes_sent})
    run.stats_text[text_key] = run.stats(m, text=True)


def http_epochs(run, su, proxy, http_index, systems, rows):
    """The local-shard references (warm-up, warm and cold epochs on fresh mounts), then steps
    2-6 over HTTP: cold tree-order epochs (memory cache as large as the shards), cold shuffled
    epochs against loose files over HTTP, epochs from a full disk cache, and a memory cache of
    a quarter of the shards."""
    a, scratch = run.a, run.scratch
    local, http, loose = systems["local"], systems["http"], systems["loose_http"]
    log("local shards: warm and cold tree-order epochs")
    index = su.pack["index"]
    run.epoch(SystemRun("warmup", ""), "read_tree1", "warm", index, "", cold=False)
    for rep in range(a.reps):
        run.epoch(local, "read_tree1", "warm", index, "", cold=False)
    for rep in range(a.reps):
        run.epoch(local, "read_tree1", "cold", index, "", cold=True)

    log("2. cold tree-order epochs over HTTP")
    epochs = []
    for rep in range(a.reps):
        run.epoch(http, "read_tree1", "cold", http_index, su.full_opts, cold=True,
                  after=lambda m: note_epoch(run, proxy, m, epochs, "cold"))
    rows["cold_epochs"] = epochs

    log(f"3. shuffled epochs, {a.procs} readers, cold: HTTP mount, then loose files over "
        "HTTP")
    for rep in range(a.reps):
        run.epoch(http, "read_rand4", "cold", http_index, su.full_opts, cold=True)
    for rep in range(a.reps):
        run.http_get(loose, "cold", proxy.url + "/tree", cold=True)

    log("5. tree-order epochs from a full disk cache")
    cache_dir = os.path.join(scratch, "cache")
    disk_opts = f"{su.full_opts},cache_dir={cache_dir}"
    fill, warm = [], []
    run.epoch(SystemRun("fill", ""), "read_tree1", "cold", http_index, disk_opts, cold=True,
              after=lambda m: note_epoch(run, proxy, m, fill, "fill"))
    for rep in range(a.reps):
        run.epoch(http, "read_tree1", "warm", http_index, disk_opts, cold=False,
                  after=lambda m: note_epoch(run, proxy, m, warm, "warm"))
    rows["disk_fill"], rows["warm_epochs"] = fill, warm
    shutil.rmtree(cache_dir, ignore_errors=True)

    log("6. a cache of a quarter of the shards: tree order, shuffled")
    quarter = {}
    for phase in ("read_tree1", "read_rand4"):
        got = []
        run.epoch(SystemRun("quarter", ""), phase, "cold", http_index,
                  f"{su.base_opts},cache_size={su.quarter_cache}", cold=True,
                  after=lambda m: note_epoch(run, proxy, m, got, "quarter"))
        quarter[phase] = got[0]
    rows["quarter"] = quarter


def remote_report(a, su, run, rows, systems, environment):
    """The JSON report (schema shardfs-bench-remote/1), targets and quarter-cache rows
    included."""
    report = {
        "schema": "shardfs-bench-remote/1",
        "params": {"files": a.files, "classes": a.classes, "seed": a.seed,
                   "median_kib": a.median_kib, "sigma": a.sigma, "reps": a.reps,
                   "procs": a.procs, "shard_size": a.shard_size, "chunk_size": a.chunk_size,
                   "fetch_threads": a.fetch_threads, "latency_s": a.latency,
                   "cache_full_bytes": su.full_cache, "cache_quarter_bytes": su.quarter_cache,
                   "workdir": a.workdir},
        "environment": environment,
        "dataset": {k: su.meta[k] for k in ("samples", "sidecars", "files", "dirs", "bytes")}
        | {"cached": su.meta.get("cached", False), "path": su.tree, "shards": len(su.shards),
           "shard_bytes": su.shard_bytes},
        "reference": run.reference,
        "rows": rows,
        "systems": {n: s.to_json() for n, s in systems.items()},
        "stats_text": run.stats_text,
    }
    report["targets"] = remote_targets(report, systems)
    report["quarter_cache"] = quarter_rows(report)
    return report


def run_remote(a, scratch):
    """The remote run: nginx on loopback behind a proxy adding --latency, the steps in order,
    then the report."""
    loadavg_start = os.getloadavg()
    can_cold, why = can_drop_caches()
    su = RemoteSetup(a, scratch)
    notes = []
    if not can_cold:
        notes.append(f"page cache not dropped before cold runs ({why}): each cold run is only "
                     "a fresh mount")
    rows = {}
    systems = {"local": SystemRun("local", "local shards"),
               "http": SystemRun("http", "HTTP shards"),
               "loose_http": SystemRun("loose_http", "loose files, GET per file")}
    with remote_servers.Nginx(su.served) as web, remote_servers.FaultProxy(web.url) as proxy:
        proxy.latency(a.latency)
        run = RemoteRun(a, su.ddir, scratch, su.meta, su.files, can_cold, proxy)
        loose_reference(run, su)
        http_index, rows["index_build"] = build_http_index(a, scratch, su, proxy)
        rows["walks"] = metadata_walks(run, su, proxy, http_index)
        http_epochs(run, su, proxy, http_index, systems, rows)
    environment = host_facts(a) | {"cold_runs": can_cold, "cold_skipped_because": why,
                                   "loadavg_start": loadavg_start,
                                   "loadavg_end": os.getloadavg(), "notes": notes}
    report = remote_report(a, su, run, rows, systems, environment)
    write_report_json(a.json_out, report)
    print_remote_report(report, systems)
    return 0


# -- targets and the table -------------------------------------------------------------------

def remote_targets(report, systems):
    rows, d = report["rows"], report["dataset"]
    targets = []

    def add(name, value, op, goal, unit, note=""):
        targets.append(target_row(name, value, op, goal, unit, note))

    for name, w in rows["walks"].items():
        add(f"{w['title']} through the HTTP mount: requests",
            max(w["proxy_requests"], w["stats_requests"]), "<=", 0, "requests",
            f"proxy {w['proxy_requests']}, stats {w['stats_requests']}")
    local, http, loose = systems["local"], systems["http"], systems["loose_http"]
    add("cold tree-order epoch: HTTP vs local shards, files/s",
        ratio(http, local, "read_tree1_cold"), ">=", 0.5, "x")
    add(f"cold shuffled, {report['params']['procs']} readers: HTTP mount vs loose GET per file",
        ratio(http, loose, "read_rand4_cold"), ">=", 10.0, "x")
    amp = [e["stats"]["bytes_fetched"] / d["shard_bytes"] for e in rows["cold_epochs"]]
    add("full tree-order epoch: bytes fetched / shard bytes", max(amp) if amp else None, "<=",
        1.1, "x", "worst of the cold epochs")
    warm = rows["warm_epochs"]
    reqs = [max(e["proxy_requests"], e["stats"]["requests"]) for e in warm]
    add("second epoch, disk cache = dataset: requests", max(reqs) if reqs else None, "<=", 0,
        "requests", "proxy %s, stats %s" % ([e["proxy_requests"] for e in warm],
                                            [e["stats"]["requests"] for e in warm]))
    add("second epoch, disk cache = dataset: vs warm local shards, files/s",
        ratio(http, local, "read_tree1_warm"), ">=", 0.8, "x")
    return targets


def quarter_rows(report):
    out = {}
    for phase, e in report["rows"]["quarter"].items():
        st = e["stats"]
        out[phase] = {"hit_rate": hit_rate(st),
                      "amplification": st["bytes_fetched"] / st["bytes_delivered"]
                      if st.get("bytes_delivered") else None,
                      "fetched_over_shard_bytes": st["bytes_fetched"] /
                      report["dataset"]["shard_bytes"],
                      "requests": st["requests"], "cache_evictions": st.get("cache_evictions")}
    return out


def print_remote_report(report, systems, out=sys.stdout):
    p, d, env, rows = report["params"], report["dataset"], report["environment"], report["rows"]
    w = out.write
    load = lambda la: "/".join(f"{x:.2f}" for x in la)  # noqa: E731
    w("\nshardfs bench --remote\n")
    w(f"  dataset: {d['files']:,} files, {fmt_bytes(d['bytes'])}, {p['classes']} classes, "
      f"median {p['median_kib']} KiB, seed {p['seed']}{' (cached)' if d.get('cached') else ''}; "
      f"{d['shards']} shards, {fmt_bytes(d['shard_bytes'])}\n")
    w(f"  server:  nginx on loopback behind a proxy adding {p['latency_s'] * 1000:g} ms per "
      f"request; chunk_size {p['chunk_size']}; caches {fmt_bytes(p['cache_full_bytes'])} "
      f"(full), {fmt_bytes(p['cache_quarter_bytes'])} (quarter)\n")
    ib = rows["index_build"]
    w(f"  index build over HTTP: {ib['seconds']:.2f} s, {ib['requests']} requests, "
      f"{fmt_bytes(ib['bytes'])}\n")
    w(f"  machine: {env['cpus']} CPUs, kernel {env['kernel']}, "
      f"{'root' if env['root'] else 'NOT root'}; load {load(env['loadavg_start'])} at the "
      f"start, {load(env['loadavg_end'])} at the end; reps {p['reps']}, readers {p['procs']}\n")
    for n in env["notes"]:
        w(f"  note: {n}\n")

    w(f"\n  {'metadata walk (HTTP mount)':<36} {'entries':>10} {'proxy req':>10} "
      f"{'stats req':>10}\n")
    for name, wk in rows["walks"].items():
        n = "-" if wk["files"] is None else f"{wk['files']:,}"
        w(f"  {wk['title']:<36} {n:>10} {wk['proxy_requests']:>10} {wk['stats_requests']:>10}\n")

    w(f"\n  {'epoch':<40} {'system':<26} {'files/s':>10} {'min..max':>21} {'MB/s':>8}\n")
    for key, title in (("read_tree1_cold", "tree order, 1 reader, cold"),
                       ("read_rand4_cold", f"shuffled, {p['procs']} readers, cold"),
                       ("read_tree1_warm", "tree order, 1 reader, warm (remounted)")):
        first = True
        for s in systems.values():
            f = s.figures.get(key)
            if f is None:
                continue
            v = f.values()
            if f.status == "ok" and v:
                med = fmt_num(statistics.median(v), "files/s")
                rng = f"{fmt_num(min(v), 'files/s')}..{fmt_num(max(v), 'files/s')}"
            else:
                med, rng = f.status, f.note[:21]
            label = s.label + (" (disk cache)" if s.name == "http" and
                               key == "read_tree1_warm" else "")
            w(f"  {title if first else '':<40} {label:<26} {med:>10} {rng:>21} "
              f"{fmt_num(f.mb_per_s(), 'MB/s'):>8}\n")
            first = False

    w(f"\n  {'cache a quarter of the shards':<36} {'hit rate':>9} {'fetched/delivered':>18} "
      f"{'fetched/shards':>15} {'requests':>9}\n")
    for phase, q in report["quarter_cache"].items():
        title = "tree order, 1 reader" if phase == "read_tree1" else \
            f"shuffled, {p['procs']} readers"
        hr = "-" if q["hit_rate"] is None else f"{q['hit_rate'] * 100:.1f}%"
        am = "-" if q["amplification"] is None else f"{q['amplification']:.2f}x"
        w(f"  {title:<36} {hr:>9} {am:>18} {q['fetched_over_shard_bytes']:>14.2f}x "
          f"{q['requests']:>9}\n")

    w("\ntargets (remote shards)\n")
    for t in report["targets"]:
        if t["value"] is None:
            v = "-"
        elif t["unit"] == "x":
            v = f"{t['value']:.2f}x"
        else:
            v = f"{t['value']:g} {t['unit']}"
        goal = f"{t['op']} {t['goal']:g}{'x' if t['unit'] == 'x' else ''}"
        w(f"  {t['target']:<66} {v:>14}  {goal:<7} {t['status']}\n")
    for label, k in (("cold tree-order epoch (row 2)", "cold"),
                     ("second epoch from the disk cache (row 5)", "warm")):
        text = report["stats_text"].get(k)
        if text:
            w(f"\n`shardfs stats` after the {label}:\n")
            w("".join(f"  {line}\n" for line in text.rstrip("\n").splitlines()))
    w("\n")
    out.flush()


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "http-get":
        sys.exit(http_get_main(sys.argv[2:]))
    print("usage: bench_remote.py http-get BASE_URL FILELIST [--procs N] (the bench's "
          "loose-over-HTTP client; run the bench with shardfs_bench.py --remote)",
          file=sys.stderr)
    sys.exit(2)
