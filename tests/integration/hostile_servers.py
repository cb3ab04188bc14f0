"""Misbehaving HTTP servers for the remote tests (Python 3 stdlib only): the
answers a broken or hostile server gives, which nginx and s3rver never do.

Each is a context manager that serves on a free loopback port from threads of
the test process, and is bounded on its own side too, so that a client that
never gives up cannot keep a test running: past its bound a server answers
403 (not retried by shardfs) or ends the body.

- EndlessListing(tokens): every GET is an S3 ListObjectsV2 page, truncated,
  with one object; its continuation token cycles through "A", "B", "C"
  (tokens="cycle": never the same token twice in a row, so only a client
  that remembers every token sees the loop) or is new on every page
  (tokens="fresh": only a page bound stops it).
- EndlessBody(limit_bytes): every GET is a 200 without Content-Length whose
  body (bytes that are not a tar archive) is delimited by closing the
  connection, and goes on until limit_bytes are sent or the client hangs up.

    with EndlessListing("cycle") as srv:
        env = dict(os.environ, AWS_ENDPOINT_URL_S3=srv.url, ...)
        ... shardfs index build s3://bkt/train/ ...
        assert srv.requests <= 4
"""

import http.server
import threading
import time

LOOPBACK = "127.0.0.1"


class _Server:
    """A ThreadingHTTPServer run by one thread for a `with` block; handlers
    count requests in .requests (thread-safe)."""

    def __init__(self, max_requests=1000, max_seconds=20.0):
        self.max_requests = max_requests
        self.max_seconds = max_seconds
        self._mu = threading.Lock()
        self._requests = 0
        self._httpd = None
        self._thread = None
        self.started = None
        self.port = None
        self.url = None

    @property
    def requests(self):
        with self._mu:
            return self._requests

    def _count(self):
        """Counts a request; False once past the bound (the handler then
        answers 403)."""
        with self._mu:
            self._requests += 1
            n = self._requests
        return n <= self.max_requests and time.monotonic() - self.started < self.max_seconds

    def _handler(self):
        raise NotImplementedError

    def __enter__(self):
        self._httpd = http.server.ThreadingHTTPServer((LOOPBACK, 0), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = "http://%s:%d" % (LOOPBACK, self.port)
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)
        return False


class _Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def refuse(self):
        body = b"bound of the test server reached\n"
        self.send_response(403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class EndlessListing(_Server):
    """See the module docstring. .tokens_sent lists the tokens in order."""

    def __init__(self, tokens="cycle", **kw):
        super().__init__(**kw)
        if tokens not in ("cycle", "fresh"):
            raise ValueError("EndlessListing: tokens must be 'cycle' or 'fresh'")
        self.tokens = tokens
        self.tokens_sent = []

    def _handler(self):
        server = self

        class Handler(_Quiet):
            def do_GET(self):
                if not server._count():
                    self.refuse()
                    return
                with server._mu:
                    n = len(server.tokens_sent)
                    token = "ABC"[n % 3] if server.tokens == "cycle" else "t%d" % n
                    server.tokens_sent.append(token)
                body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                        "<ListBucketResult><IsTruncated>true</IsTruncated>"
                        "<NextContinuationToken>%s</NextContinuationToken>"
                        "<Contents><Key>train/%06d.tar</Key><Size>10240</Size>"
                        "<ETag>&quot;e%d&quot;</ETag></Contents>"
                        "</ListBucketResult>" % (token, n, n)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


class EndlessBody(_Server):
    """See the module docstring. .bytes_sent counts body bytes written."""

    def __init__(self, limit_bytes, **kw):
        super().__init__(**kw)
        self.limit_bytes = limit_bytes
        self.bytes_sent = 0

    def _handler(self):
        server = self
        block = b"not a tar archive, and no end to it\n" * 1800  # ~64 KiB

        class Handler(_Quiet):
            def do_GET(self):
                if not server._count():
                    self.refuse()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-tar")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                sent = 0
                try:
                    while (sent < server.limit_bytes and
                           time.monotonic() - server.started < server.max_seconds):
                        n = min(len(block), server.limit_bytes - sent)
                        self.wfile.write(block[:n])
                        sent += n
                        with server._mu:
                            server.bytes_sent += n
                except (BrokenPipeError, ConnectionResetError):
                    pass  # The client hung up: what a capped client does.

        return Handler
