#!/usr/bin/env python3
"""Never wrong bytes from a server that misbehaves.

Each test indexes a shard through remote_servers.RangeServer while it is
honest, then makes it misbehave the way real servers do, and reads through a
real FUSE mount: the read fails with EIO (never ENOENT, never the server's
other bytes) and the daemon's log names the shard.

  - a server that ignores If-Match and serves replaced bytes of the same size
    under a new ETag, or the old bytes under another ETag;
  - no ETag (refused and counted; accepted only with
    -o trust_responses_without_etag), a weak ETag;
  - a shard indexed without an ETag: another or no Last-Modified;
  - an https shard redirected to an http:// URL that serves other bytes;
  - a 404;
  - a shard marked bad is asked again (a HEAD) after its back-off, and only
    said to serve again when that answer matches the index.
"""

import errno
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers as rs  # noqa: E402
from shardfs_testlib import (Mount, ScratchTestCase, main, run_shardfs,  # noqa: E402
                             tar_into_shards)

SHARD = "/shards/trust-000.tar"
# Small chunks, no push-ahead: each read fetches only what it needs, after
# the server was told to misbehave.
OPTS = "chunk_size=64K,cache_size=4M,push_ahead=0,push_random=0,retry_budget=3s"


def stats_of(mnt):
    return json.loads(run_shardfs("stats", "--json", mnt, check=0, timeout=20).stdout)


class TrustTest(ScratchTestCase):
    PREFIX = "shardfs-trust-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        src = os.path.join(cls.tmp, "src")
        os.makedirs(os.path.join(src, "d"))
        cls.want = {}
        for i in range(3):
            data = bytes((i * 7 + j) % 251 for j in range(50000 + i))
            with open(os.path.join(src, "d", "f%d.bin" % i), "wb") as f:
                f.write(data)
            cls.want["f%d.bin" % i] = data
        out = os.path.join(cls.tmp, "shards")
        os.makedirs(out)
        shard = tar_into_shards(src, out, 1, prefix="trust")[0]
        with open(shard, "rb") as f:
            cls.shard_bytes = f.read()
        # What a replaced shard looks like: same size, other bytes.
        cls.replaced = bytes(255 - b for b in cls.shard_bytes)
        # Other bytes only between the first and last 64 KiB (a shard's
        # fingerprint), where d/f1.bin is: only the validator can tell.
        fp = 64 << 10
        cls.middle_replaced = (cls.shard_bytes[:fp] + cls.replaced[fp:-fp] +
                               cls.shard_bytes[-fp:])

    def serve_and_index(self, server, env=None, **put):
        """Puts the shard on `server` and indexes it through it (honest)."""
        server.put(SHARD, self.shard_bytes, **put)
        url = server.url + SHARD
        idx = os.path.join(self.scratch("idx"), "trust.idx")
        run_shardfs("index", "build", "--quiet", "--out", idx, url, check=0, env=env)
        return idx, url

    def read(self, mnt, name="f1.bin"):
        with open(os.path.join(mnt, "d", name), "rb") as f:
            return f.read()

    def assert_eio(self, mnt, name="f1.bin"):
        """The read fails with EIO: no byte of anything reaches the reader."""
        got = None
        with self.assertRaises(OSError) as cm:
            got = self.read(mnt, name)
        self.assertIsNone(got)
        self.assertEqual(cm.exception.errno, errno.EIO, cm.exception)

    def refused(self, want_stats=False, put=None, after=None, **misbehave):
        """Index honestly, misbehave, mount, read: EIO, and the log names the
        shard. Returns (mount log, stats --json while mounted, if wanted)."""
        with rs.RangeServer() as server:
            idx, url = self.serve_and_index(server, **(put or {}))
            server.misbehave(SHARD, **misbehave)
            mnt = self.scratch("mnt")
            stats = None
            with Mount(idx, mnt, OPTS) as m:
                self.assert_eio(mnt)
                self.assert_eio(mnt, "f0.bin")  # Asked again: still refused.
                if want_stats:
                    stats = stats_of(mnt)
                if after:
                    after(server, mnt)
            log = m.final_log()
            self.assertIn(url, log)
            self.assertIn("EIO", log)
            # The chunks were asked for after the server changed.
            self.assertTrue(any(r[1] == SHARD and r[2] for r in server.requests))
            return log, stats

    def test_an_honest_server_serves_and_if_match_is_sent(self):
        with rs.RangeServer() as server:
            idx, _ = self.serve_and_index(server)
            mnt = self.scratch("mnt")
            with Mount(idx, mnt, OPTS):
                for name, data in self.want.items():
                    self.assertEqual(self.read(mnt, name), data)
            gets = [r for r in server.requests if r[0] == "GET" and r[2]]
            self.assertTrue(gets)
            self.assertTrue(all(r[3] == server.etag(SHARD) for r in gets), gets)

    def test_if_match_ignored_and_replaced_bytes_under_a_new_etag(self):
        log, _ = self.refused(body=self.replaced, etag='"replaced"')
        self.assertIn('ETag "replaced"', log)

    def test_the_old_bytes_under_another_etag(self):
        log, _ = self.refused(etag='"another"')
        self.assertIn("the object changed on the server since it was indexed", log)

    def test_no_etag_is_refused_and_counted_unless_trusted(self):
        log, stats = self.refused(True, body=self.replaced, etag=None)
        self.assertIn("has no ETag", log)
        self.assertGreater(stats["responses_unverified"], 0)
        # The user may choose to trust such a server: the same answers
        # (without the replaced bytes) are then served, and still counted.
        with rs.RangeServer() as server:
            idx, _ = self.serve_and_index(server)
            server.misbehave(SHARD, etag=None)
            mnt = self.scratch("mnt")
            with Mount(idx, mnt, OPTS + ",trust_responses_without_etag"):
                self.assertEqual(self.read(mnt), self.want["f1.bin"])
                self.assertGreater(stats_of(mnt)["responses_unverified"], 0)

    def test_a_weak_etag_never_matches(self):
        log, _ = self.refused(put={"etag": '"v1"'}, etag='W/"v1"')
        self.assertIn("weak ETag", log)

    def test_a_weak_etag_at_build_is_not_indexed(self):
        # Indexed under a weak ETag, every response would be refused: the
        # build keeps none, says so, and the mount holds the shard to its
        # Last-Modified instead.
        with rs.RangeServer() as server:
            server.put(SHARD, self.shard_bytes, etag='W/"v1"')
            url = server.url + SHARD
            idx = os.path.join(self.scratch("idx"), "trust.idx")
            built = run_shardfs("index", "build", "--quiet", "--out", idx, url, check=0)
            self.assertIn(b"is weak; indexed by its Last-Modified", built.stderr)
            lines = run_shardfs("index", "info", "--json", idx, check=0).stdout.splitlines()
            shards = [json.loads(l) for l in lines[1:]]
            self.assertEqual([s["etag"] for s in shards], [""])
            self.assertNotEqual(shards[0]["mtime_ns"], 0)
            mnt = self.scratch("mnt")
            with Mount(idx, mnt, OPTS):
                self.assertEqual(self.read(mnt), self.want["f1.bin"])
            server.misbehave(SHARD, body=self.middle_replaced,
                             last_modified="Wed, 01 Jan 2020 00:00:00 GMT")
            # A cold cache of its own: the node-local cache holds the bytes
            # as indexed (fetched while the server still had them), which it
            # would serve; here the server's answer is what is judged.
            with Mount(idx, mnt, OPTS + ",cache_dir=" + self.scratch("cold")):
                self.assert_eio(mnt)

    def test_without_an_etag_last_modified_is_held_to(self):
        log, _ = self.refused(put={"etag": None}, body=self.middle_replaced,
                              last_modified="Wed, 01 Jan 2020 00:00:00 GMT")
        self.assertIn("Last-Modified Wed, 01 Jan 2020", log)
        log, _ = self.refused(put={"etag": None}, body=self.middle_replaced, last_modified=None)
        self.assertIn("has no Last-Modified", log)

    def test_https_is_never_redirected_to_http(self):
        with rs.RangeServer(tls=True, cert_dir=self.scratch("cert")) as tls, \
                rs.RangeServer() as plain:
            env = dict(os.environ, CURL_CA_BUNDLE=tls.ca_file)
            idx, url = self.serve_and_index(tls, env=env)
            # Plain http, which anyone on the path can answer: the indexed
            # ETag and size, other bytes.
            plain.put(SHARD, self.replaced, etag=tls.etag(SHARD))
            tls.misbehave(SHARD, location=plain.url + SHARD)
            mnt = self.scratch("mnt")
            with Mount(idx, mnt, OPTS + ",ca_file=" + tls.ca_file) as m:
                self.assert_eio(mnt)
            log = m.final_log()
            self.assertIn(url, log)
            self.assertIn("refused to follow the redirect", log)
            self.assertIn(plain.url + SHARD, log)
            self.assertEqual(plain.requests, [])

    def test_a_404_is_eio_not_enoent(self):
        def still_listed(server, mnt):
            self.assertEqual(os.stat(os.path.join(mnt, "d", "f1.bin")).st_size,
                             len(self.want["f1.bin"]))
        log, _ = self.refused(status=404, after=still_listed)
        self.assertIn("404", log)

    def test_a_bad_shard_is_really_checked_before_it_serves_again(self):
        with rs.RangeServer() as server:
            idx, url = self.serve_and_index(server)
            # Replaced on the server, which honours If-Match: 412s.
            original_etag = server.etag(SHARD)
            server.put(SHARD, self.replaced)
            mnt = self.scratch("mnt")
            with Mount(idx, mnt, OPTS) as m:
                self.assert_eio(mnt)
                time.sleep(1.2)  # The first back-off (1 s) has passed.
                server.requests.clear()
                self.assert_eio(mnt)
                self.assertIn(("HEAD", SHARD, None, None), server.requests)
                self.assertNotIn("checked again and serving", m.stderr())
                # Put back as it was indexed: serves again after the next
                # back-off (2 s), said so once really checked.
                server.put(SHARD, self.shard_bytes, etag=original_etag)
                time.sleep(2.2)
                self.assertEqual(self.read(mnt), self.want["f1.bin"])
                self.assertIn("checked again and serving", m.stderr())
            self.assertIn(url, m.final_log())


if __name__ == "__main__":
    main()
