"""What every entry point of the benchmark shares: where the source tree and the binaries are,
the options every mode takes (--build-dir, --shardfs, --bench-reader, --json, --seed,
--workdir, --phase-timeout), the check that the binaries are built, the integration tests' rig
on the import path, and the report's JSON and host facts.

shardfs_bench.py's main run and its --scale, --archives and --python modes each build their own
parser from these pieces, so a shared option is spelled, defaulted and documented once.
"""

import json
import os
import platform
import sys

from bench_common import log

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(BENCH_DIR))  # It lives in <source>/tools/bench.
TEST_RIG_DIR = os.path.join(SOURCE_ROOT, "tests", "integration")


def default_build_dir():
    """$SHARDFS_BUILD_ROOT (what meson test sets), else <source>/build."""
    return os.environ.get("SHARDFS_BUILD_ROOT") or os.path.join(SOURCE_ROOT, "build")


def add_build_dir_arg(ap):
    ap.add_argument("--build-dir", default=default_build_dir(),
                    help="meson build dir holding tools/cli/shardfs and tools/bench/bench_reader "
                    "($SHARDFS_BUILD_ROOT, else build/ in the source tree)")


def add_binary_args(ap):
    """--build-dir, --shardfs and --bench-reader; resolve_binaries fills in the defaults."""
    add_build_dir_arg(ap)
    ap.add_argument("--shardfs", default=os.environ.get("SHARDFS"),
                    help="shardfs binary ($SHARDFS, else BUILD_DIR/tools/cli/shardfs)")
    ap.add_argument("--bench-reader", help="bench_reader binary (BUILD_DIR/bench/bench_reader)")


def add_json_arg(ap):
    ap.add_argument("--json", dest="json_out", help="write the full results here")


def add_seed_arg(ap, help="PRNG seed (1)"):
    ap.add_argument("--seed", type=int, default=1, help=help)


def add_workdir_arg(ap, help):
    ap.add_argument("--workdir", help=help)


def add_phase_timeout_arg(ap, help="seconds per phase (3600)"):
    ap.add_argument("--phase-timeout", type=float, default=3600.0, help=help)


def resolve_binaries(a):
    """Fills a.shardfs and a.bench_reader (when the parser has them) from a.build_dir."""
    if not getattr(a, "shardfs", None):
        a.shardfs = os.path.join(a.build_dir, "tools", "cli", "shardfs")
    if hasattr(a, "bench_reader") and not a.bench_reader:
        a.bench_reader = os.path.join(a.build_dir, "tools", "bench", "bench_reader")


def binaries_missing(a, prog):
    """2 (a usage error, said on stderr) if shardfs or bench_reader is not an executable, else
    None."""
    for exe in (a.shardfs, a.bench_reader):
        if not os.access(exe, os.X_OK):
            print(f"{prog}: {exe} is not an executable; build first or pass "
                  "--build-dir/--shardfs/--bench-reader", file=sys.stderr)
            return 2
    return None


def use_test_rig():
    """Puts tests/integration (the servers and rigs the integration tests run) on the import
    path: the modes that need them run from a source tree."""
    if TEST_RIG_DIR not in sys.path:
        sys.path.insert(0, TEST_RIG_DIR)
    return TEST_RIG_DIR


def host_facts(a):
    """The part of a report's "environment" every mode records."""
    return {"root": os.geteuid() == 0, "cpus": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "shardfs": a.shardfs,
            "page_reclaim": page_reclaim()}


def page_reclaim(root="/sys/kernel/mm/damon/admin/kdamonds"):
    """What reclaims idle pages on this host besides memory pressure, or None: a running
    DAMON pageout scheme (some virtual machines' hosts set one up) pages out whatever was not
    touched for its minimum age, so a "warm" pass that re-reads pages older than that reads
    part of them from the disk again. E.g. "DAMON pageout: pages idle >= 60 s, up to 128
    MiB/s"."""
    def read(*parts):
        try:
            with open(os.path.join(root, *parts)) as f:
                return f.read().strip()
        except OSError:
            return None
    found = []
    for k in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if read(k, "state") != "on":
            continue
        for c in sorted(os.listdir(os.path.join(root, k, "contexts"))):
            if not c.isdigit():
                continue
            ctx = (k, "contexts", c)
            aggr = read(*ctx, "monitoring_attrs", "intervals", "aggr_us")
            for sc in sorted(os.listdir(os.path.join(root, *ctx, "schemes"))):
                if not sc.isdigit() or read(*ctx, "schemes", sc, "action") != "pageout":
                    continue
                age = read(*ctx, "schemes", sc, "access_pattern", "age", "min")
                quota = read(*ctx, "schemes", sc, "quotas", "bytes")
                try:
                    idle = int(age) * int(aggr) / 1e6
                    found.append(f"DAMON pageout: pages idle >= {idle:.0f} s"
                                 + (f", up to {int(quota) >> 20} MiB/s" if quota and quota != "0"
                                    else ""))
                except (TypeError, ValueError):
                    found.append("DAMON pageout")
    return "; ".join(found) or None


class MemoryCgroup:
    """A memory cgroup with a limit that this process enters, so that every process it starts
    afterwards (the mount's daemon, the loader and its workers) runs under the limit, as a job
    in a container or a cluster's cgroup does: `with MemoryCgroup(2 << 30): ...`. cgroup v2 when
    its root offers the memory controller, else the v1 memory hierarchy; BenchError if neither
    can be used (not root, no memory controller). On exit the process goes back to the cgroup
    it was in and the new one is removed (its processes must have ended)."""

    def __init__(self, limit, root="/sys/fs/cgroup"):
        self.limit = limit
        name = f"shardfs-bench-{os.getpid()}"
        try:
            with open(os.path.join(root, "cgroup.controllers")) as f:
                v2 = "memory" in f.read().split()
        except OSError:
            v2 = False
        if v2:
            self.dir, self.limit_file = os.path.join(root, name), "memory.max"
            self.back = os.path.join(root, _own_cgroup("0", "").lstrip("/"))
        else:
            v1 = os.path.join(root, "memory")
            self.dir, self.limit_file = os.path.join(v1, name), "memory.limit_in_bytes"
            self.back = os.path.join(v1, _own_cgroup(None, "memory").lstrip("/"))

    def __enter__(self):
        from bench_common import BenchError
        try:
            os.mkdir(self.dir)
            with open(os.path.join(self.dir, self.limit_file), "w") as f:
                f.write(str(self.limit))
            with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            with open("/proc/self/cgroup") as f:
                if not any(line.rstrip("\n").endswith("/" + os.path.basename(self.dir))
                           for line in f):
                    raise OSError("this process is not in it after joining")
        except OSError as e:
            self._remove()
            raise BenchError(f"--memory-limit: cannot make the memory cgroup {self.dir}: {e}")
        log(f"memory cgroup {self.dir}: limit {self.limit:,} bytes")
        return self

    def __exit__(self, *exc):
        try:
            with open(os.path.join(self.back, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            log(f"memory cgroup: cannot move back to {self.back}: {e}")
        self._remove()

    def _remove(self):
        try:
            os.rmdir(self.dir)
        except FileNotFoundError:
            pass
        except OSError as e:
            log(f"memory cgroup: cannot remove {self.dir}: {e}")


def _own_cgroup(hierarchy, controller):
    """This process's cgroup path on the v2 hierarchy (`hierarchy` "0") or on the v1 hierarchy
    with `controller`."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            if (hierarchy is not None and hid == hierarchy and not ctrls) or \
                    (controller and controller in ctrls.split(",")):
                return path
    return "/"


def write_report_json(path, report):
    """Writes the report to `path` (when given) and says so."""
    if not path:
        return
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    log(f"wrote {path}")
