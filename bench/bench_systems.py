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
        s = SystemRun(name, label)
        log(f"{name}: mounting")
        entries = self.meta["files"] + self.meta["dirs"]

        def resident(key):
            paths = list(backing) + (image.images() if image else [])
            got = page_cache_bytes(paths)
            if got is not None:
                s.info[key] = max(s.info.get(key, 0), got)

        def mount(temp):
            m = make_mount()
            try:
                secs = m.mount(min(budget, MOUNT_TIMEOUT))
            except TimeoutError as e:
                raise PhaseTimeout(f"mount: {e}")
            if temp:
                s.fig("mount", temp).samples.append(secs)
            else:
                s.info["first_mount_ms"] = secs * 1000
            return m

        def note_rss(m):
            rss = m.peak_rss_bytes()
            if rss is not None:
                s.rss_bytes = max(s.rss_bytes or 0, rss)

        m = None
        try:
            # The first mount is not a warm sample: earlier cold runs may have dropped the
            # binary and its libraries from the page cache. Warm samples come after it.
            if image:
                image.empty()
            m = mount(None)
            if image:
                image.record(s.info, entries)
            root = m.mountpoint
            if self.a.hold:
                log(f"{name}: holding the mount {self.a.hold} s (--hold)")
                time.sleep(self.a.hold)
            # Content check first: nothing is timed before the bytes are known right.
            for phase in ("walk", "lstat", "read_tree1"):
                try:
                    r = self.run_phase(phase, root, budget)
                except PhaseTimeout as e:
                    for t in ("warm", "cold"):
                        for p in ([phase] if phase != "read_tree1" else ["read_tree1",
                                                                          "read_rand4"]):
                            f = s.fig(p, t)
                            f.status, f.note = "timeout", f"check run: {e}"
                    continue
                bad = self.check(phase, r)
                if bad:
                    s.status, s.reason = "FAILED", f"{phase}: {bad}"
                    if phase == "read_tree1":
                        s.checksum = r["checksum"]
                    log(f"{name}: FAILED: {s.reason}")
                    return s
                if phase == "read_tree1":
                    s.checksum = r["checksum"]
            if s.checksum is None:
                s.status = "timeout"
                s.reason = ("content not checked: the check read took longer than "
                            f"{budget:.0f} s; reads not timed")
            for rep in range(self.a.reps):
                for phase in PHASES:
                    self.measure(s, phase, "warm", root, budget)
            note_rss(m)
            if backing:
                resident("page_cache_after_warm_bytes")
            m.unmount()
            m = None
            for rep in range(self.a.reps):  # Mount-time samples, caches warm.
                m = mount("warm")
                note_rss(m)
                m.unmount()
                m = None
            if image:
                for rep in range(self.a.reps):  # Image build + mount, other caches warm.
                    image.empty()
                    m = mount("build")
                    m.unmount()
                    m = None
                image.record(s.info, entries)
            if self.can_cold:
                for rep in range(self.a.reps):
                    for phase in PHASES:
                        if s.fig(phase, "cold").status != "ok":
                            continue
                        drop_caches()
                        if backing:  # What the cold run finds cached: should be nothing.
                            resident("page_cache_after_drop_bytes")
                        m = mount("cold")
                        self.measure(s, phase, "cold", m.mountpoint, budget)
                        note_rss(m)
                        m.unmount()
                        m = None
        except PhaseTimeout as e:
            s.status, s.reason = "timeout", str(e)
            log(f"{name}: timeout: {e}")
        except ContentMismatch as e:
            s.status, s.reason = "FAILED", str(e)
            log(f"{name}: FAILED: {e}")
        except BenchError as e:
            s.status, s.reason = "error", str(e)
            log(f"{name}: error: {e}")
        finally:
            if m is not None:
                note_rss(m)
                m.unmount()
        for f in s.figures.values():
            if f.status == "ok" and not f.samples and s.status != "ok":
                f.status = "not run"
        return s
