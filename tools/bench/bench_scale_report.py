"""--scale's table: one row per metric, one column per size, the growth factor of every step,
and the flags of a per-entry cost that grows faster than linearly."""

import math
import statistics
import sys

# (key, title, unit, kind, getter). kind says what "linear" means for the row:
#   total:     grows with N at best linearly: flagged when value/N rises more than the limit;
#   rate:      per-entry cost 1/value: flagged when the rate falls more than the limit;
#   per_entry: already a per-entry (or per-call) cost: flagged when it rises more than the limit;
#   flat:      must not grow at all: flagged when it rises more than --flat-ratio;
#   info:      never flagged.
def _med(xs):
    return statistics.median(xs) if xs else None


def _slab(r, name):
    s = r.get("slab")
    if not s:
        return None
    per = r.get("walked", r["entries"])
    return (s["total_bytes_delta"] if name == "total" else s[name]["bytes_delta"]) / per


def _mem_build(label, field):
    def get(r):
        b = r["index_build_memory"][label]
        return {"s": b["seconds"], "rate": r["entries"] / b["seconds"],
                "cpu_rate": r["entries"] / b["cpu_seconds"],
                "rss": b["peak_rss_bytes"] / 1e6}[field]
    return get


def _part_ratio(r):
    return r["partitions"]["index_disk_bytes"] / r["index_build"]["index_disk_bytes"]


ROWS = [
    ("index_build_s", "index build", "s", "total", lambda r: r["index_build"]["seconds"]),
    ("index_build_cpu_rate", "index build", "entries/CPU-s", "rate",
     lambda r: r["entries"] / r["index_build"]["cpu_seconds"]),
    ("index_build_rss_mb", "index build, peak RSS", "MB", "total",
     lambda r: r["index_build"]["peak_rss_bytes"] / 1e6),
    ("index_build_rate", "index build", "entries/s", "rate",
     lambda r: r["entries"] / r["index_build"]["seconds"]),
    ("index_headers_s", "index build, headers, shards cached", "s", "total",
     lambda r: r["index_build_headers"]["seconds"]),
    ("index_headers_rate", "index build, headers, shards cached", "entries/s", "rate",
     lambda r: r["entries"] / r["index_build_headers"]["seconds"]),
    ("inmem_s", "build in memory (--memory 1T)", "s", "total", _mem_build("inmem", "s")),
    ("inmem_cpu_rate", "build in memory", "entries/CPU-s", "rate", _mem_build("inmem", "cpu_rate")),
    ("inmem_rss_mb", "build in memory, peak RSS", "MB", "total", _mem_build("inmem", "rss")),
    ("m256_s", "build --memory 256M", "s", "total", _mem_build("256M", "s")),
    ("m256_cpu_rate", "build --memory 256M", "entries/CPU-s", "rate",
     _mem_build("256M", "cpu_rate")),
    ("m256_rss_mb", "build --memory 256M, peak RSS", "MB", "total", _mem_build("256M", "rss")),
    ("index_bytes_per_entry", "index on disk (du) per entry", "B", "per_entry",
     lambda r: r["index_build"]["index_disk_bytes"] / r["entries"]),
    ("mount_cold_ms", "mount, cold (median)", "ms", "flat",
     lambda r: _med(r["mount"]["cold_seconds"]) and _med(r["mount"]["cold_seconds"]) * 1e3),
    ("mount_warm_ms", "mount, warm (median)", "ms", "flat",
     lambda r: _med(r["mount"]["warm_seconds"]) * 1e3),
    ("lookup_p50_us", "lookup, cold, prefill_dirs=0: p50", "us", "per_entry",
     lambda r: r["lookup"]["latency_us"]["p50"]),
    ("lookup_p99_us", "lookup, cold, prefill_dirs=0: p99", "us", "per_entry",
     lambda r: r["lookup"]["latency_us"]["p99"]),
    ("lookup_default_p50_us", "lookup, cold, default mount: p50", "us", "per_entry",
     lambda r: r["lookup_default"]["latency_us"]["p50"]),
    ("lookup_default_p99_us", "lookup, cold, default mount: p99", "us", "per_entry",
     lambda r: r["lookup_default"]["latency_us"]["p99"]),
    ("lookup_warm_p50_us", "lookup, index cached, prefill=0: p50", "us", "per_entry",
     lambda r: r["lookup_warm"]["latency_us"]["p50"]),
    ("lookup_warm_p99_us", "lookup, index cached, prefill=0: p99", "us", "per_entry",
     lambda r: r["lookup_warm"]["latency_us"]["p99"]),
    ("parts_s", "partitions: build wall (xargs)", "s", "total",
     lambda r: r["partitions"]["seconds"]),
    ("parts_bytes_ratio", "partitions: sum of index bytes / one", "", "info", _part_ratio),
    ("manifest_mount_warm_ms", "manifest: mount, warm (median)", "ms", "flat",
     lambda r: _med(r["mount_manifest"]["warm_seconds"]) * 1e3),
    ("manifest_mount_cold_ms", "manifest: mount, cold (median)", "ms", "flat",
     lambda r: _med(r["mount_manifest"]["cold_seconds"]) * 1e3),
    ("manifest_lookup_p50_us", "manifest: lookup, cold, p50", "us", "per_entry",
     lambda r: r["lookup_manifest"]["latency_us"]["p50"]),
    ("manifest_lookup_p99_us", "manifest: lookup, cold, p99", "us", "per_entry",
     lambda r: r["lookup_manifest"]["latency_us"]["p99"]),
    ("walked", "files walked (rank 0's share with --walk-world)", "", "info",
     lambda r: r["walk"]["files"]),
    ("walk_world", "  of world", "", "info", lambda r: r["walk"].get("world", 1)),
    ("walk_s", "lstat walk of every file", "s", "total", lambda r: r["walk"]["seconds"]),
    ("walk_rate", "lstat walk of every file", "files/s", "rate",
     lambda r: r["walk"]["files_per_s"]),
    ("read_rate", "shuffled read, random files", "files/s", "rate",
     lambda r: r["read"]["files_per_s"]),
    ("rss_mb", "daemon VmRSS after the walk", "MB", "flat",
     lambda r: r["daemon"]["rss_bytes"] / 1e6),
    ("hwm_mb", "daemon VmHWM after the walk", "MB", "flat",
     lambda r: r["daemon"]["hwm_bytes"] / 1e6),
    ("slab_mb", "slab taken by the walk", "MB", "total",
     lambda r: r["slab"] and r["slab"]["total_bytes_delta"] / 1e6),
    ("slab_per_entry", "slab per entry (all)", "B", "per_entry", lambda r: _slab(r, "total")),
    # About 1 when the kernel still held every inode the walk made; less when it reclaimed some
    # (memory pressure, or a drop_caches elsewhere on the machine), and the slab rows read low.
    ("slab_inodes_held", "  fuse_inodes added / entries", "", "info",
     lambda r: r["slab"] and (r["slab"]["fuse_inode"]["objects_after"] -
                              r["slab"]["fuse_inode"]["objects_before"]) /
     r.get("walked", r["entries"])),
    ("slab_peak_inodes_held", "  the same, at the peak of the walk", "", "info",
     lambda r: r["slab"] and r["slab"].get("peak") and
     r["slab"]["peak"]["fuse_inode_added"] / r.get("walked", r["entries"])),
    # Robust to reclaim: bytes per inode the kernel held at the peak sample.
    ("slab_per_inode_peak", "slab per fuse_inode held (peak)", "B", "per_entry",
     lambda r: r["slab"] and r["slab"].get("peak") and r["slab"]["peak"]["bytes_delta"] /
     r["slab"]["peak"]["fuse_inode_added"]),
    ("slab_fuse_inode", "  fuse_inode per entry", "B", "per_entry",
     lambda r: _slab(r, "fuse_inode")),
    ("slab_dentry", "  dentry per entry", "B", "per_entry", lambda r: _slab(r, "dentry")),
    ("slab_inode_cache", "  inode_cache per entry", "B", "per_entry",
     lambda r: _slab(r, "inode_cache")),
]


def build_rows(sizes, results, flag_ratio, flat_ratio):
    """One dict per row: values per size, growth of the value per step, and flags."""
    rows, flags = [], []
    for key, title, unit, kind, get in ROWS:
        values = []
        for n in sizes:
            try:
                v = get(results[n])
            except (KeyError, TypeError, ZeroDivisionError):
                v = None
            values.append(v)
        growth, row_flags = [], []
        for i in range(1, len(sizes)):
            v0, v1 = values[i - 1], values[i]
            # Slab deltas can be zero or below (other activity freed more): no factor then.
            g = v1 / v0 if v0 is not None and v1 is not None and v0 > 0 and v1 > 0 else None
            growth.append(g)
            if g is None or kind == "info":
                continue
            step_n = sizes[i] / sizes[i - 1]
            per_entry = {"total": g / step_n, "rate": 1 / g if g else math.inf,
                         "per_entry": g, "flat": g}[kind]
            limit = flat_ratio if kind == "flat" else flag_ratio
            if per_entry > limit:
                what = "grows" if kind == "flat" else "faster than linear"
                row_flags.append(f"{what} from {sizes[i - 1]:,} to {sizes[i]:,} "
                                 f"(x{per_entry:.2f} per entry)" if kind != "flat" else
                                 f"{what} from {sizes[i - 1]:,} to {sizes[i]:,} (x{g:.2f})")
        for f in row_flags:
            flags.append(f"{title} [{unit}]: {f}")
        rows.append({"metric": key, "title": title, "unit": unit, "kind": kind,
                     "values": values, "growth": growth, "flags": row_flags})
    return rows, flags


def fmt_value(v):
    if v is None:
        return "n/a"
    if abs(v) >= 100_000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_size(n):
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= div and n % div == 0:
            return f"{n // div}{suffix}"
    return str(n)


def print_scale_report(report, out=sys.stdout):
    sizes = report["sizes"]
    w = out.write
    env = report["environment"]
    w(f"\nshardfs scale: {', '.join(f'{n:,}' for n in sizes)} files; "
      f"{report['params']['classes']} class directories; cold = page cache, dentries and "
      f"inodes dropped: {'yes' if env['cold_runs'] else 'NO (not root)'}; "
      f"{env['cpus']} CPUs, load {env['loadavg_start'][0]:.1f} at the start\n")
    heads = [fmt_size(n) for n in sizes]
    steps = [f"{fmt_size(sizes[i])}/{fmt_size(sizes[i - 1])}" for i in range(1, len(sizes))]
    w(f"{'metric':<38} {'unit':<9}" + "".join(f"{h:>11}" for h in heads) +
      "".join(f"{s:>10}" for s in steps) + "  flag\n")
    for row in report["rows"]:
        w(f"{row['title']:<38} {row['unit']:<9}" +
          "".join(f"{fmt_value(v):>11}" for v in row["values"]) +
          "".join(f"{'x' + format(g, '.2f') if g is not None else 'n/a':>10}"
                  for g in row["growth"]) +
          ("  " + ("GROWS" if row["kind"] == "flat" else "SUPERLINEAR") if row["flags"] else "")
          + "\n")
    w(f"\nlookups: {report['params']['lookups']:,} random files per size, one cold lstat each "
      f"(class directories looked up first, untimed); shuffled read: "
      f"{report['params']['reads']:,} random files, {report['params']['procs']} readers, cold; "
      f"mounts: {report['params']['mount_reps_cold']} cold + {report['params']['mount_reps_warm']} "
      f"warm.\nflagged when a per-entry cost rises more than x{report['params']['flag_ratio']} per "
      f"step, or mount time / RSS more than x{report['params']['flat_ratio']}\n")
    if report["flags"]:
        w("FLAGS:\n" + "".join(f"  {f}\n" for f in report["flags"]))
    else:
        w("no flags: nothing grew faster than linearly, mount time and RSS stayed flat\n")
