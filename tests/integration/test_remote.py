#!/usr/bin/env python3
"""Remote shards end to end: `index build` over http://, https:// and s3://
URLs, mounts that read them in chunks through a bounded cache, against real
servers started here (nginx, s3rver) with a fault-injecting proxy between.

What each test shows:
  - the mounted tree is the tree tar'd into the shards, byte for byte, over
    http, https (with the test's CA) and S3 (SigV4 checked by the server;
    s3rver's plain-http endpoint needs SHARDFS_S3_ALLOW_HTTP=1, in the build
    and in the daemon);
  - metadata walks (find, ls -lR, lstat of everything) send no request;
  - 503/429 bursts, resets and stalls are retried and still give the right
    bytes; a server that is down fails a read with EIO within the retry
    budget, and the same file reads again once it is back, no remount;
  - a shard replaced on the server gives EIO, never its new bytes;
  - a disk cache survives a remount (no request for what it holds), a
    corrupted chunk file is refetched, and a daemon killed with -9 in the
    middle of fetches leaves nothing that reads as valid;
  - cache warm fetches a subtree, cache drop empties the cache, stats counts;
  - a local index with cache_dir reads through the cache;
  - several daemons mount one index at once, and per-rank mounts fetch only
    their own shards.
"""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers as rs  # noqa: E402
import shardfs_testlib as tl  # noqa: E402
from shardfs_testlib import (SHARDFS, Mount, MountError, ScratchTestCase, build_index,  # noqa: E402
                             json_lines, main, run_shardfs, sha256_file, tar_into_shards, unmount,
                             wait_until, walk_reference)

CHUNK = 64 << 10  # Small chunks, so the little test shards span many.


def make_tree(root, seed=7):
    """Top-level dirs d0..d5, each with files of 1 byte to 150 KiB, a nested
    dir, a symlink and an empty file: a few hundred KiB per shard."""
    import random
    rnd = random.Random(seed)
    for d in range(6):
        base = os.path.join(root, "d%d" % d)
        os.makedirs(os.path.join(base, "sub"))
        for i in range(14):
            size = rnd.choice([1, 100, 4000, 12000, 40000, 150000])
            with open(os.path.join(base, "f%02d.bin" % i), "wb") as f:
                f.write(rnd.randbytes(size))
        with open(os.path.join(base, "sub", "deep.txt"), "wb") as f:
            f.write(b"deep %d\n" % d)
        open(os.path.join(base, "empty"), "wb").close()
        os.symlink("f00.bin", os.path.join(base, "link"))


def tree_digest(root):
    """{relative path: (type, size, sha256 or link target)} of a tree."""
    out = {}
    for rel, e in walk_reference(root).items():
        if rel == b"":
            continue
        out[rel] = (e.type, e.size if e.type != "dir" else None, e.sha256 or e.target)
    return out


def stats(mnt, *extra):
    p = run_shardfs("stats", "--json", *extra, mnt, check=0)
    return json.loads(p.stdout)


class RemoteTestCase(ScratchTestCase):
    PREFIX = "shardfs-remote-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        cls.served = os.path.join(cls.tmp, "served")
        os.makedirs(cls.src)
        os.makedirs(os.path.join(cls.served, "shards"))
        make_tree(cls.src)
        cls.shards = tar_into_shards(cls.src, os.path.join(cls.served, "shards"), 3)
        cls.want = tree_digest(cls.src)
        cls.names = [os.path.basename(s) for s in cls.shards]
        cls.list_file = os.path.join(cls.tmp, "shards.list")
        with open(cls.list_file, "w") as f:
            f.write("".join("shards/%s\n" % n for n in cls.names))

    def build_http(self, base_url, out=None, env=None, check=0):
        out = out or os.path.join(self.scratch("idx"), "remote.idx")
        p = subprocess.run([SHARDFS, "index", "build", "--quiet", "--out", out, "--from-list",
                            self.list_file, "--url-prefix", base_url],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=120)
        if check is not None and p.returncode != check:
            raise AssertionError("index build exited %d, expected %d:\n%s" % (
                p.returncode, check, p.stderr.decode(errors="replace")))
        return out, p

    def assert_tree(self, mnt):
        self.assertEqual(tree_digest(mnt), self.want)


class HttpTest(RemoteTestCase):
    def test_tree_over_http_and_metadata_walks_send_no_request(self):
        with rs.Nginx(self.served) as web, rs.FaultProxy(web.url) as proxy:
            idx, _ = self.build_http(proxy.url)
            info = json_lines(run_shardfs("index", "info", "--json", idx, check=0).stdout)
            self.assertEqual([s["shard"] for s in info[1:]],
                             [proxy.url + "/shards/" + n for n in self.names])
            self.assertTrue(all(s["remote"] and s["etag"] for s in info[1:]), info)
            mnt = self.scratch("mnt")
            with Mount(idx, mnt, "chunk_size=64K,cache_size=8M,push_ahead=0,push_random=0"):
                proxy.reset_counters()
                for argv in (["find", mnt], ["ls", "-lR", mnt]):
                    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
                for dirpath, dirnames, filenames in os.walk(mnt):
                    for n in dirnames + filenames:
                        os.lstat(os.path.join(dirpath, n))
                self.assertEqual(proxy.requests, 0, "metadata walks sent requests")
                self.assert_tree(mnt)
                self.assertGreater(proxy.requests, 0)
                # Every request was a range of a chunk of a shard.
                for path, rng in proxy.ranges():
                    self.assertTrue(path.startswith("/shards/"), path)
                    self.assertTrue(rng and rng.startswith("bytes="), rng)
                s = stats(mnt)
                # Each file was read once (pushes are off here, so no file
                # is both pushed and READ): the READ replies add up to the
                # tree's bytes, and no chunk was fetched twice.
                file_bytes = sum(e[1] for e in self.want.values() if e[0] == "file")
                self.assertEqual(s["bytes_delivered"], file_bytes)
                self.assertEqual(s["bytes_pushed"], 0)
                shard_bytes = sum(os.path.getsize(p) for p in self.shards)
                self.assertLessEqual(s["bytes_fetched"], shard_bytes)
                self.assertEqual(s["chunks_fetched"], s["requests"])
                self.assertEqual(s["requests"], proxy.requests)
                text = run_shardfs("stats", mnt, check=0).stdout.decode()
                self.assertIn("amplification", text)
                per = stats(mnt, "--shards")["shards"]
                self.assertEqual(len(per), 3)
                self.assertTrue(all(p["bytes_fetched"] > 0 for p in per), per)
                self.assertEqual([p["shard_id"] for p in per], [0, 1, 2])

    def test_tools_that_read_local_shard_files_refuse_remote_ones(self):
        with rs.Nginx(self.served) as web:
            idx, _ = self.build_http(web.url)
            out = os.path.join(self.scratch("out"), "packed")
            p = run_shardfs("pack", "--from-index", idx, "--out", out, "--quiet", check=1)
            self.assertIn(b"remote shard", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "index")))
            p = run_shardfs("verify", idx, self.src, "--quiet", check=1)
            self.assertIn(b"remote shard", p.stdout + p.stderr)
            # index add refuses a shard already in the index, by its URL.
            p = run_shardfs("index", "add", "--quiet", idx, web.url + "/shards/" + self.names[1],
                            check=1)
            self.assertIn(b"already in index", p.stderr)

    def test_https_needs_the_servers_ca(self):
        with rs.Nginx(self.served, tls=True) as web:
            env = dict(os.environ, CURL_CA_BUNDLE="", SSL_CERT_FILE="")
            _, p = self.build_http(web.url, env=env, check=1)
            self.assertIn(b"https://", p.stderr)
            env["SSL_CERT_FILE"] = web.ca_file
            idx, _ = self.build_http(web.url, env=env)
            mnt = self.scratch("mnt")
            with Mount(idx, mnt, "chunk_size=64K,ca_file=" + web.ca_file):
                self.assert_tree(mnt)

    def test_faults_are_retried_and_never_give_wrong_bytes(self):
        with rs.Nginx(self.served) as web, rs.FaultProxy(web.url) as proxy:
            idx, _ = self.build_http(proxy.url)
            mnt = self.scratch("mnt")
            opts = "chunk_size=64K,cache_size=1M,fetch_ahead=0,stall_timeout=1s,retry_budget=20s"
            with Mount(idx, mnt, opts):
                proxy.fail_next(3, status=503)
                proxy.fail_next(2, status=429, retry_after=1)
                proxy.reset_next(2, after_bytes=1000)
                proxy.stall_next(1, after_bytes=500, seconds=5)
                proxy.reset_next(1)
                self.assert_tree(mnt)
                self.assertEqual(proxy.pending_faults(), 0)
                s = stats(mnt)
                self.assertGreaterEqual(s["retries"], 9)
                for kind in ("5xx", "throttle", "reset", "timeout"):
                    self.assertGreater(s["errors"][kind], 0, (kind, s["errors"]))
                self.assertEqual(s["fetch_errors"], 0)

    def test_server_down_fails_within_budget_then_recovers(self):
        with rs.Nginx(self.served) as web, rs.FaultProxy(web.url) as proxy:
            idx, _ = self.build_http(proxy.url)
            mnt = self.scratch("mnt")
            opts = "chunk_size=64K,retry_budget=2s,connect_timeout=1s,stall_timeout=1s"
            with Mount(idx, mnt, opts) as m:
                victim = os.path.join(mnt, "d1", "f03.bin")
                proxy.down()
                t0 = time.monotonic()
                with self.assertRaises(OSError) as cm:
                    with open(victim, "rb") as f:
                        f.read()
                took = time.monotonic() - t0
                self.assertEqual(cm.exception.errno, errno.EIO)
                self.assertLess(took, 2 + 1 + 1 + 2 + 3, "the read waited past its bound")
                proxy.up()
                with open(victim, "rb") as f:
                    got = f.read()
                self.assertEqual(sha256_file(victim), self.want[b"d1/f03.bin"][2])
                self.assertGreater(len(got), 0)
                self.assertGreater(stats(mnt)["fetch_errors"], 0)
            # One line per failed fetch, naming the shard's URL and the budget.
            self.assertIn(proxy.url + "/shards/", m.final_log())
            self.assertIn("retry budget", m.final_log())

    def test_replaced_shard_gives_eio_not_new_bytes(self):
        served = self.scratch("served")
        shutil.copytree(os.path.join(self.served, "shards"), os.path.join(served, "shards"))
        with rs.Nginx(served) as web:
            idx, _ = self.build_http(web.url)
            mnt = self.scratch("mnt")
            with Mount(idx, mnt, "chunk_size=64K,cache_size=64K"):
                # Same size, other bytes, new mtime: a new ETag.
                victim_shard = os.path.join(served, "shards", self.names[0])
                size = os.path.getsize(victim_shard)
                time.sleep(1.1)
                with open(victim_shard + ".new", "wb") as f:
                    f.write(os.urandom(size))
                os.rename(victim_shard + ".new", victim_shard)
                # d0 is in shard 0 (tar_into_shards is round-robin by name).
                with self.assertRaises(OSError) as cm:
                    with open(os.path.join(mnt, "d0", "f05.bin"), "rb") as f:
                        f.read()
                self.assertEqual(cm.exception.errno, errno.EIO)
                self.assertGreater(stats(mnt)["errors"]["precondition"], 0)
            # mount --check asks each remote shard for its size and ETag first.
            p = run_shardfs("mount", "-f", "--check", idx, mnt, check=1, timeout=60)
            self.assertIn(b"ETag", p.stderr)
            self.assertIn(self.names[0].encode(), p.stderr)


class S3Test(RemoteTestCase):
    def test_tree_over_s3_with_checked_signatures(self):
        with rs.S3Server() as s3:
            for n in self.names:
                s3.put("train/" + n, os.path.join(self.served, "shards", n))
            s3.put("train/README.txt", b"not a shard")
            env = dict(os.environ, AWS_ACCESS_KEY_ID=s3.access_key,
                       AWS_SECRET_ACCESS_KEY=s3.secret_key, AWS_REGION=s3.region,
                       AWS_ENDPOINT_URL_S3=s3.endpoint, SHARDFS_S3_ALLOW_HTTP="1",
                       AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
            env.pop("AWS_PROFILE", None)
            idx = os.path.join(self.scratch("idx"), "s3.idx")
            bad = dict(env, AWS_SECRET_ACCESS_KEY="wrong" + s3.secret_key)
            p = subprocess.run([SHARDFS, "index", "build", "--quiet", "--out", idx,
                                "s3://%s/train/" % s3.bucket], env=bad,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(b"denied", p.stderr)
            self.assertFalse(os.path.exists(idx))
            p = subprocess.run([SHARDFS, "index", "build", "--quiet", "--out", idx,
                                "s3://%s/train/" % s3.bucket], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            info = json_lines(run_shardfs("index", "info", "--json", idx, check=0).stdout)
            self.assertEqual([s["shard"] for s in info[1:]],
                             ["s3://%s/train/%s" % (s3.bucket, n) for n in self.names])
            mnt = self.scratch("mnt")
            # The daemon signs with the same environment.
            saved = dict(os.environ)
            os.environ.update(env)
            try:
                # s3rver listens on plain http: the daemon refuses it too
                # unless told that is fine.
                del os.environ["SHARDFS_S3_ALLOW_HTTP"]
                with self.assertRaises(MountError) as cm:
                    with Mount(idx, mnt, "chunk_size=64K"):
                        pass
                self.assertIn("SHARDFS_S3_ALLOW_HTTP=1", str(cm.exception))
                os.environ["SHARDFS_S3_ALLOW_HTTP"] = "1"
                with Mount(idx, mnt, "chunk_size=64K"):
                    self.assert_tree(mnt)
                    self.assertGreater(stats(mnt)["requests"], 0)
            finally:
                os.environ.clear()
                os.environ.update(saved)


class CacheTest(RemoteTestCase):
    def test_disk_cache_survives_remount_and_drops_corrupt_chunks(self):
        with rs.Nginx(self.served) as web, rs.FaultProxy(web.url) as proxy:
            idx, _ = self.build_http(proxy.url)
            mnt = self.scratch("mnt")
            cache = self.scratch("cache")
            opts = "chunk_size=64K,cache_dir=%s,cache_size=64M" % cache
            with Mount(idx, mnt, opts):
                self.assert_tree(mnt)
                first = stats(mnt)
            # With pushes on, every file is READ or pushed (or both, when the
            # program overtakes a push): READs alone never pass the tree.
            file_bytes = sum(e[1] for e in self.want.values() if e[0] == "file")
            self.assertLessEqual(first["bytes_delivered"] - first["bytes_pushed"], file_bytes)
            self.assertGreaterEqual(first["bytes_delivered"], file_bytes)
            self.assertGreater(first["cache_resident_chunks"], 0)
            files = os.path.join(cache, "shardfs-chunks-v3")  # The cache's own subdirectory.
            chunks = [n for n in os.listdir(files) if n.endswith(".chunk")]
            self.assertEqual(len(chunks), first["cache_resident_chunks"])
            # Flip one byte in the payload of one chunk file.
            victim = os.path.join(files, sorted(chunks)[0])
            with open(victim, "r+b") as f:
                f.seek(100)
                b = f.read(1)
                f.seek(100)
                f.write(bytes([b[0] ^ 0xFF]))
            proxy.reset_counters()
            with Mount(idx, mnt, opts):
                self.assert_tree(mnt)
                s = stats(mnt)
                self.assertEqual(s["cache_reused_at_open"], len(chunks))
                self.assertEqual(s["cache_corrupt_dropped"], 1)
                self.assertEqual(s["requests"], 1, "only the corrupt chunk is fetched again")
            self.assertEqual(proxy.requests, 1)

    def test_cached_chunks_are_spliced_from_the_chunk_files(self):
        """Issue 27: a READ that lies whole in a chunk the disk cache holds,
        its checksum checked once in this mount, is spliced from the chunk
        file (reads_from_chunk_files) instead of read into memory; the tree
        read through it is the source's, byte for byte, with no request sent.
        With splice=0 the same bytes come through a buffer."""
        with rs.Nginx(self.served) as web, rs.FaultProxy(web.url) as proxy:
            idx, _ = self.build_http(proxy.url)
            mnt = self.scratch("mnt")
            cache = self.scratch("cache")
            # No pushes: every file is a READ of its own.
            opts = "chunk_size=64K,cache_dir=%s,cache_size=64M,push_ahead=0,push_random=0" % cache
            with Mount(idx, mnt, opts):
                self.assert_tree(mnt)
            proxy.reset_counters()
            with Mount(idx, mnt, opts):
                self.assert_tree(mnt)
                s = stats(mnt)
                self.assertEqual(s["requests"], 0)
                # The first read of each chunk in this mount checks it (a
                # copy); most of the rest lie in a chunk already checked.
                self.assertGreater(s["reads_from_chunk_files"], 20, s)
            with Mount(idx, mnt, opts + ",splice=0"):
                self.assert_tree(mnt)
                s = stats(mnt)
                self.assertEqual(s["reads_from_chunk_files"], 0, s)
            self.assertEqual(proxy.requests, 0)

    def test_kill9_mid_fetch_leaves_no_torn_chunk(self):
        with rs.Nginx(self.served) as web, rs.FaultProxy(web.url) as proxy:
            idx, _ = self.build_http(proxy.url)
            mnt = self.scratch("mnt")
            cache = self.scratch("cache")
            # Pushes off: a daemon killed in the middle of storing a push into
            # the kernel's cache can leave that connection waiting for an
            # abort (a known limit, see the man page); chunks are the point
            # here. The dentry prefill stays on: it lists from a child process.
            opts = ("chunk_size=64K,cache_dir=%s,cache_size=64M,fetch_threads=4,"
                    "push_ahead=0,push_random=0" % cache)
            proxy.latency(0.05)
            m = Mount(idx, mnt, opts, check_exit=False)
            with m:
                reader = subprocess.Popen(["cat"] + [os.path.join(mnt, "d%d" % d, "f%02d.bin" % i)
                                                     for d in range(6) for i in range(14)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wait_until(lambda: proxy.requests >= 6, timeout=20)
                os.kill(m.pid, signal.SIGKILL)
                reader.wait(timeout=30)
            self.assertEqual(m.returncode, -signal.SIGKILL)
            proxy.latency(0)
            with Mount(idx, mnt, opts):
                self.assert_tree(mnt)
                s = stats(mnt)
                self.assertEqual(s["cache_corrupt_dropped"], 0)
            files = os.path.join(cache, "shardfs-chunks-v3")
            self.assertEqual([n for n in os.listdir(files) if n.startswith("tmp-")], [])

    def test_warm_drop_and_local_shards_behind_a_cache(self):
        with rs.Nginx(self.served) as web, rs.FaultProxy(web.url) as proxy:
            idx, _ = self.build_http(proxy.url)
            mnt = self.scratch("mnt")
            with Mount(idx, mnt, "chunk_size=64K,cache_size=64M"):
                out = run_shardfs("cache", "warm", mnt, "d2", "/d4/sub", check=0).stdout.decode()
                self.assertIn("warmed", out)
                warmed = stats(mnt)
                self.assertGreater(warmed["cache_resident_chunks"], 0)
                proxy.reset_counters()
                for rel in (b"d2/f07.bin", b"d4/sub/deep.txt"):
                    self.assertEqual(sha256_file(os.path.join(os.fsencode(mnt), rel)),
                                     self.want[rel][2])
                self.assertEqual(proxy.requests, 0, "warmed files were fetched again")
                run_shardfs("cache", "drop", mnt, check=0)
                self.assertEqual(stats(mnt)["cache_resident_chunks"], 0)
                p = run_shardfs("cache", "warm", mnt, "no/such/dir", check=1)
                self.assertIn(b"no/such/dir", p.stderr)
        # Local shards: -o cache_dir puts the same cache in front of them.
        local = os.path.join(self.scratch("idx"), "local.idx")
        build_index(self.shards, local)
        mnt = self.scratch("mnt")
        cache = self.scratch("cache")
        with Mount(local, mnt, "chunk_size=64K,cache_dir=%s,cache_size=16M" % cache):
            self.assert_tree(mnt)
            s = stats(mnt)
            self.assertGreater(s["bytes_fetched"], 0)
            self.assertEqual(s["requests"], 0)
        with Mount(local, mnt):
            p = run_shardfs("cache", "warm", mnt, check=1)
            self.assertIn(b"no chunk cache", p.stderr)
        p = run_shardfs("stats", self.tmp, check=1)
        self.assertIn(b"not a shardfs mount", p.stderr)

    def test_many_daemons_and_per_rank_fetches(self):
        with rs.Nginx(self.served) as web, rs.FaultProxy(web.url) as proxy:
            idx, _ = self.build_http(proxy.url)
            mnts = [self.scratch("mnt%d" % r) for r in range(3)]
            # Three daemons at once over one index: each shows the whole tree.
            with Mount(idx, mnts[0], "chunk_size=64K"), Mount(idx, mnts[1], "chunk_size=64K"), \
                    Mount(idx, mnts[2], "chunk_size=64K"):
                procs = [subprocess.Popen([sys.executable, "-c",
                                           "import sys,hashlib,os\n"
                                           "for d,_,fs in os.walk(sys.argv[1]):\n"
                                           "  for f in fs:\n"
                                           "    p=os.path.join(d,f)\n"
                                           "    if not os.path.islink(p): open(p,'rb').read()\n",
                                           m]) for m in mnts]
                for p in procs:
                    self.assertEqual(p.wait(timeout=120), 0)
                for m in mnts:
                    self.assert_tree(m)
            # Per rank: each fetches only the shards its samples are in (each
            # from a cold cache of its own: the node-local one holds them all
            # now), parts of at most shards/world + 2 of them, and every rank
            # reads as many samples.
            listed = tl.json_lines(run_shardfs("ls", "-R", "--json", idx, check=0).stdout)
            entry = {o["path"]: o for o in listed if o["type"] == "file"}
            n = len(tl.samples_of(entry))
            for r in range(3):
                proxy.reset_counters()
                mine = set()
                with Mount(idx, mnts[r], "chunk_size=64K,rank=%d,world=3,cache_dir=%s" % (
                        r, self.scratch("cold%d" % r))):
                    for dirpath, _, files in os.walk(mnts[r]):
                        for f in files:
                            p = os.path.join(dirpath, f)
                            if not os.path.islink(p):
                                with open(p, "rb") as fh:
                                    fh.read()
                                mine.add(os.fsencode(os.path.relpath(p, mnts[r])))
                self.assertEqual(len(tl.samples_of(mine)), n // 3, "rank %d" % r)
                paths = set(proxy.requests_per_path())
                self.assertEqual(paths, {"/shards/" + self.names[entry[p]["shard_id"]]
                                         for p in mine if entry[p]["size"] > 0}, "rank %d" % r)
                self.assertLessEqual(len(paths), len(self.names) // 3 + 2)

if __name__ == "__main__":
    main()
