"""The shardfs-kernel system: `shardfs mount --kernel` (an EROFS image of the index's view,
served by the kernel, no daemon) with its own image cache, so that a first mount can be timed
with the cache empty (image build + mount) and later ones reuse the image. Also: what each build
wrote (from the mount's log line and a stat of the image), and how much of the image and the
shards sits in the page cache (fincore), to check that a cold run starts with neither.
"""

import glob
import os
import re
import shutil
import statistics
import subprocess

from bench_common import KERNEL_IMAGE_SUBDIR

# `shardfs mount --kernel` logs this line on stderr when it writes an image.
BUILD_LINE = re.compile(r"kernel image (\S+): (\d+) inodes, (\d+) bytes \([\d.]+ per inode\), "
                        r"(\d+) shards, ([\d.]+) s")


class KernelImageCache:
    """The image cache dir of one system's mounts, and the log those mounts write."""

    def __init__(self, cache_dir, log_path):
        self.cache_dir = cache_dir
        self.log_path = log_path
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        os.chmod(cache_dir, 0o700)  # The mount refuses a cache dir others can write.

    def mount_argv(self, shardfs, index, mountpoint, mount_options=""):
        opts = f"cache_dir={self.cache_dir}" + (f",{mount_options}" if mount_options else "")
        return [shardfs, "mount", "--kernel", "-o", opts, index, mountpoint]

    def empty(self):
        """REQUIRES: nothing mounted from the cache. The next mount builds its image."""
        shutil.rmtree(os.path.join(self.cache_dir, KERNEL_IMAGE_SUBDIR), ignore_errors=True)

    def images(self):
        return sorted(glob.glob(os.path.join(self.cache_dir, KERNEL_IMAGE_SUBDIR, "*.erofs")))

    def builds(self):
        """Every image build the log tells of: [{image, inodes, bytes, shards, seconds}]."""
        try:
            with open(self.log_path, errors="replace") as f:
                text = f.read()
        except OSError:
            return []
        return [{"image": m[1], "inodes": int(m[2]), "bytes": int(m[3]), "shards": int(m[4]),
                 "seconds": float(m[5])} for m in BUILD_LINE.finditer(text)]

    def record(self, info, entries):
        """Puts into `info` the image's size on disk (stat), its bytes per entry (inodes of the
        last build, else `entries`) and the build times logged so far."""
        builds = self.builds()
        images = self.images()
        if images:
            st = os.stat(images[-1])
            info["image_bytes"] = st.st_size
            info["image_disk_bytes"] = st.st_blocks * 512
        if builds:
            info["image_inodes"] = builds[-1]["inodes"]
            info["image_build_seconds_samples"] = [b["seconds"] for b in builds]
            info["image_build_seconds"] = statistics.median(b["seconds"] for b in builds)
            info["image_logged_bytes"] = builds[-1]["bytes"]
        per = info.get("image_inodes") or entries
        if "image_bytes" in info and per:
            info["image_bytes_per_entry"] = info["image_bytes"] / per


def page_cache_bytes(paths):
    """Bytes of `paths` resident in the page cache (util-linux fincore), None without it."""
    if not paths or shutil.which("fincore") is None:
        return None
    p = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES"]
                       + list(paths), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True)
    try:
        return sum(int(x) for x in p.stdout.split())
    except ValueError:
        return None
