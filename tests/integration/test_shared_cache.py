#!/usr/bin/env python3
"""One chunk cache per node and user, shared by every process that reads the
same shards: shardfs.Index processes over remote shards (nginx), each with
forked workers, all with the same cache_dir, read every file at once.

What it shows:
  - the server sends each chunk about once for the whole node: its response
    bytes (nginx's access log) stay within 1.1x the shards' bytes for 4
    processes x 2 forked workers, as for one process alone (before, each
    process and each forked worker fetched on its own: 4-8x);
  - every byte read is the source file's;
  - one chunk directory holds the chunks (no slot per process or worker).
The numbers (requests and bytes, alone and 4 x 2) go to the test's output.
"""
import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers as rs  # noqa: E402
from shardfs_testlib import SHARDFS, ScratchTestCase, main, tar_into_shards  # noqa: E402

SHARDS = 3
FILES = 150

# One process: open the index, wait for the go file, fork WORKERS workers
# that each read their share of the files (every file once per process) and
# write {path: sha256}, then wait for them.
READER = textwrap.dedent("""
    import hashlib, json, os, sys, time, traceback
    import shardfs
    idx, cache, files_json, out, go, workers = sys.argv[1:7]
    files = json.load(open(files_json))
    index = shardfs.Index(idx, cache_dir=cache, cache_size=256 << 20)
    index.stat(files[0])
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

    def epoch(self, web, idx, processes, workers):
        """Runs `processes` readers of `workers` forked workers each over one
        fresh cache_dir; returns (requests, bytes) the server answered for
        them, after checking every file read and the cache's layout."""
        cache = self.scratch("cache")
        run = self.scratch("run")
        go = os.path.join(run, "go")
        before = len(web.access_entries())
        procs = []
        for p in range(processes):
            out = os.path.join(run, "p%d" % p)
            procs.append(subprocess.Popen(
                [sys.executable, "-c", READER, idx, cache, self.files_json, out, go,
                 str(workers)], stderr=subprocess.PIPE))
        with open(go, "w"):
            pass
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 0, err.decode(errors="replace"))
        for p in range(processes):
            seen = {}
            for w in range(workers):
                with open(os.path.join(run, "p%d.%d" % (p, w))) as f:
                    seen.update(json.load(f))
            self.assertEqual(seen, self.want, "process %d read wrong bytes" % p)
        self.assertEqual(os.listdir(cache), ["shardfs-chunks-v3"])
        served = web.access_entries()[before:]
        for method, path, status, _, rng in served:
            self.assertEqual((method, status), ("GET", 206), (path, rng))
        return len(served), sum(e[3] for e in served)

    def test_each_chunk_crosses_the_network_once_per_node(self):
        with rs.Nginx(self.served) as web:
            idx = self.build(web.url)
            alone = self.epoch(web, idx, 1, 2)
            shared = self.epoch(web, idx, 4, 2)
        print("shards: %d bytes; one process x 2 workers: %d chunk fetches, %d bytes (%.2fx); "
              "4 processes x 2 workers: %d chunk fetches, %d bytes (%.2fx)" % (
                  self.shard_bytes, alone[0], alone[1], alone[1] / self.shard_bytes,
                  shared[0], shared[1], shared[1] / self.shard_bytes))
        self.assertLessEqual(alone[1], 1.1 * self.shard_bytes)
        self.assertLessEqual(shared[1], 1.1 * self.shard_bytes)


if __name__ == "__main__":
    main()
