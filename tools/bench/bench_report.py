"""The report: the table, ratios against the loose tree and the targets."""

import statistics
import sys

from bench_common import MB, PHASE_TITLES, PHASES, fmt_bytes


def fmt_num(v, unit):
    if v is None:
        return "-"
    if unit == "files/s":
        return f"{v:,.0f}"
    if unit == "ms" and v < 10:
        return f"{v:.2f}"
    return f"{v:,.1f}"


def ratio(s, loose, key):
    """files/s (reads) or time (walks) of s over the loose tree's, same figure."""
    if loose is None or key not in s.figures or key not in loose.figures:
        return None
    a, b = s.figures[key].median(), loose.figures[key].median()
    if a is None or not b:
        return None
    return a / b


def target_row(name, value, op, goal, unit, note=""):
    """One row of a target table: met, not met, or n/a without a value."""
    if value is None:
        status = "n/a"
    else:
        status = "met" if (value >= goal if op == ">=" else value <= goal) else "not met"
    return {"target": name, "value": value, "op": op, "goal": goal, "unit": unit,
            "status": status, "note": note}


def compute_targets(systems):
    """The main run's targets: speed ratios to the loose tree in this run (a walk's ratio is the
    loose tree's time over shardfs's, so above 1 is faster), and the cold tree-order read
    against the mount's own warm rate."""
    sh, lo = systems.get("shardfs"), systems.get("loose")
    ok = sh is not None and sh.status == "ok"
    targets = []

    def add(name, value, op, goal, unit, note=""):
        targets.append(target_row(name, value, op, goal, unit, note))

    def r(key):
        return ratio(sh, lo, key) if ok else None

    def speed(key):
        t = r(key)
        return 1.0 / t if t else None

    def median(key):
        return sh.figures[key].median() if ok and key in sh.figures else None

    add("warm read, tree order, 1 reader vs loose", r("read_tree1_warm"), ">=", 0.9, "x")
    add("warm read, shuffled, 4 readers vs loose", r("read_rand4_warm"), ">=", 0.9, "x")
    add("cold read, shuffled, 4 readers vs loose", r("read_rand4_cold"), ">=", 2.0, "x")
    cold, warm = median("read_tree1_cold"), median("read_tree1_warm")
    add("cold read, tree order, vs the mount's own warm rate",
        cold / warm if cold and warm else None, ">=", 0.7, "x")
    add("readdir walk (find -type f) speed, warm, vs loose", speed("walk_warm"), ">=", 0.8, "x")
    add("readdir walk (find -type f) speed, cold, vs loose", speed("walk_cold"), ">=", 1.0, "x")
    add("lstat walk speed, warm, vs loose", speed("lstat_warm"), ">=", 0.8, "x")
    add("lstat walk speed, cold, vs loose", speed("lstat_cold"), ">=", 1.0, "x")
    for temp in ("warm", "cold"):
        add(f"mount time ({temp} caches)", median(f"mount_{temp}"), "<=", 50.0, "ms")
    rss = sh.rss_bytes / MB if sh and sh.rss_bytes else None
    add("daemon peak RSS (VmHWM)", rss, "<=", 100.0, "MB")
    return targets


def print_header(report, w):
    """Dataset, machine, what was built (pack, squashfs, tar), skips and notes."""
    p = report["params"]
    d = report["dataset"]
    b = report["build"]
    env = report["environment"]
    w("\nshardfs bench\n")
    w(f"  dataset: {d['samples']:,} samples + {d['sidecars']:,} sidecars = {d['files']:,} files, "
      f"{fmt_bytes(d['bytes'])}, {p['classes']} classes, median {p['median_kib']} KiB, "
      f"seed {p['seed']}{' (cached)' if d.get('cached') else ''}\n")
    w(f"  machine: {env['cpus']} CPUs, kernel {env['kernel']}, "
      f"{'root' if env['root'] else 'NOT root'}; reps {p['reps']}; readers {p['procs']} "
      "for the shuffled reads\n")
    if "pack_seconds" in b:
        w(f"  pack:    {b['pack_method']}: {b['pack_seconds']:.2f} s (index build "
          f"{b['index_build_seconds']:.2f} s); {b['shards']} shards, "
          f"{fmt_bytes(b['shard_bytes'])}; index {fmt_bytes(b['index_bytes'])} "
          f"({fmt_bytes(b['index_disk_bytes'])} on disk)\n")
    if "squashfs_seconds" in b:
        w(f"  squashfs: mksquashfs -comp {b['squashfs_comp']}: {b['squashfs_seconds']:.2f} s"
          f"{' (cached)' if b.get('squashfs_cached') else ''}, {fmt_bytes(b['squashfs_bytes'])}\n")
    if "tar_bytes" in b:
        w(f"  archivemount tar: {fmt_bytes(b['tar_bytes'])}; budget "
          f"{p['archivemount_budget']:.0f} s per phase\n")
    print_kernel_image(report, w)
    for sk in env["skipped"]:
        w(f"  SKIPPED: {sk}\n")
    for n in env.get("notes", []):
        w(f"  note: {n}\n")


def print_kernel_image(report, w):
    """shardfs-kernel's image: size, build time, page-cache residency."""
    ki = report["systems"].get("shardfs-kernel", {}).get("info", {})
    if "image_bytes" in ki:
        inodes = f" ({ki['image_inodes']:,} inodes)" if "image_inodes" in ki else ""
        build = ki.get("image_build_seconds")
        builds = len(ki.get("image_build_seconds_samples", []))
        w(f"  kernel image (EROFS, metadata only): {fmt_bytes(ki['image_bytes'])}, "
          f"{ki['image_bytes_per_entry']:.1f} B per entry{inodes}; built in "
          f"{'-' if build is None else f'{build:.2f} s'} (median of {builds} builds)\n")
    cached = [(k, ki[f"page_cache_after_{k}_bytes"]) for k in ("warm", "drop")
              if f"page_cache_after_{k}_bytes" in ki]
    if cached:
        w("  kernel image + shards in the page cache: "
          + ", ".join(f"{fmt_bytes(v)} after the {k} runs" if k == "warm"
                      else f"{fmt_bytes(v)} after a drop (most of any cold run)"
                      for k, v in cached) + "\n")


def print_systems(systems, w):
    """One line per system: status, checksum, reason, peak RSS."""
    w("\nsystems\n")
    for name, s in systems.items():
        line = f"  {s.label:<28} {s.status:<8}"
        if s.checksum:
            line += f" checksum {s.checksum}"
        if s.reason:
            line += f"  ({s.reason})"
        if s.rss_bytes:
            line += f"  peak RSS {s.rss_bytes / MB:.1f} MB"
        w(line + "\n")


def print_figures(systems, w):
    """Every figure of every system: median [min..max], MB/s, ratio to the loose tree."""
    loose = systems.get("loose")
    rows = [("mount", "warm"), ("mount", "cold"), ("mount", "build")]
    rows += [(ph, t) for ph in PHASES for t in ("warm", "cold")]
    rows += [("read_seq", "warm"), ("read_seq", "cold")]
    w(f"\n  {'figure':<36} {'system':<22} {'unit':>7} {'median':>12} {'min..max':>23} "
      f"{'MB/s':>8} {'vs loose':>9}\n")
    for phase, temp in rows:
        key = f"{phase}_{temp}"
        title = f"{'mount time' if phase == 'mount' else PHASE_TITLES[phase]}, {temp}"
        if temp == "build":
            title = "mount time, build (empty cache)"
        first = True
        for name, s in systems.items():
            f = s.figures.get(key)
            if f is None:
                continue
            v = f.values()
            unit = f.unit()
            if f.status == "ok" and v:
                med = fmt_num(statistics.median(v), unit)
                rng = f"{fmt_num(min(v), unit)}..{fmt_num(max(v), unit)}"
            else:
                med, rng = (f.status if f.status != "failed" else "FAILED"), ""
            mbs = fmt_num(f.mb_per_s(), "MB/s") if f.is_read and f.phase != "read_seq" else ""
            rt = ""
            if name != "loose" and phase != "mount" and phase != "read_seq":
                rv = ratio(s, loose, key)
                rt = f"{rv:.2f}x" if rv is not None else "-"
            w(f"  {title if first else '':<36} {s.label:<22} {unit:>7} {med:>12} {rng:>23} "
              f"{mbs:>8} {rt:>9}\n")
            first = False
    w("  (vs loose: files/s ratio for reads, time ratio for walks; loose measured in this run)\n")


def print_report(report, systems, out=sys.stdout):
    w = out.write
    print_header(report, w)
    print_systems(systems, w)
    print_figures(systems, w)
    w("\ntargets (shardfs)\n")
    for t in report["targets"]:
        v = "-" if t["value"] is None else (f"{t['value']:.2f}x" if t["unit"] == "x"
                                             else f"{t['value']:.1f} {t['unit']}")
        goal = f"{t['op']} {t['goal']:g}{'x' if t['unit'] == 'x' else ' ' + t['unit']}"
        w(f"  {t['target']:<56} {v:>10}  {goal:<10} {t['status']}\n")
    w("\n")
    out.flush()


def median_run(runs):
    """The run of median samples/s, with every run's samples/s in "reps"."""
    ranked = sorted(runs, key=lambda r: r["samples_per_s"] or 0.0)
    return ranked[(len(ranked) - 1) // 2] | {"reps": [r["samples_per_s"] for r in runs]}


def paired_ratio(every, key, path):
    """The median over reps of `path`'s samples/s against the loose tree's in the same rep, and
    the sorted ratios. `every` maps (mode, workers, path, temp) to runs, `key` is (mode,
    workers, temp). A slow spell of a shared machine that hits one rep's runs cancels out, where
    the ratio of two medians could pair a fast loose run with a slow mount run."""
    loose = {r.get("rep", 0): r for r in every[key[:2] + ("loose",) + key[2:]]}
    ratios = sorted(r["samples_per_s"] / loose[r.get("rep", 0)]["samples_per_s"]
                    for r in every[key[:2] + (path,) + key[2:]]
                    if loose.get(r.get("rep", 0)) and r["samples_per_s"]
                    and loose[r.get("rep", 0)]["samples_per_s"])
    return ratios[(len(ratios) - 1) // 2] if ratios else None, ratios
