#!/usr/bin/env python3
"""Indexes by URL: an index bundle (`shardfs index bundle`, or `tar -C INDEX
-cf X .`) served by nginx over https and by s3rver (SigV4 checked), fetched
once into cache_dir/shardfs-index-v1, revalidated with If-None-Match on each
use, and refused when it is not a clean index.

What each test shows:
  - https and s3://: ls, index info and a FUSE mount of the URL give the tree
    tar'd into the shards; the first use GETs the bundle, the second sends one
    conditional HEAD (304) and reuses the same copy;
  - a replaced bundle (new ETag) gives a new copy, while a mount keeps the
    old one open; the old copy is removed by the first use after it is let go;
  - the server unreachable: the cached copy is used, with a warning naming
    the URL and the ETag;
  - a manifest by URL: its partitions are bundles next to it, fetched from
    the manifest's URL, each revalidated like the manifest;
  - a presigned URL's query is never printed or stored (nor in the mount
    table);
  - four processes using one URL at once with one cache: one GET, three
    conditional HEADs, one copy;
  - a server that sends no ETag: the bundle is fetched on every use, never
    revalidated, and the copies it replaces are removed;
  - refused, with a message naming the URL, and nothing left in the cache but
    checked copies: a member '../x', a symlink member, a tar of files that are
    not an index, a truncated bundle, a body cut off for good, an index whose
    shard paths are relative to its own directory;
  - a cache directory writable by others, owned by another user, or a
    symlink is refused; index add and view create refuse a URL.
"""

import functools
import http.server
import io
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers as rs  # noqa: E402
from shardfs_testlib import (SHARDFS, Mount, MountError, ScratchTestCase, json_lines,  # noqa: E402
                             main, run_shardfs, tar_into_shards, walk_reference)

SUBDIR = "shardfs-index-v1"


def make_tree(root, tag=b""):
    for d in range(4):
        base = os.path.join(root, "d%d" % d)
        os.makedirs(base)
        for i in range(5):
            with open(os.path.join(base, "f%d.txt" % i), "wb") as f:
                f.write(b"%s d%d f%d\n" % (tag, d, i) * (i + 1))


def digest(root):
    return {rel: (e.type, e.sha256) for rel, e in walk_reference(root).items() if rel}


def cache_entries(cache):
    """{entry: sorted names} of the index cache."""
    top = os.path.join(cache, SUBDIR)
    out = {}
    for name in sorted(os.listdir(top)):
        p = os.path.join(top, name)
        if os.path.isdir(p):
            out[name] = sorted(os.listdir(p))
    return out


def copies(cache):
    return sorted(n for names in cache_entries(cache).values() for n in names
                  if n.startswith("copy-") and not n.endswith(".lock"))


def leftovers(cache):
    """Anything in the cache that is not a checked copy's or the entry's own."""
    bad = []
    for names in cache_entries(cache).values():
        for n in names:
            if n in ("lock", "state") or n.startswith("copy-"):
                continue
            bad.append(n)
    return bad


def private_dir(path):
    os.makedirs(path, mode=0o700)
    os.chmod(path, 0o700)
    return path


class IndexUrlCase(ScratchTestCase):
    PREFIX = "shardfs-index-url-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        cls.src2 = os.path.join(cls.tmp, "src2")
        cls.served = os.path.join(cls.tmp, "served")
        os.makedirs(os.path.join(cls.served, "shards"))
        os.makedirs(os.path.join(cls.served, "shards2"))
        os.makedirs(os.path.join(cls.served, "idx"))
        make_tree(cls.src)
        make_tree(cls.src2, b"second")
        cls.shards = tar_into_shards(cls.src, os.path.join(cls.served, "shards"), 2)
        cls.shards2 = tar_into_shards(cls.src2, os.path.join(cls.served, "shards2"), 2)
        cls.want = digest(cls.src)
        cls.want2 = digest(cls.src2)

    def build_remote(self, base_url, sub, env):
        """An index of the shards under `sub`/ by their URLs, bundled."""
        lst = os.path.join(self.scratch("list"), "list")
        names = sorted(os.listdir(os.path.join(self.served, sub)))
        with open(lst, "w") as f:
            f.write("".join("%s/%s\n" % (sub, n) for n in names))
        idx = os.path.join(self.scratch("idx"), "remote.idx")
        run_shardfs("index", "build", "--quiet", "--out", idx, "--from-list", lst,
                    "--url-prefix", base_url, env=env, check=0)
        bundle = os.path.join(self.scratch("bundle"), "index.tar")
        run_shardfs("index", "bundle", idx, bundle, check=0)
        return bundle

    def publish(self, bundle, name="index.tar"):
        dst = os.path.join(self.served, "idx", name)
        shutil.copyfile(bundle, dst + ".new")
        os.rename(dst + ".new", dst)

    def assert_tree(self, mnt, want):
        self.assertEqual(digest(mnt), want)


class HttpsTest(IndexUrlCase):
    def test_https_fetch_reuse_replace_and_offline(self):
        with rs.Nginx(self.served, tls=True) as web:
            env = dict(os.environ, SSL_CERT_FILE=web.ca_file, CURL_CA_BUNDLE=web.ca_file)
            self.publish(self.build_remote(web.url, "shards", env))
            url = web.url + "/idx/index.tar"
            cache = private_dir(os.path.join(self.scratch("c"), "cache"))

            def index_requests():
                return [(m, s) for m, p, s, _, _ in web.access_entries() if p == "/idx/index.tar"]

            p = run_shardfs("ls", "-R", "--json", "--cache-dir", cache, url, env=env, check=0)
            paths = sorted(o["path"] for o in json_lines(p.stdout))
            self.assertEqual(paths, sorted(self.want))
            self.assertEqual(index_requests(), [("GET", 200)])
            first = copies(cache)
            self.assertEqual(len(first), 1, cache_entries(cache))
            # Second use: one conditional HEAD, answered 304; the same copy.
            run_shardfs("index", "info", "--cache-dir", cache, url, env=env, check=0)
            self.assertEqual(index_requests(), [("GET", 200), ("HEAD", 304)])
            self.assertEqual(copies(cache), first)
            self.assertEqual(leftovers(cache), [])
            # No secret and no query in what is stored: the state names the URL.
            with open(os.path.join(cache, SUBDIR, list(cache_entries(cache))[0], "state")) as f:
                state = f.read()
            self.assertIn("url " + url, state)
            self.assertIn("etag \"", state)

            mnt = self.scratch("mnt")
            opts = "cache_dir=%s,ca_file=%s,chunk_size=64K" % (cache, web.ca_file)
            with Mount(url, mnt, opts):
                self.assert_tree(mnt, self.want)
                # Replaced on the server while the mount holds its copy: a new
                # ETag, a new copy; the mount's stays.
                time.sleep(1.1)  # nginx's ETag is mtime-size.
                self.publish(self.build_remote(web.url, "shards2", env))
                p = run_shardfs("ls", "-R", "--json", "--cache-dir", cache, url, env=env,
                                check=0)
                self.assertEqual(sorted(o["path"] for o in json_lines(p.stdout)),
                                 sorted(self.want2))
                now = copies(cache)
                self.assertEqual(len(now), 2, now)
                self.assert_tree(mnt, self.want)
            # Let go: the next use removes the old copy.
            run_shardfs("ls", "--cache-dir", cache, url, env=env, check=0)
            self.assertEqual(len(copies(cache)), 1)
            self.assertNotIn(first[0], copies(cache))
            self.assertEqual(leftovers(cache), [])

        # The server is gone: the checked copy is used, with a warning.
        p = run_shardfs("ls", "--cache-dir", cache, url, env=env, check=0, timeout=60)
        self.assertIn(b"could not be reached", p.stderr)
        self.assertIn(url.encode(), p.stderr)
        self.assertIn(b"ETag \"", p.stderr)
        self.assertEqual([line.split()[-1] for line in p.stdout.splitlines()],
                         [b"d0", b"d1", b"d2", b"d3"])

    def test_https_needs_the_ca(self):
        with rs.Nginx(self.served, tls=True) as web:
            env = dict(os.environ, SSL_CERT_FILE=web.ca_file, CURL_CA_BUNDLE=web.ca_file)
            self.publish(self.build_remote(web.url, "shards", env), "ca.tar")
            cache = private_dir(os.path.join(self.scratch("c"), "cache"))
            bare = dict(os.environ, SSL_CERT_FILE="", CURL_CA_BUNDLE="")
            p = run_shardfs("ls", "--cache-dir", cache, web.url + "/idx/ca.tar", env=bare,
                            check=1)
            self.assertIn((web.url + "/idx/ca.tar").encode(), p.stderr)
            self.assertEqual(copies(cache), [])


class ManifestTest(IndexUrlCase):
    def test_manifest_by_url_with_bundled_partitions(self):
        with rs.Nginx(self.served, tls=True) as web:
            env = dict(os.environ, SSL_CERT_FILE=web.ca_file, CURL_CA_BUNDLE=web.ca_file)
            stage = self.scratch("stage")
            parts = []
            for k, shard in enumerate(self.shards):
                part = os.path.join(stage, "p%d.tar" % k)  # A directory so named: the ref.
                run_shardfs("index", "build", "--quiet", "--out", part,
                            web.url + "/shards/" + os.path.basename(shard), env=env, check=0)
                run_shardfs("index", "bundle", part,
                            os.path.join(self.served, "idx", "p%d.tar" % k), check=0)
                parts.append(part)
            man = os.path.join(stage, "ds.manifest")
            run_shardfs("index", "manifest", "--out", man, *parts, check=0)
            shutil.copyfile(man, os.path.join(self.served, "idx", "ds.manifest"))
            url = web.url + "/idx/ds.manifest"
            cache = private_dir(os.path.join(self.scratch("c"), "cache"))

            def idx_requests():
                return sorted((m, p, s) for m, p, s, _, _ in web.access_entries()
                              if p.startswith("/idx/"))

            p = run_shardfs("ls", "-R", "--json", "--cache-dir", cache, url, env=env, check=0)
            self.assertEqual(sorted(o["path"] for o in json_lines(p.stdout)), sorted(self.want))
            self.assertEqual(idx_requests(), [("GET", "/idx/ds.manifest", 200),
                                              ("GET", "/idx/p0.tar", 200),
                                              ("GET", "/idx/p1.tar", 200)])
            self.assertEqual(len(copies(cache)), 3)
            mnt = self.scratch("mnt")
            with Mount(url, mnt, "cache_dir=%s,ca_file=%s,chunk_size=64K" % (cache, web.ca_file)):
                self.assert_tree(mnt, self.want)
            heads = [r for r in idx_requests() if r[0] == "HEAD"]
            self.assertEqual(heads, [("HEAD", "/idx/ds.manifest", 304),
                                     ("HEAD", "/idx/p0.tar", 304),
                                     ("HEAD", "/idx/p1.tar", 304)])
            self.assertEqual(len(copies(cache)), 3)
            self.assertEqual(leftovers(cache), [])


class RefusalTest(IndexUrlCase):
    def serve_tar(self, name, members):
        """A tar of (name, bytes or ('symlink', target)) at /idx/NAME."""
        path = os.path.join(self.served, "idx", name)
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
            for n, data in members:
                info = tarfile.TarInfo(n)
                if isinstance(data, tuple):
                    info.type = tarfile.SYMTYPE
                    info.linkname = data[1]
                    t.addfile(info)
                else:
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        return path

    def test_bad_bundles_are_refused_and_leave_nothing(self):
        with rs.Nginx(self.served) as web, rs.FaultProxy(web.url) as proxy:
            good = self.build_remote(web.url, "shards", None)
            with tarfile.open(good) as t:
                real = [(m.name, t.extractfile(m).read()) for m in t.getmembers()]
            cases = {
                "dotdot.tar": (real + [("../evil", b"x")], b"'../evil'"),
                "slash.tar": ([("./sub/CURRENT", b"x")] + real, b"not a plain file name"),
                "symlink.tar": (real + [("LOG", ("symlink", "/etc/passwd"))],
                                b"a symbolic link"),
                "notindex.tar": ([("CURRENT", b"MANIFEST-000001\n"), ("a.txt", b"hello")],
                                 b"not a shardfs index"),
                "twice.tar": (real + [real[0]], b"appears twice"),
            }
            cache = private_dir(os.path.join(self.scratch("c"), "cache"))
            for name, (members, why) in cases.items():
                self.serve_tar(name, members)
                url = proxy.url + "/idx/" + name
                p = run_shardfs("ls", "--cache-dir", cache, url, check=1)
                self.assertIn(url.encode(), p.stderr, name)
                self.assertIn(why, p.stderr, (name, p.stderr))
            # A truncated bundle.
            cut = os.path.join(self.served, "idx", "cut.tar")
            with open(good, "rb") as f:
                data = f.read()
            with open(cut, "wb") as f:
                f.write(data[:len(data) // 2 + 100])
            p = run_shardfs("ls", "--cache-dir", cache, proxy.url + "/idx/cut.tar", check=1)
            self.assertIn(b"/idx/cut.tar", p.stderr)
            # A body cut off mid-way, and every resume refused: the fetch
            # gives up within the mount's retry budget.
            shutil.copyfile(good, os.path.join(self.served, "idx", "good.tar"))
            proxy.reset_next(1, after_bytes=4000)
            proxy.reset_next(1000)
            mnt = self.scratch("mnt")
            with self.assertRaises(MountError) as cm:
                with Mount(proxy.url + "/idx/good.tar", mnt,
                           "cache_dir=%s,retry_budget=2s,connect_timeout=1s" % cache):
                    pass
            self.assertIn(proxy.url + "/idx/good.tar", str(cm.exception))
            self.assertIn("gave up", str(cm.exception))
            proxy.clear_faults()
            self.assertEqual(copies(cache), [])
            self.assertEqual(leftovers(cache), [])
            # Shards stored relative to the index's own directory: a copy
            # in the cache has no such directory.
            local = os.path.join(self.scratch("local"), "ds")
            os.makedirs(os.path.join(local, "shards"))
            shutil.copy(self.shards[0], os.path.join(local, "shards"))
            run_shardfs("index", "build", "--quiet", "--out", os.path.join(local, "idx"),
                        os.path.join(local, "shards", os.path.basename(self.shards[0])),
                        check=0)
            run_shardfs("index", "bundle", os.path.join(local, "idx"),
                        os.path.join(self.served, "idx", "relative.tar"), check=0)
            p = run_shardfs("ls", "--cache-dir", cache, proxy.url + "/idx/relative.tar", check=1)
            self.assertIn(b"relative to the index's own directory", p.stderr)
            self.assertEqual(copies(cache), [])
            self.assertEqual(leftovers(cache), [])
            # The good one is accepted.
            run_shardfs("ls", "--cache-dir", cache, proxy.url + "/idx/good.tar", check=0)
            self.assertEqual(len(copies(cache)), 1)
            # Writers refuse a URL.
            for argv in (["index", "add", proxy.url + "/idx/good.tar", self.shards[1]],
                         ["view", "create", proxy.url + "/idx/good.tar", "v"]):
                p = run_shardfs(*argv, check=1)
                self.assertIn(b"read-only", p.stderr, argv)

    def test_unsafe_cache_dirs_are_refused(self):
        with rs.Nginx(self.served) as web:
            self.publish(self.build_remote(web.url, "shards", None), "safe.tar")
            url = web.url + "/idx/safe.tar"
            base = self.scratch("c")
            open_dir = os.path.join(base, "open")
            os.makedirs(open_dir)
            os.chmod(open_dir, 0o777)
            p = run_shardfs("ls", "--cache-dir", open_dir, url, check=1)
            self.assertIn(b"writable by others", p.stderr)
            theirs = private_dir(os.path.join(base, "theirs"))
            os.chown(theirs, 65534, 65534)
            p = run_shardfs("ls", "--cache-dir", theirs, url, check=1)
            self.assertIn(b"owned by", p.stderr)
            real = private_dir(os.path.join(base, "real"))
            link = os.path.join(base, "link")
            os.symlink(real, link)
            p = run_shardfs("ls", "--cache-dir", link, url, check=1)
            self.assertIn(b"symbolic link", p.stderr)
            mnt = self.scratch("mnt")
            with self.assertRaises(MountError) as cm:
                with Mount(url, mnt, "cache_dir=" + open_dir):
                    pass
            self.assertIn("writable by others", str(cm.exception))


class ConcurrentTest(IndexUrlCase):
    def test_four_processes_share_one_fetch(self):
        with rs.Nginx(self.served) as web:
            self.publish(self.build_remote(web.url, "shards", None), "shared.tar")
            url = web.url + "/idx/shared.tar"
            cache = private_dir(os.path.join(self.scratch("c"), "cache"))
            procs = [subprocess.Popen([SHARDFS, "ls", "-R", "--cache-dir", cache, url],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for _ in range(4)]
            outs = [p.communicate(timeout=120) for p in procs]
            for p, (out, err) in zip(procs, outs):
                self.assertEqual(p.returncode, 0, err)
                self.assertEqual(out, outs[0][0])
            got = sorted((m, s) for m, p, s, _, _ in web.access_entries()
                         if p == "/idx/shared.tar")
            self.assertEqual(got, [("GET", 200)] + [("HEAD", 304)] * 3)
            self.assertEqual(len(copies(cache)), 1)
            self.assertEqual(leftovers(cache), [])


class SecretTest(IndexUrlCase):
    def test_query_is_never_printed_or_stored(self):
        with rs.Nginx(self.served) as web:
            self.publish(self.build_remote(web.url, "shards", None), "signed.tar")
            secret = "X-Amz-Signature=topsecret0123456789"
            url = web.url + "/idx/signed.tar?" + secret
            cache = private_dir(os.path.join(self.scratch("c"), "cache"))
            p = run_shardfs("ls", "--cache-dir", cache, url, check=0)
            self.assertNotIn(b"topsecret", p.stderr)
            p = run_shardfs("ls", "--cache-dir", cache, web.url + "/idx/missing.tar?" + secret,
                            check=1)
            self.assertIn(b"missing.tar?<redacted>", p.stderr)
            self.assertNotIn(b"topsecret", p.stderr)
            mnt = self.scratch("mnt")
            with Mount(url, mnt, "cache_dir=" + cache) as m:
                with open("/proc/self/mountinfo", "rb") as f:
                    table = f.read()
                self.assertIn(b"signed.tar?<redacted>", table)
                self.assertNotIn(b"topsecret", table)
            self.assertNotIn("topsecret", m.final_log())
            for root, _, files in os.walk(os.path.join(cache, SUBDIR)):
                for n in files:
                    with open(os.path.join(root, n), "rb") as f:
                        self.assertNotIn(b"topsecret", f.read(), n)


class NoEtagServer:
    """Python's http.server (which sends Last-Modified but no ETag) on a free
    loopback port, in threads of this process; .methods lists the requests."""

    def __init__(self, root):
        self.root = root
        self.methods = []
        self.url = None

    def __enter__(self):
        methods = self.methods

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                methods.append((self.command, self.path))

        self.httpd = http.server.ThreadingHTTPServer(
            (rs.LOOPBACK, 0), functools.partial(Handler, directory=self.root))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://%s:%d" % (rs.LOOPBACK, self.httpd.server_address[1])
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)
        return False


class NoEtagTest(IndexUrlCase):
    def test_no_etag_is_fetched_every_time(self):
        with rs.Nginx(self.served) as web, NoEtagServer(self.served) as plain:
            self.publish(self.build_remote(web.url, "shards", None), "plain.tar")
            url = plain.url + "/idx/plain.tar"
            cache = private_dir(os.path.join(self.scratch("c"), "cache"))
            for i in range(2):
                p = run_shardfs("ls", "--cache-dir", cache, url, check=0)
                self.assertIn(b"no ETag", p.stderr)
                self.assertEqual(len(copies(cache)), 1)
            self.assertEqual(plain.methods, [("GET", "/idx/plain.tar")] * 2)
            self.assertEqual(leftovers(cache), [])


class S3Test(IndexUrlCase):
    def test_s3_signed_fetch_and_conditional_reuse(self):
        with rs.S3Server() as s3, rs.FaultProxy(s3.endpoint) as proxy:
            for s in self.shards:
                s3.put("train/" + os.path.basename(s), s)
            env = dict(os.environ, AWS_ACCESS_KEY_ID=s3.access_key,
                       AWS_SECRET_ACCESS_KEY=s3.secret_key, AWS_REGION=s3.region,
                       AWS_ENDPOINT_URL_S3=proxy.url, SHARDFS_S3_ALLOW_HTTP="1",
                       AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
            env.pop("AWS_PROFILE", None)
            idx = os.path.join(self.scratch("idx"), "s3.idx")
            run_shardfs("index", "build", "--quiet", "--out", idx, "s3://%s/train/" % s3.bucket,
                        env=env, check=0)
            bundle = os.path.join(self.scratch("b"), "index.tar")
            run_shardfs("index", "bundle", idx, bundle, check=0)
            s3.put("idx/index.tar", bundle)
            url = "s3://%s/idx/index.tar" % s3.bucket
            cache = private_dir(os.path.join(self.scratch("c"), "cache"))
            bad = dict(env, AWS_SECRET_ACCESS_KEY="wrong" + s3.secret_key)
            p = run_shardfs("ls", "--cache-dir", cache, url, env=bad, check=1)
            self.assertIn(b"denied", p.stderr)
            self.assertNotIn(s3.secret_key.encode(), p.stderr)
            proxy.reset_counters()
            p = run_shardfs("ls", "-R", "--json", "--cache-dir", cache, url, env=env, check=0)
            self.assertEqual(sorted(o["path"] for o in json_lines(p.stdout)), sorted(self.want))
            key = "/%s/idx/index.tar" % s3.bucket
            self.assertEqual([m for m, path, _ in proxy.requests_log() if path == key], ["GET"])
            proxy.reset_counters()
            run_shardfs("ls", "--cache-dir", cache, url, env=env, check=0)
            self.assertEqual([m for m, path, _ in proxy.requests_log() if path == key], ["HEAD"])
            self.assertEqual(len(copies(cache)), 1)
            saved = dict(os.environ)
            os.environ.update(env)
            try:
                mnt = self.scratch("mnt")
                with Mount(url, mnt, "cache_dir=%s,chunk_size=64K" % cache):
                    self.assert_tree(mnt, self.want)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            for root, _, files in os.walk(os.path.join(cache, SUBDIR)):
                for n in files:
                    with open(os.path.join(root, n), "rb") as f:
                        self.assertNotIn(s3.secret_key.encode(), f.read(), n)


if __name__ == "__main__":
    main()
