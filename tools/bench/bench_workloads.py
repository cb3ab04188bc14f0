"""The workloads (walks and reads by bench_reader), the checks of their results against the
loose tree, and the figures they record.
"""

import json
import os
import random
import statistics

from bench_common import MB, BenchError, ContentMismatch, log
from bench_mounts import run_tool
from bench_report import ratio


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def drops_so_far():
    """How many times anyone wrote /proc/sys/vm/drop_caches since boot (/proc/vmstat), or None.
    Another process's drop during a warm sample makes it a cold one."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("drop_pagecache "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def can_drop_caches():
    if os.geteuid() != 0:
        return False, "not root: cannot write /proc/sys/vm/drop_caches"
    try:
        drop_caches()
        return True, ""
    except OSError as e:
        return False, f"drop_caches not allowed here: {e}"


class Figure:
    """Samples of one measurement of one system. Reads keep files/bytes for rates."""

    def __init__(self, phase, temp):
        self.phase = phase
        self.temp = temp  # "warm" | "cold" | "" (mounts)
        self.samples = []  # seconds
        self.files = 0
        self.bytes = 0
        self.status = "ok"  # ok | timeout | skipped | failed | not run
        self.note = ""

    @property
    def is_read(self):
        return self.phase.startswith("read")

    def values(self):
        """What the table reports: files/s for reads, MB/s for raw, ms for walks and mounts."""
        if self.phase == "read_seq":
            return [self.bytes / s / MB for s in self.samples if s > 0]
        if self.is_read:
            return [self.files / s for s in self.samples if s > 0]
        return [s * 1000 for s in self.samples]

    def unit(self):
        if self.phase == "read_seq":
            return "MB/s"
        if self.is_read:
            return "files/s"
        return "ms"

    def median(self):
        v = self.values()
        return statistics.median(v) if v and self.status == "ok" else None

    def mb_per_s(self):
        if not self.samples or self.status != "ok":
            return None
        return statistics.median([self.bytes / s / MB for s in self.samples if s > 0])

    def to_json(self):
        v = self.values()
        ok = self.status == "ok" and v
        return {"phase": self.phase, "temp": self.temp, "unit": self.unit(),
                "status": self.status, "note": self.note, "samples_seconds": self.samples,
                "files": self.files, "bytes": self.bytes,
                "median": statistics.median(v) if ok else None,
                "min": min(v) if ok else None, "max": max(v) if ok else None,
                "mb_per_s_median": self.mb_per_s() if self.is_read else None}


class SystemRun:
    def __init__(self, name, label):
        self.name = name
        self.label = label
        self.status = "ok"  # ok | FAILED | timeout | skipped | error
        self.reason = ""
        self.checksum = None
        self.figures = {}
        self.rss_bytes = None
        self.info = {}

    def fig(self, phase, temp):
        key = f"{phase}_{temp}" if temp else phase
        if key not in self.figures:
            self.figures[key] = Figure(phase, temp)
        return self.figures[key]

    def to_json(self, loose=None):
        figures = {}
        for k, f in self.figures.items():
            figures[k] = f.to_json()
            if f.phase not in ("mount", "read_seq") and self.name != "loose":
                figures[k]["ratio_vs_loose"] = ratio(self, loose, k)
        return {"label": self.label, "status": self.status, "reason": self.reason,
                "checksum": self.checksum, "peak_rss_bytes": self.rss_bytes,
                "info": self.info, "figures": figures}


class PhaseTimeout(Exception):
    pass


class Workloads:
    """Runs bench_reader over a root and checks its result against the loose tree's. Drops of
    the page cache by someone else (a shared machine) during a warm sample, or since the run
    before it, are counted in foreign_drops; such a sample is taken again up to WARM_RETRIES
    times (a subclass whose warm samples each need a fresh mount keeps 0)."""

    WARM_RETRIES = 0

    def __init__(self, a, ddir, scratch, meta, files, can_cold):
        self.a = a
        self.ddir = ddir
        self.tree = os.path.join(ddir, "tree")
        self.scratch = scratch
        self.meta = meta
        self.can_cold = can_cold
        self.lists = {}
        self.write_list("tree", files)
        shuffled = list(files)
        random.Random(a.seed + 1).shuffle(shuffled)
        self.write_list("rand", shuffled)
        self.reference = {}
        self.drop_mark = drops_so_far()  # The counter at the end of the last run.
        self.foreign_drops = 0

    def write_list(self, name, paths):
        path = os.path.join(self.scratch, f"{name}.list")
        with open(path, "w") as f:
            f.write("\n".join(paths) + "\n")
        self.lists[name] = path

    def reader(self, mode, root, budget, list_name=None, procs=1):
        argv = [self.a.bench_reader, mode]
        if list_name:
            argv.append(self.lists[list_name])
        if root:
            argv += ["--root", root]
        if procs != 1:
            argv += ["--procs", str(procs)]
        rc, so, se, _ = run_tool(argv, timeout=budget)
        if rc is None:
            raise PhaseTimeout(f"{mode} took longer than {budget:.0f} s")
        try:
            r = json.loads(so.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise BenchError(f"bench_reader {mode} exited {rc} without a result: "
                             f"{se.decode(errors='replace').strip()}")
        r["rc"] = rc
        return r

    def run_phase(self, phase, root, budget):
        try:
            return self._run_phase(phase, root, budget)
        finally:
            self.drop_mark = drops_so_far()

    def _run_phase(self, phase, root, budget):
        if phase == "walk":
            return self.reader("walk", root, budget)
        if phase == "lstat":
            return self.reader("lstat", root, budget, "tree")
        if phase == "read_tree1":
            return self.reader("read", root, budget, "tree")
        if phase == "read_rand4":
            return self.reader("read", root, budget, "rand", procs=self.a.procs)
        if phase == "read_seq":
            return self.reader("read", None, budget, "shards")
        raise ValueError(phase)

    def check(self, phase, r):
        """None when the result matches the loose tree's, else what differs."""
        if r.get("errors"):
            return f"{r['errors']} error(s), first: {r.get('first_error', '?')}"
        ref = self.reference.get("read" if phase.startswith("read") else phase)
        if phase == "read_seq" or ref is None:
            return None
        for k in ("files", "dirs", "bytes", "checksum"):
            if r[k] != ref[k]:
                return f"{k} {r[k]} != loose tree's {ref[k]}"
        return None

    def measure(self, s, phase, temp, root, budget, prepare=None):
        """Runs one sample of phase; records it in figure (phase, temp)."""
        f = s.fig(phase, temp)
        if f.status != "ok":
            return
        for attempt in range(self.WARM_RETRIES + 1):
            if prepare:
                prepare()
            mark = self.drop_mark
            try:
                r = self.run_phase(phase, root, budget)
            except PhaseTimeout as e:
                f.status, f.note = "timeout", str(e)
                return
            if temp != "warm" or mark is None or self.drop_mark == mark:
                break
            self.foreign_drops += self.drop_mark - mark
            if attempt < self.WARM_RETRIES:
                log(f"{s.name}: {phase} warm: caches dropped by another process; sample "
                    "taken again")
        bad = self.check(phase, r)
        if bad:
            f.status, f.note = "failed", bad
            raise ContentMismatch(f"{phase} {temp}: {bad}")
        f.samples.append(r["seconds"])
        f.files, f.bytes = r["files"], r["bytes"]
