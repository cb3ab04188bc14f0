#!/usr/bin/env python3
"""One chunk cache per node and user, shared by every process that reads the
same shards: shardfs.Index processes, each with forked workers, read every
file at once, over remote shards (nginx) with one cache_dir, and over shards
on network storage (the sshfs rig, netfs_testlib) with the default cache
($XDG_CACHE_HOME/shardfs).

What it shows:
  - the server sends each chunk about once for the whole node: over http its
    response bytes (nginx's access log) stay within 1.1x the shards' bytes
    for 4 processes x 2 forked workers, as for one process alone (before,
    each process and each forked worker fetched on its own: 4-8x); over
    sshfs the bytes the server sent (the rig's proxy, ssh framing included)
    for 4 x 2 pass one process's alone by at most a quarter of the shards
    (each process still reads each shard's fingerprint ranges itself);
  - every byte read is the source file's;
  - one chunk directory holds the chunks (no slot per process or worker).
The numbers (requests and bytes, alone and 4 x 2) go to the test's output.
"""
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfs_testlib  # noqa: E402
import remote_servers as rs  # noqa: E402
from shardfs_testlib import (SHARDFS, ScratchTestCase, build_index, main,  # noqa: E402
                             tar_into_shards)

SHARDS = 3
FILES = 150

# One process: open the index, say it is ready, wait for the go file, fork
# WORKERS workers that each read their share of the files (every file once
# per process) and write {path: sha256}, then wait for them.
READER = textwrap.dedent("""
    import hashlib, json, os, sys, time, traceback
    import shardfs
    idx, cache, files_json, out, go, workers = sys.argv[1:7]
    files = json.load(open(files_json))
    if cache == "-":  # The default cache: $XDG_CACHE_HOME/shardfs on network storage.
        index = shardfs.Index(idx)
    else:
        index = shardfs.Index(idx, cache_dir=cache, cache_size=256 << 20)
    index.stat(files[0])
    open(out + ".ready", "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    kids = []
    for w in range(int(workers)):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                got = {f: hashlib.sha256(index.read(f)).hexdigest()
                       for f in files[w::int(workers)]}
                with open("%s.%d" % (out, w), "w") as f:
                    json.dump(got, f)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        kids.append(pid)
    failed = 0
    for pid in kids:
        failed |= os.waitpid(pid, 0)[1]
    sys.exit(1 if failed else 0)
""")


def make_tree(root, seed=11):
    rnd = random.Random(seed)
    want = {}
    for i in range(FILES):
        rel = "d%d/f%03d.bin" % (i % 5, i)
        data = rnd.randbytes(rnd.randint(20 << 10, 200 << 10))
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
        want[rel] = hashlib.sha256(data).hexdigest()
    return want


class SharedCacheTest(ScratchTestCase):
    PREFIX = "shardfs-shared-cache-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        src = os.path.join(cls.tmp, "src")
        cls.served = os.path.join(cls.tmp, "served")
        os.makedirs(src)
        os.makedirs(os.path.join(cls.served, "shards"))
        cls.want = make_tree(src)
        cls.shards = tar_into_shards(src, os.path.join(cls.served, "shards"), SHARDS)
        cls.shard_bytes = sum(os.path.getsize(p) for p in cls.shards)
        cls.files_json = os.path.join(cls.tmp, "files.json")
        with open(cls.files_json, "w") as f:
            json.dump(sorted(cls.want), f)
        cls.list_file = os.path.join(cls.tmp, "shards.list")
        with open(cls.list_file, "w") as f:
            f.write("".join("shards/%s\n" % os.path.basename(s) for s in cls.shards))

    def build(self, url):
        out = os.path.join(self.scratch("idx"), "remote.idx")
        subprocess.run([SHARDFS, "index", "build", "--quiet", "--out", out, "--from-list",
                        self.list_file, "--url-prefix", url], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)
        return out

    def epoch(self, idx, processes, workers, cache=None):
        """Runs `processes` readers of `workers` forked workers each, with
        `cache` as their cache_dir (None: the default cache, in a fresh
        $XDG_CACHE_HOME), and checks every file they read; returns the chunk
        cache's directory."""
        xdg = self.scratch("xdg")
        run = self.scratch("run")
        go = os.path.join(run, "go")
        env = dict(os.environ, XDG_CACHE_HOME=xdg)
        procs = []
        for p in range(processes):
            out = os.path.join(run, "p%d" % p)
            # A session each, so that a reader and its workers can be stopped
            # together if the test fails.
            procs.append(subprocess.Popen(
                [sys.executable, "-c", READER, idx, cache or "-", self.files_json, out, go,
                 str(workers)], stderr=subprocess.PIPE, env=env, start_new_session=True))
        try:
            self.run_epoch(run, go, procs)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        return self.check_epoch(run, processes, workers, cache, xdg)

    def run_epoch(self, run, go, procs):
        """Waits for every reader to be ready, lets them go and waits for
        them to end (each within 120 s)."""
        # Every process has opened its index before any forks, so that the
        # epoch's processes and workers read at the same time.
        for p, proc in enumerate(procs):
            ready = os.path.join(run, "p%d.ready" % p)
            while not os.path.exists(ready) and proc.poll() is None:
                time.sleep(0.01)
        with open(go, "w"):
            pass
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 0, err.decode(errors="replace"))

    def check_epoch(self, run, processes, workers, cache, xdg):
        """Every file each reader's workers read against the source, and the
        cache's layout; returns the chunk directory."""
        for p in range(processes):
            seen = {}
            for w in range(workers):
                with open(os.path.join(run, "p%d.%d" % (p, w))) as f:
                    seen.update(json.load(f))
            self.assertEqual(seen, self.want, "process %d read wrong bytes" % p)
        root = cache or os.path.join(xdg, "shardfs")
        self.assertEqual([n for n in os.listdir(root) if n != "shardfs-index-copies-v1"],
                         ["shardfs-chunks-v3"])
        return os.path.join(root, "shardfs-chunks-v3")

    def http_epoch(self, web, idx, processes, workers, default_cache=False):
        """An epoch over http with one fresh cache_dir (or, with
        default_cache, none: the default cache in a fresh $XDG_CACHE_HOME);
        (requests, bytes) the server answered for it."""
        before = len(web.access_entries())
        self.epoch(idx, processes, workers, cache=None if default_cache else self.scratch("cache"))
        served = web.access_entries()[before:]
        for method, path, status, _, rng in served:
            self.assertEqual((method, status), ("GET", 206), (path, rng))
        return len(served), sum(e[3] for e in served)

    def test_each_chunk_crosses_the_network_once_per_node(self):
        with rs.Nginx(self.served) as web:
            idx = self.build(web.url)
            alone = self.http_epoch(web, idx, 1, 2)
            shared = self.http_epoch(web, idx, 4, 2)
            # No cache_dir given: remote shards use the node-local default.
            default = self.http_epoch(web, idx, 4, 2, default_cache=True)
        print("shards: %d bytes; one process x 2 workers: %d chunk fetches, %d bytes (%.2fx); "
              "4 processes x 2 workers: %d chunk fetches, %d bytes (%.2fx); the same with the "
              "default cache: %d, %d bytes (%.2fx)" % (
                  self.shard_bytes, alone[0], alone[1], alone[1] / self.shard_bytes,
                  shared[0], shared[1], shared[1] / self.shard_bytes,
                  default[0], default[1], default[1] / self.shard_bytes))
        self.assertLessEqual(alone[1], 1.1 * self.shard_bytes)
        self.assertLessEqual(shared[1], 1.1 * self.shard_bytes)
        self.assertLessEqual(default[1], 1.1 * self.shard_bytes)

    def test_network_storage_shares_the_default_cache(self):
        netfs_testlib.require_root()
        netfs_testlib.require_tools()
        with netfs_testlib.NetFs(rtt_ms=0.5) as net:
            shutil.copytree(os.path.join(self.served, "shards"),
                            os.path.join(net.export, "shards"))
            mnt = self.scratch("net")
            with net.mount(mnt):
                idx = os.path.join(self.scratch("idx"), "net.idx")
                build_index([os.path.join(mnt, "shards", os.path.basename(p))
                             for p in self.shards], idx)
                served = []
                for processes in (1, 4):
                    before = net.proxy.bytes_down()
                    chunks = self.epoch(idx, processes, 2)
                    served.append(net.proxy.bytes_down() - before)
                    self.assertTrue(any(n.endswith(".chunk") for n in os.listdir(chunks)))
        print("sshfs, shards %d bytes: the server sent %d bytes (%.2fx) for one process x 2 "
              "workers, %d (%.2fx) for 4 processes x 2 workers" % (
                  self.shard_bytes, served[0], served[0] / self.shard_bytes, served[1],
                  served[1] / self.shard_bytes))
        # Beyond the chunks, each process checks each shard's fingerprint when
        # it opens it (its first and last 64 KiB), which sshfs reads anew for
        # every open: a few percent of these small shards per process.
        self.assertLessEqual(served[1], served[0] + 0.25 * self.shard_bytes)


if __name__ == "__main__":
    main()
