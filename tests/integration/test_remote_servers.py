#!/usr/bin/env python3
"""Self-tests of the remote-shard test servers (remote_servers.py): nginx with
byte ranges, ETags and TLS; the fault-injecting proxy; s3rver's SigV4 checks.
Clients are urllib/http.client and the curl CLI, never shardfs, so a failure
here is a fixture's fault. A missing tool fails loudly; nothing skips.
"""

import http.client
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers as rs  # noqa: E402

CURL = rs.require_tool("curl")


def make_root():
    """A served directory: a 3 MiB file of random bytes and a small one."""
    root = tempfile.mkdtemp(prefix="shardfs-remote-root-")
    os.mkdir(os.path.join(root, "shards"))
    data = os.urandom(3 << 20)
    with open(os.path.join(root, "shards", "train-000000.tar"), "wb") as f:
        f.write(data)
    with open(os.path.join(root, "small.txt"), "wb") as f:
        f.write(b"0123456789abcdef")
    return root, data


def curl(*args, timeout=30):
    """Runs curl; returns (exit code, stdout bytes, stderr text)."""
    p = subprocess.run([CURL, "-sS"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def port_refuses(port):
    try:
        socket.create_connection((rs.LOOPBACK, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def proxy_threads():
    return [t for t in threading.enumerate() if t.name.startswith("FaultProxy")]


class NginxTest(unittest.TestCase):
    def setUp(self):
        self.root, self.data = make_root()
        self.addCleanup(shutil.rmtree, self.root, True)

    def test_range_etag_and_access_log(self):
        with rs.Nginx(self.root) as web:
            url = web.url + "/shards/train-000000.tar"
            status, headers, body = rs.http_get(url, {"Range": "bytes=1000-1999"})
            self.assertEqual(status, 206)
            self.assertEqual(body, self.data[1000:2000])
            self.assertEqual(headers["Content-Range"], "bytes 1000-1999/%d" % len(self.data))
            etag = headers.get("ETag")
            self.assertTrue(etag, headers)
            status, headers, body = rs.http_get(url)
            self.assertEqual((status, headers["ETag"], headers["Accept-Ranges"]),
                             (200, etag, "bytes"))
            self.assertEqual(body, self.data)
            # The client's guard against a replaced shard: If-Match.
            status, _, body = rs.http_get(url, {"Range": "bytes=0-9", "If-Match": etag})
            self.assertEqual((status, body), (206, self.data[:10]))
            status, _, _ = rs.http_get(url, {"Range": "bytes=0-9", "If-Match": '"other"'})
            self.assertEqual(status, 412)
            rs.http_get(web.url + "/small.txt?v=1")
            deadline = time.monotonic() + 5
            while web.access_count() < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(web.access_count(), 5)
            self.assertEqual(web.access_count("/shards/train-000000.tar"), 4)
            self.assertEqual(web.access_count("/small.txt"), 1)
            self.assertEqual(web.access_entries()[0],
                             ("GET", "/shards/train-000000.tar", 206, 1000, "bytes=1000-1999"))
            pid, port, conf_dir = web.pid, web.port, web.dir
        self.assertFalse(os.path.exists("/proc/%d" % pid) and
                         open("/proc/%d/stat" % pid).read().split()[2] != "Z")
        self.assertTrue(port_refuses(port))
        self.assertFalse(os.path.exists(conf_dir))

    def test_https_needs_the_ca_file(self):
        with rs.Nginx(self.root, tls=True) as web:
            self.assertTrue(web.url.startswith("https://127.0.0.1:"))
            url = web.url + "/shards/train-000000.tar"
            status, _, body = rs.http_get(url, {"Range": "bytes=5-9"}, ca_file=web.ca_file)
            self.assertEqual((status, body), (206, self.data[5:10]))
            with self.assertRaises(urllib.error.URLError) as cm:
                rs.http_get(url)
            self.assertIsInstance(cm.exception.reason, ssl.SSLCertVerificationError)
            rc, out, err = curl("--cacert", web.ca_file, "-r", "0-3", url)
            self.assertEqual((rc, out), (0, self.data[:4]), err)
            rc, _, err = curl(url)
            self.assertEqual(rc, 60, err)  # peer certificate cannot be authenticated

    def test_fails_loudly_on_a_missing_root(self):
        with self.assertRaises(RuntimeError):
            rs.Nginx(os.path.join(self.root, "missing")).start()


class FaultProxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root, cls.data = make_root()
        cls.web = rs.Nginx(cls.root).start()

    @classmethod
    def tearDownClass(cls):
        cls.web.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    PATH = "/shards/train-000000.tar"

    def setUp(self):
        self.proxy = rs.FaultProxy(self.web.url).start()
        self.addCleanup(self.check_stopped)

    def check_stopped(self):
        self.proxy.stop()
        self.assertEqual(proxy_threads(), [])
        self.assertTrue(port_refuses(self.proxy.port))

    def conn(self, timeout=10):
        c = http.client.HTTPConnection(rs.LOOPBACK, self.proxy.port, timeout=timeout)
        self.addCleanup(c.close)
        return c

    def get(self, c, path=PATH, headers=None, method="GET"):
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, r, r.read()

    def test_passes_bytes_through_with_keep_alive_and_counts(self):
        c = self.conn()
        status, _, body = self.get(c)
        self.assertEqual((status, body == self.data), (200, True))
        sock = c.sock
        status, r, body = self.get(c, headers={"Range": "bytes=100-199"})
        self.assertEqual((status, body), (206, self.data[100:200]))
        self.assertTrue(r.getheader("ETag"))
        status, r, body = self.get(c, "/small.txt", method="HEAD")
        self.assertEqual((status, body, r.getheader("Content-Length")), (200, b"", "16"))
        status, _, body = self.get(c, "/small.txt?x=1", headers={"Range": "bytes=10-"})
        self.assertEqual((status, body), (206, b"abcdef"))
        status, _, _ = self.get(c, "/missing")
        self.assertEqual(status, 404)
        self.assertIs(c.sock, sock)  # one kept-alive connection throughout
        self.assertEqual(self.proxy.requests, 5)
        self.assertEqual(self.proxy.requests_per_path(),
                         {self.PATH: 2, "/small.txt": 2, "/missing": 1})
        self.assertEqual(self.proxy.ranges(), [
            (self.PATH, None), (self.PATH, "bytes=100-199"), ("/small.txt", None),
            ("/small.txt", "bytes=10-"), ("/missing", None)])
        # The proxy counts a body's bytes after it wrote them: the client
        # may have read the 404's body a moment before.
        want = len(self.data) + 100 + 6
        deadline = time.monotonic() + 5
        while self.proxy.bytes_sent <= want and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertGreater(self.proxy.bytes_sent, want)
        self.proxy.reset_counters()
        self.assertEqual((self.proxy.requests, self.proxy.bytes_sent, self.proxy.ranges()),
                         (0, 0, []))
        # curl, several transfers on one connection.
        rc, out, err = curl("-r", "0-99", self.proxy.url + self.PATH,
                            "-r", "0-99", self.proxy.url + self.PATH)
        self.assertEqual((rc, out), (0, self.data[:100] * 2), err)
        # As above: curl may exit on the last body before the proxy counts it.
        deadline = time.monotonic() + 5
        while self.proxy.bytes_sent < 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(self.proxy.bytes_sent, 200)

    def test_latency(self):
        c = self.conn()
        self.get(c, "/small.txt")
        self.proxy.latency(0.5)
        t = time.monotonic()
        self.assertEqual(self.get(c, "/small.txt")[0], 200)
        self.assertGreaterEqual(time.monotonic() - t, 0.5)
        self.proxy.latency(0)
        t = time.monotonic()
        self.assertEqual(self.get(c, "/small.txt")[0], 200)
        self.assertLess(time.monotonic() - t, 0.4)

    def test_503_and_429_bursts_then_recovery(self):
        c = self.conn()
        self.proxy.fail_next(2, status=503, retry_after=1)
        self.proxy.fail_next(1, status=429)
        self.assertEqual(self.proxy.pending_faults(), 3)
        for want in (503, 503):
            status, r, _ = self.get(c, headers={"Range": "bytes=0-9"})
            self.assertEqual((status, r.getheader("Retry-After")), (want, "1"))
        status, r, _ = self.get(c)
        self.assertEqual((status, r.getheader("Retry-After")), (429, None))
        status, _, body = self.get(c, headers={"Range": "bytes=0-9"})
        self.assertEqual((status, body), (206, self.data[:10]))
        self.assertEqual(self.proxy.requests, 4)
        self.assertEqual(self.proxy.pending_faults(), 0)

    def test_reset_before_and_during_the_response(self):
        self.proxy.reset_next(1)
        c = self.conn()
        with self.assertRaises((http.client.RemoteDisconnected, ConnectionError)):
            self.get(c)
        self.proxy.reset_next(1, after_bytes=100000)
        c = self.conn()
        c.request("GET", self.PATH)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        got = bytearray()
        with self.assertRaises((http.client.IncompleteRead, ConnectionError)):
            while True:
                chunk = r.read1(65536)
                if not chunk:
                    break
                got += chunk
        self.assertLessEqual(len(got), 100000)
        self.assertEqual(bytes(got), self.data[:len(got)])
        # The next connection is served whole.
        status, _, body = self.get(self.conn())
        self.assertEqual((status, body == self.data), (200, True))
        rc, _, _ = curl(self.proxy.url + self.PATH, "-o", os.devnull)
        self.assertEqual(rc, 0)
        self.proxy.reset_next(1, after_bytes=10)
        rc, _, err = curl(self.proxy.url + self.PATH, "-o", os.devnull)
        self.assertIn(rc, (18, 56), err)  # partial file / receive failure

    def test_stall_times_out_a_client_then_release(self):
        self.proxy.stall_next(1, after_bytes=1000, seconds=30)
        c = self.conn(timeout=0.5)
        c.request("GET", self.PATH)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.read(1000), self.data[:1000])
        t = time.monotonic()
        with self.assertRaises(socket.timeout):
            r.read(1)
        self.assertLess(time.monotonic() - t, 5)
        self.proxy.release()
        # A stall that ends by itself delivers the whole body, late.
        self.proxy.stall_next(1, after_bytes=0, seconds=0.3)
        t = time.monotonic()
        status, _, body = self.get(self.conn())
        self.assertEqual((status, body == self.data), (200, True))
        self.assertGreaterEqual(time.monotonic() - t, 0.3)
        # release() ends a long one at once.
        self.proxy.stall_next(1, after_bytes=10, seconds=30)
        threading.Timer(0.2, self.proxy.release).start()
        t = time.monotonic()
        status, _, body = self.get(self.conn(), headers={"Range": "bytes=0-99"})
        self.assertEqual((status, body), (206, self.data[:100]))
        self.assertLess(time.monotonic() - t, 5)

    def test_down_refuses_then_up_serves(self):
        c = self.conn()
        self.assertEqual(self.get(c, "/small.txt")[0], 200)
        self.proxy.down()
        self.assertTrue(port_refuses(self.proxy.port))
        with self.assertRaises((http.client.RemoteDisconnected, ConnectionError)):
            self.get(c, "/small.txt")  # the kept connection is gone too
        rc, _, _ = curl(self.proxy.url + "/small.txt")
        self.assertEqual(rc, 7)  # could not connect
        self.proxy.down()  # idempotent
        self.proxy.up()
        status, _, body = self.get(self.conn(), "/small.txt")
        self.assertEqual((status, body), (200, b"0123456789abcdef"))

    def test_https_upstream(self):
        with rs.Nginx(self.root, tls=True) as web, \
                rs.FaultProxy(web.url, ca_file=web.ca_file) as proxy:
            rc, out, err = curl("-r", "7-9", proxy.url + self.PATH)
            self.assertEqual((rc, out), (0, self.data[7:10]), err)


class S3ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s3 = rs.S3Server(bucket="shards").start()

    @classmethod
    def tearDownClass(cls):
        pid, port = cls.s3.pid, cls.s3.port
        cls.s3.stop()
        assert port_refuses(port), "s3rver (pid %d) still listens" % pid

    def signed(self, url, *extra, secret=None):
        p = subprocess.run(self.s3.curl_args(secret) + ["-w", "\n%{http_code}"] +
                           list(extra) + [url],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        body, _, code = p.stdout.rpartition(b"\n")
        return int(code), body

    def test_signed_ranged_get(self):
        data = os.urandom(200000)
        self.s3.put("train/000000.tar", data)
        code, body = self.signed(self.s3.url("train/000000.tar"), "-H", "Range: bytes=1000-1999")
        self.assertEqual((code, body), (206, data[1000:2000]))
        code, body = self.signed(self.s3.url("train/000000.tar"), "-H", "Range: bytes=199990-")
        self.assertEqual((code, body), (206, data[199990:]))
        code, body = self.signed(self.s3.url("train/000000.tar"), "-I")
        self.assertEqual(code, 200)
        self.assertIn(b"etag:", body.lower())

    def test_wrong_secret_is_refused(self):
        self.s3.put("secret.bin", b"x" * 100)
        code, _ = self.signed(self.s3.url("secret.bin"), secret=self.s3.secret_key)
        self.assertEqual(code, 200)
        code, body = self.signed(self.s3.url("secret.bin"), secret="not-the-secret")
        self.assertEqual(code, 403, body)
        self.assertIn(b"SignatureDoesNotMatch", body)

    def test_list_objects_v2(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"from a file")
            f.flush()
            self.s3.put("list/b.tar", f.name)
        self.s3.put("list/a.tar", b"a")
        self.s3.put("other/c.tar", b"c")
        # Parameters sorted and encoded: curl signs the query as given.
        code, body = self.signed("%s/%s?list-type=2&prefix=list%%2F" % (
            self.s3.endpoint, self.s3.bucket))
        self.assertEqual(code, 200, body)
        # Compared without XML namespaces: s3rver's differs from AWS's.
        keys = []
        for e in ET.fromstring(body):
            if e.tag.rpartition("}")[2] == "Contents":
                fields = {c.tag.rpartition("}")[2]: c.text for c in e}
                keys.append((fields["Key"], fields["Size"]))
        self.assertEqual(keys, [("list/a.tar", "1"), ("list/b.tar", "11")])
        # An unencoded "/" in the query: curl signs it as given, the server
        # canonicalises it, and the signatures differ.
        code, body = self.signed("%s/%s?list-type=2&prefix=list/" % (
            self.s3.endpoint, self.s3.bucket))
        self.assertEqual(code, 403, body)

    def test_env_and_signatures_through_the_proxy(self):
        env = self.s3.env()
        self.assertEqual(env["AWS_ENDPOINT_URL_S3"], self.s3.endpoint)
        self.assertEqual((env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"],
                          env["AWS_REGION"]),
                         (self.s3.access_key, self.s3.secret_key, "us-east-1"))
        data = os.urandom(5000)
        self.s3.put("proxied.tar", data)
        with rs.FaultProxy(self.s3.endpoint) as proxy:
            proxy.fail_next(1, status=503)
            url = self.s3.url("proxied.tar", endpoint=proxy.url)
            code, _ = self.signed(url, "-H", "Range: bytes=0-99")
            self.assertEqual(code, 503)
            code, body = self.signed(url, "-H", "Range: bytes=0-99")
            self.assertEqual((code, body), (206, data[:100]))
            self.assertEqual(proxy.ranges(), [("/shards/proxied.tar", "bytes=0-99")] * 2)
        self.assertEqual(proxy_threads(), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
