#!/usr/bin/env python3
"""Secrets in shard URLs and servers that never stop.

What each test shows:
  - a user name or password in a shard URL is refused at index build, with
    the ways credentials are given instead, without printing it and without
    writing an index;
  - a presigned-style URL (its signature in the query) is indexed and
    mounted, and the signature appears in no output: index info, ls, stat,
    stats --shards (text and JSON), the daemon's log, a failed fetch's
    error at build and at read time;
  - an S3 endpoint over plain http is refused without SHARDFS_S3_ALLOW_HTTP=1;
  - an S3 listing whose continuation tokens cycle fails within seconds,
    naming the bucket and prefix; one that never ends stops at
    --max-list-pages;
  - a download without Content-Length that never ends stops at
    --max-shard-size, naming the URL (redacted) and the limit, and leaves no
    temporary file.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile_servers as hs  # noqa: E402
import remote_servers as rs  # noqa: E402
from shardfs_testlib import (SHARDFS, Mount, ScratchTestCase, json_lines, main,  # noqa: E402
                             run_shardfs, tar_into_shards)

SECRET = "SECRETsig0123456789abcdef"
# What a presigned URL's query looks like; nginx serves the file and ignores it.
PRESIGNED = ("?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20260101%2F"
             "us-east-1%2Fs3%2Faws4_request&X-Amz-Expires=3600&X-Amz-Signature=" + SECRET)


def shardfs_env(**extra):
    """The environment of a shardfs run that reads no AWS file or profile
    of the machine, with `extra` set (None removes a variable)."""
    env = dict(os.environ, AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                 "SHARDFS_S3_ALLOW_HTTP"):
        env.pop(name, None)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def build(out, *args, env=None, timeout=60):
    """`shardfs index build --quiet --out OUT ARGS...`: (exit code, stderr, seconds)."""
    t0 = time.monotonic()
    p = subprocess.run([SHARDFS, "index", "build", "--quiet", "--out", out, *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=timeout)
    return p.returncode, p.stderr.decode(errors="replace"), time.monotonic() - t0


class SecretsTestCase(ScratchTestCase):
    PREFIX = "shardfs-secrets-"

    def assert_no_secret(self, label, text):
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        self.assertNotIn(SECRET, text, "%s prints the URL's signature:\n%s" % (label, text))
        self.assertNotIn("X-Amz-Signature", text, label)


class UserinfoTest(SecretsTestCase):
    def test_password_in_a_url_is_refused_and_never_written(self):
        idx = os.path.join(self.scratch("idx"), "pw.idx")
        for url in ("http://alice:%s@127.0.0.1:9/s.tar" % SECRET,
                    "s3://AKID:%s@bucket/s.tar" % SECRET):
            code, err, _ = build(idx, url, env=shardfs_env())
            self.assertEqual(code, 1, err)
            self.assert_no_secret("index build " + url, err)
            self.assertIn("<redacted>@", err)
            self.assertIn("user name or password", err)
            self.assertIn("AWS_ACCESS_KEY_ID", err)
            self.assertFalse(os.path.exists(idx))
            self.assertEqual(os.listdir(os.path.dirname(idx)), [])
        self.assertIn("presigned URL", build(idx, "https://u:%s@h/s.tar" % SECRET)[1])
        # The same through a list file and its prefix.
        lst = os.path.join(self.scratch("list"), "names.txt")
        with open(lst, "w") as f:
            f.write("a.tar\n")
        code, err, _ = build(idx, "--from-list", lst, "--url-prefix",
                             "http://alice:%s@127.0.0.1:9/d" % SECRET, env=shardfs_env())
        self.assertEqual(code, 1, err)
        self.assert_no_secret("index build --url-prefix", err)
        self.assertFalse(os.path.exists(idx))


class PresignedTest(SecretsTestCase):
    def test_signature_in_the_query_is_used_but_never_printed(self):
        served = self.scratch("served")
        src = self.scratch("src")
        for d in ("a", "b"):
            os.makedirs(os.path.join(src, d))
            for i in range(3):
                with open(os.path.join(src, d, "f%d.bin" % i), "wb") as f:
                    f.write(os.urandom(20000 + i))
        shards = tar_into_shards(src, served, 2)
        names = [os.path.basename(s) for s in shards]
        idx = os.path.join(self.scratch("idx"), "presigned.idx")
        with rs.Nginx(served) as web:
            urls = ["%s/%s%s" % (web.url, n, PRESIGNED) for n in names]
            # A fetch that fails at build: the error names the URL, redacted.
            code, err, _ = build(idx, *urls, "%s/missing.tar%s" % (web.url, PRESIGNED))
            self.assertEqual(code, 1, err)
            self.assertIn("missing.tar?<redacted>", err)
            self.assert_no_secret("index build of a missing shard", err)

            code, err, _ = build(idx, *urls)
            self.assertEqual(code, 0, err)
            self.assert_no_secret("index build", err)

            info = run_shardfs("index", "info", "--json", idx, check=0).stdout
            self.assert_no_secret("index info --json", info)
            shown = [s["shard"] for s in json_lines(info)[1:]]
            self.assertEqual(shown, ["%s/%s?<redacted>" % (web.url, n) for n in names])
            self.assertEqual([s["stored_path"] for s in json_lines(info)[1:]], shown)
            self.assert_no_secret("index info", run_shardfs("index", "info", idx, check=0).stdout)
            ls = run_shardfs("ls", "-R", "--json", idx, check=0).stdout
            self.assert_no_secret("ls -R --json", ls)
            self.assertIn("?<redacted>", ls.decode())
            for extra in ((), ("--json",)):
                out = run_shardfs("stat", *extra, idx, "a/f0.bin", check=0).stdout
                self.assert_no_secret("stat %s" % " ".join(extra), out)
                self.assertIn("?<redacted>", out.decode())

            mnt = self.scratch("mnt")
            with Mount(idx, mnt, "chunk_size=64K") as m:
                with open(os.path.join(src, "a", "f0.bin"), "rb") as f:
                    want = f.read()
                with open(os.path.join(mnt, "a", "f0.bin"), "rb") as f:
                    self.assertEqual(f.read(), want)
                # The other shard is gone from the server: its reads fail, and
                # the daemon logs the failed fetch.
                gone = os.path.join(served, names[1])
                os.rename(gone, gone + ".away")
                try:
                    # (How a 404 shows, at open or at read, is not this test's.)
                    with self.assertRaises(OSError):
                        with open(os.path.join(mnt, "b", "f1.bin"), "rb") as f:
                            f.read()
                finally:
                    os.rename(gone + ".away", gone)
                text = run_shardfs("stats", "--shards", mnt, check=0).stdout
                self.assert_no_secret("stats --shards", text)
                self.assertIn("%s?<redacted>" % names[0], text.decode())
                self.assertIn("%s?<redacted>" % names[1], text.decode())
                per = json.loads(run_shardfs("stats", "--json", "--shards", mnt,
                                             check=0).stdout)["shards"]
                self.assertEqual([s["location"] for s in per], shown)
                self.assert_no_secret("stats --json --shards", json.dumps(per))
            # Fetching needs the query: every request carried it, at build
            # and in the mount (nginx logs the target as sent).
            with open(os.path.join(web.dir, "access.log")) as f:
                targets = [line.split("\t")[1] for line in f.read().splitlines()]
            first = [t for t in targets if t.startswith("/" + names[0])]
            self.assertGreaterEqual(len(first), 2, targets)
            self.assertEqual(set(first), {"/" + names[0] + PRESIGNED}, targets)
            log = m.final_log()
            self.assertIn("%s?<redacted>" % names[1], log)  # The failed fetch's line.
            self.assert_no_secret("the daemon's log", log)


class S3HttpEndpointTest(SecretsTestCase):
    def test_plain_http_endpoint_needs_consent(self):
        idx = os.path.join(self.scratch("idx"), "s3.idx")
        with hs.EndlessListing("fresh") as srv:
            code, err, _ = build(idx, "s3://bkt/train/",
                                 env=shardfs_env(AWS_ENDPOINT_URL_S3=srv.url))
            self.assertEqual(code, 1, err)
            self.assertIn("AWS_ENDPOINT_URL_S3 = %s" % srv.url, err)
            self.assertIn("clear text", err)
            self.assertIn("SHARDFS_S3_ALLOW_HTTP=1", err)
            self.assertEqual(srv.requests, 0)
            self.assertFalse(os.path.exists(idx))
            # With consent the same build reaches the server (and stops at
            # the page bound, see ListingTest).
            code, err, _ = build(idx, "--max-list-pages", "2", "s3://bkt/train/",
                                 env=shardfs_env(AWS_ENDPOINT_URL_S3=srv.url,
                                                 SHARDFS_S3_ALLOW_HTTP="1"))
            self.assertEqual(code, 1, err)
            self.assertEqual(srv.requests, 2)


class ListingTest(SecretsTestCase):
    def env(self, srv):
        return shardfs_env(AWS_ENDPOINT_URL_S3=srv.url, SHARDFS_S3_ALLOW_HTTP="1")

    def test_repeated_continuation_token_fails_fast(self):
        idx = os.path.join(self.scratch("idx"), "loop.idx")
        with hs.EndlessListing("cycle", max_requests=2000) as srv:
            code, err, secs = build(idx, "s3://bkt/train/", env=self.env(srv))
        self.assertEqual(code, 1, err)
        self.assertIn("s3://bkt/train/: page 4: the server sent again the continuation token "
                      "of page 1", err)
        self.assertEqual(srv.requests, 4)
        self.assertLess(secs, 10)
        self.assertFalse(os.path.exists(idx))

    def test_endless_listing_stops_at_max_list_pages(self):
        idx = os.path.join(self.scratch("idx"), "endless.idx")
        with hs.EndlessListing("fresh", max_requests=2000) as srv:
            code, err, _ = build(idx, "--max-list-pages", "25", "s3://bkt/train/",
                                 env=self.env(srv))
        self.assertEqual(code, 1, err)
        self.assertIn("s3://bkt/train/: the listing goes on past 25 pages (25 objects so far)",
                      err)
        self.assertIn("--max-list-pages", err)
        self.assertEqual(srv.requests, 25)
        self.assertFalse(os.path.exists(idx))
        p = run_shardfs("index", "build", "--out", idx, "--max-list-pages", "0", "s3://b/p/")
        self.assertEqual(p.returncode, 2, p.stderr)


class DownloadCapTest(SecretsTestCase):
    def test_body_without_length_stops_at_max_shard_size(self):
        tmp = self.scratch("tmpdir")
        idx = os.path.join(self.scratch("idx"), "cap.idx")
        cap = 1 << 20
        with hs.EndlessBody(limit_bytes=64 * cap, max_seconds=60) as srv:
            url = "%s/train-000000.tar%s" % (srv.url, PRESIGNED)
            code, err, secs = build(idx, "--max-shard-size", "1M", url,
                                    env=dict(os.environ, TMPDIR=tmp))
        self.assertEqual(code, 1, err)
        self.assertIn("shard %s/train-000000.tar?<redacted>" % srv.url, err)
        self.assertIn("longer than the 1.0 MiB (1048576 bytes) a remote shard may have; "
                      "--max-shard-size SIZE raises the limit", err)
        self.assert_no_secret("index build of an endless shard", err)
        self.assertEqual(srv.requests, 1)  # A limit is not retried.
        self.assertLess(srv.bytes_sent, 32 * cap)  # Stopped near the cap, not by the server.
        self.assertLess(secs, 20)
        self.assertEqual(os.listdir(tmp), [])  # The partial copy went with its descriptor.
        self.assertFalse(os.path.exists(idx))
        for bad in ("0", "1Q", "-5"):
            p = run_shardfs("index", "build", "--out", idx, "--max-shard-size", bad, url)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(b"--max-shard-size", p.stderr)


if __name__ == "__main__":
    main()
