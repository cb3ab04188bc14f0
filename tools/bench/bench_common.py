"""What every part of the benchmark shares: the systems and phases measured, logging,
its errors, size helpers and the reference checksum (XXH3-64).
"""

import ctypes
import ctypes.util
import os
import sys
import time


ALL_SYSTEMS = ["loose", "squashfuse", "kernel", "archivemount", "raw", "shardfs",
               "shardfs-kernel"]
# What runs without --systems: all but shardfs-kernel, which --kernel adds.
DEFAULT_SYSTEMS = ALL_SYSTEMS[:-1]
PHASES = ["walk", "lstat", "read_tree1", "read_rand4"]
PHASE_TITLES = {
    "walk": "readdir walk",
    "lstat": "lstat walk",
    "read_tree1": "read tree order, 1 reader",
    "read_rand4": "read shuffled, 4 readers",
    "read_seq": "raw shard read, sequential",
}
KERNEL_IMAGE_SUBDIR = "shardfs-erofs-v1"  # Under `shardfs mount --kernel -o cache_dir=DIR`.
MB = 1e6
MOUNT_TIMEOUT = 300.0  # Seconds; archivemount's budget is shorter.


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


class ContentMismatch(BenchError):
    """A system returned other bytes or metadata than the loose tree: it is FAILED."""


def parse_size(text):
    """'256MiB', '1GiB', '64M' (binary), '500MB' (decimal) or a byte count."""
    t = text.strip()
    units = [("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("KB", 10**3), ("MB", 10**6),
             ("GB", 10**9), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("B", 1)]
    for suffix, mult in units:
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


def fmt_bytes(n):
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def tree_bytes(path):
    """(apparent bytes, allocated bytes) of a file or a directory tree."""
    if os.path.isfile(path):
        st = os.stat(path)
        return st.st_size, st.st_blocks * 512
    apparent = allocated = 0
    for d, _, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(d, n))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


class Xxh3:
    """XXH3-64 through libxxhash, as bench_reader computes it, so a reference checksum does not
    come from the code measured. `needed_for` says in the error who needs the library."""

    def __init__(self, needed_for="the bench needs it for its reference checksums"):
        name = ctypes.util.find_library("xxhash")
        if not name:
            raise BenchError(f"libxxhash not found: {needed_for}")
        self.lib = ctypes.CDLL(name)
        self.lib.XXH3_64bits.restype = ctypes.c_uint64
        self.lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    def __call__(self, data):
        return self.lib.XXH3_64bits(data, len(data))
