"""The systems compared: the loose tree (the reference), raw shard reads and every mounted
system (squashfuse, kernel squashfs, archivemount, shardfs, shardfs-kernel), each validated then
measured.
"""

import os
import time

from bench_common import MOUNT_TIMEOUT, PHASES, BenchError, ContentMismatch, fmt_bytes, log
from bench_kernel import page_cache_bytes
from bench_workloads import PhaseTimeout, SystemRun, Workloads, drop_caches


class Bench(Workloads):
    """Each system validated against the loose tree, then measured."""

    WARM_RETRIES = 2  # Each warm sample reruns on the same mount (or the loose tree).

    # -- the loose tree: the reference ---------------------------------------------------------

    def run_loose(self):
        s = SystemRun("loose", "loose tree")
        budget = self.a.phase_timeout
        log("loose: reference runs")
        for phase in ("walk", "lstat", "read"):
            r = self.run_phase("read_tree1" if phase == "read" else phase, self.tree, budget)
            if r.get("errors"):
                raise BenchError(f"loose tree {phase}: {r.get('first_error')}")
            self.reference[phase] = {k: r[k] for k in ("files", "dirs", "bytes", "checksum")}
        ref = self.reference
        if ref["read"]["files"] != self.meta["files"] or ref["read"]["bytes"] != self.meta["bytes"]:
            raise BenchError(f"the cached tree {self.tree} does not match dataset.json "
                             f"({ref['read']['files']} files, {ref['read']['bytes']} bytes); "
                             "delete the work dir and rerun")
        if ref["walk"]["files"] != self.meta["files"] or ref["walk"]["dirs"] != self.meta["dirs"]:
            raise BenchError("the loose tree's walk does not match dataset.json")
        s.checksum = ref["read"]["checksum"]
        for rep in range(self.a.reps):
            for phase in PHASES:
                self.measure(s, phase, "warm", self.tree, budget)
        if self.can_cold:
            for rep in range(self.a.reps):
                for phase in PHASES:
                    self.measure(s, phase, "cold", self.tree, budget, prepare=drop_caches)
        return s

    def run_raw(self, shards):
        s = SystemRun("raw", "raw shard read")
        self.write_list("shards", shards)
        budget = self.a.phase_timeout
        total = sum(os.path.getsize(p) for p in shards)
        log(f"raw: sequential read of {len(shards)} shards ({fmt_bytes(total)})")
        r = self.run_phase("read_seq", None, budget)
        if r.get("errors") or r["bytes"] != total:
            s.status, s.reason = "FAILED", f"read {r['bytes']} of {total} bytes"
            return s
        for rep in range(self.a.reps):
            self.measure(s, "read_seq", "warm", None, budget)
        if self.can_cold:
            for rep in range(self.a.reps):
                self.measure(s, "read_seq", "cold", None, budget, prepare=drop_caches)
        s.info = {"shards": len(shards), "bytes": total}
        return s

    # -- mounted systems -----------------------------------------------------------------------

    def run_mounted(self, name, label, make_mount, budget, image=None, backing=()):
        """Validates and measures one mounted system. make_mount() returns an unmounted Mount.
        With `image` (a KernelImageCache: shardfs-kernel), the first mount and --reps more
        ("mount_build") start with the image cache empty, so they build the image; every
        other mount reuses it. `backing`: files whose page-cache residency is recorded after
        the warm runs and after each drop (the kernel reads them itself: image and shards)."""
        return MountedRun(self, SystemRun(name, label), make_mount, budget, image,
                          backing).run()


class MountedRun:
    """One run of Bench.run_mounted: the system's figures in `s`, the mount of the moment in
    `m` (unmounted whatever happens)."""

    def __init__(self, bench, s, make_mount, budget, image, backing):
        self.bench, self.a, self.s = bench, bench.a, s
        self.make_mount, self.budget = make_mount, budget
        self.image, self.backing = image, backing
        self.entries = bench.meta["files"] + bench.meta["dirs"]
        self.m = None

    def resident(self, key):
        """Records the most of the backing files (and images) found in the page cache."""
        paths = list(self.backing) + (self.image.images() if self.image else [])
        got = page_cache_bytes(paths)
        if got is not None:
            self.s.info[key] = max(self.s.info.get(key, 0), got)

    def mount(self, temp):
        """Mounts into self.m; the time is a `mount` sample of `temp`, or with temp None the
        first mount's."""
        self.m = self.make_mount()
        try:
            secs = self.m.mount(min(self.budget, MOUNT_TIMEOUT))
        except TimeoutError as e:
            raise PhaseTimeout(f"mount: {e}")
        if temp:
            self.s.fig("mount", temp).samples.append(secs)
        else:
            self.s.info["first_mount_ms"] = secs * 1000
        return self.m

    def unmount(self, rss=True):
        if rss:
            self.note_rss()
        self.m.unmount()
        self.m = None

    def note_rss(self):
        rss = self.m.peak_rss_bytes()
        if rss is not None:
            self.s.rss_bytes = max(self.s.rss_bytes or 0, rss)

    def check_content(self, root):
        """Walk, lstat walk and tree-order read once, checked against the loose tree before
        anything is timed; False (the system FAILED) on a difference. A check that times out
        marks the figures it guards."""
        s = self.s
        for phase in ("walk", "lstat", "read_tree1"):
            try:
                r = self.bench.run_phase(phase, root, self.budget)
            except PhaseTimeout as e:
                for t in ("warm", "cold"):
                    for p in ([phase] if phase != "read_tree1" else ["read_tree1",
                                                                      "read_rand4"]):
                        f = s.fig(p, t)
                        f.status, f.note = "timeout", f"check run: {e}"
                continue
            bad = self.bench.check(phase, r)
            if bad:
                s.status, s.reason = "FAILED", f"{phase}: {bad}"
                if phase == "read_tree1":
                    s.checksum = r["checksum"]
                log(f"{s.name}: FAILED: {s.reason}")
                return False
            if phase == "read_tree1":
                s.checksum = r["checksum"]
        if s.checksum is None:
            s.status = "timeout"
            s.reason = ("content not checked: the check read took longer than "
                        f"{self.budget:.0f} s; reads not timed")
        return True

    def first_mount(self):
        """The first mount (with an empty image cache), which is not a warm sample: earlier
        cold runs may have dropped the binary and its libraries from the page cache."""
        if self.image:
            self.image.empty()
        self.mount(None)
        if self.image:
            self.image.record(self.s.info, self.entries)
        if self.a.hold:
            log(f"{self.s.name}: holding the mount {self.a.hold} s (--hold)")
            time.sleep(self.a.hold)
        return self.m.mountpoint

    def warm_runs(self, root):
        """--reps of every phase warm on the first mount, then --reps warm mounts, then (with an
        image) --reps image builds + mounts."""
        for rep in range(self.a.reps):
            for phase in PHASES:
                self.bench.measure(self.s, phase, "warm", root, self.budget)
        self.note_rss()
        if self.backing:
            self.resident("page_cache_after_warm_bytes")
        self.unmount(rss=False)
        for rep in range(self.a.reps):  # Mount-time samples, caches warm.
            self.mount("warm")
            self.unmount()
        if self.image:
            for rep in range(self.a.reps):  # Image build + mount, other caches warm.
                self.image.empty()
                self.mount("build")
                self.unmount(rss=False)
            self.image.record(self.s.info, self.entries)

    def cold_runs(self):
        """--reps of every phase still ok, each after a drop of all caches on a fresh mount."""
        for rep in range(self.a.reps):
            for phase in PHASES:
                if self.s.fig(phase, "cold").status != "ok":
                    continue
                drop_caches()
                if self.backing:  # What the cold run finds cached: should be nothing.
                    self.resident("page_cache_after_drop_bytes")
                self.mount("cold")
                self.bench.measure(self.s, phase, "cold", self.m.mountpoint, self.budget)
                self.unmount()

    def run(self):
        s = self.s
        log(f"{s.name}: mounting")
        try:
            root = self.first_mount()
            if not self.check_content(root):
                return s
            self.warm_runs(root)
            if self.bench.can_cold:
                self.cold_runs()
        except PhaseTimeout as e:
            s.status, s.reason = "timeout", str(e)
            log(f"{s.name}: timeout: {e}")
        except ContentMismatch as e:
            s.status, s.reason = "FAILED", str(e)
            log(f"{s.name}: FAILED: {e}")
        except BenchError as e:
            s.status, s.reason = "error", str(e)
            log(f"{s.name}: error: {e}")
        finally:
            if self.m is not None:
                self.unmount()
        for f in s.figures.values():
            if f.status == "ok" and not f.samples and s.status != "ok":
                f.status = "not run"
        return s
