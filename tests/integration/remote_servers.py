"""Real servers for the remote-shard tests and the remote benchmark (Python 3 stdlib only).

Each server is a context manager: started on a free loopback port on enter,
stopped on exit (also when the test fails), by its own PID or its own threads.
A server that cannot start fails loudly with its log; nothing here ever skips.

- free_port(): a free TCP port on 127.0.0.1.
- Nginx(root_dir, tls=False): nginx serving root_dir with byte ranges and
  ETags, over https with a self-signed certificate (.ca_file) if tls=True.
- FaultProxy(upstream_url): an HTTP/1.1 reverse proxy in a thread of the test
  process that adds latency, answers 503/429, resets or stalls responses and
  refuses connections on demand, and counts what passes.
- S3Server(): @20minutes/s3rver (checks SigV4 signatures) through
  tests/remote/s3rver/serve.js on node; put() uploads with curl's SigV4 signer.

    with Nginx(shard_dir) as web, FaultProxy(web.url) as proxy:
        proxy.latency(0.005)
        proxy.fail_next(3, status=503, retry_after=0)
        ... mount http://.../train-000000.tar through proxy.url ...
        assert proxy.requests_per_path()["/train-000000.tar"] == 4
"""

import collections
import os
import secrets
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

LOOPBACK = "127.0.0.1"
SOURCE_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
S3RVER_DIR = os.path.join(SOURCE_ROOT, "tests", "remote", "s3rver")

# How long a server may take to answer after start before the test fails.
START_TIMEOUT_S = 15.0


def free_port():
    """Returns a TCP port on 127.0.0.1 that was free a moment ago. Another
    process may take it before the caller binds it; Nginx retries for that."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def require_tool(name):
    """Returns the path of `name`, or fails loudly: a test never skips."""
    path = shutil.which(name)
    if path is None:
        raise RuntimeError("%s not found: install it with scripts/install-deps.sh" % name)
    return path


def _read_text(path, limit=20000):
    try:
        with open(path, "rb") as f:
            return f.read()[-limit:].decode("utf-8", "replace")
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)


def _stop_process(proc, sig=signal.SIGTERM, grace_s=5.0):
    """Stops one child we started, by its PID: `sig`, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, sig)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace_s)
    except ProcessLookupError:
        proc.wait(timeout=grace_s)


def _wait_for_port(port, proc, deadline):
    """Waits until something accepts on 127.0.0.1:port. Returns False if `proc`
    exited first or the deadline passed."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def make_self_signed_cert(out_dir, ip=LOOPBACK):
    """Writes cert.pem and key.pem (P-256, valid two days, subjectAltName
    IP:ip) into out_dir with the openssl CLI. Returns (cert_path, key_path);
    the certificate is its own CA, so cert_path is also the CA file."""
    openssl = require_tool("openssl")
    cert = os.path.join(out_dir, "cert.pem")
    key = os.path.join(out_dir, "key.pem")
    p = subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=" + ip,
         "-addext", "subjectAltName=IP:" + ip],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if p.returncode != 0:
        raise RuntimeError("openssl req -x509 failed (%d): %s" % (
            p.returncode, p.stdout.decode("utf-8", "replace")))
    return cert, key


# --------------------------------------------------------------------------- nginx

_NGINX_CONF = """\
# Written by remote_servers.Nginx; everything it writes stays in {dir}.
# One process that stays in the foreground: its PID is the one we started.
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log notice;
events {{
    worker_connections 1024;
}}
http {{
    default_type application/octet-stream;
    # Tab-separated; $request_uri is the target as sent (still percent-encoded).
    log_format shardfs '$request_method\t$request_uri\t$status\t$body_bytes_sent\t$http_range';
    access_log {dir}/access.log shardfs;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    sendfile on;
    tcp_nopush on;
    # Clients keep their connections for a whole test or benchmark run.
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    server {{
        listen {listen};
        server_name localhost;
        root {root};
        etag on;
        {tls}
        location / {{
            autoindex off;
        }}
    }}
}}
"""


class _ServerProcess:
    """A server run as one child process (self._proc) for a `with` block:
    start() on enter (stop() if it fails), stop() on exit, also on failure."""

    _proc = None

    @property
    def pid(self):
        return self._proc.pid if self._proc else None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


class Nginx(_ServerProcess):
    """nginx serving root_dir on a free loopback port, with byte ranges and
    ETags; https with a self-signed certificate if tls=True.

    .url      base URL, no trailing slash ("http://127.0.0.1:PORT")
    .ca_file  the certificate to trust (tls=True only, else None)
    .port, .pid, .dir (its config, logs and temp files)

    The access log is written as each response completes, so a request is
    counted by access_count() only once its last byte left nginx.
    """

    def __init__(self, root_dir, tls=False):
        self.root = os.path.abspath(root_dir)
        self.tls = tls
        self.dir = None
        self.ca_file = None
        self.port = None
        self.url = None
        self._proc = None

    def start(self):
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.access(nginx, os.X_OK):
            raise RuntimeError("nginx not found: install nginx-light with scripts/install-deps.sh")
        if not os.path.isdir(self.root):
            raise RuntimeError("Nginx: root %s is not a directory" % self.root)
        self.dir = tempfile.mkdtemp(prefix="shardfs-nginx-")
        os.mkdir(os.path.join(self.dir, "tmp"))
        tls_conf = ""
        if self.tls:
            cert, key = make_self_signed_cert(self.dir)
            self.ca_file = cert
            tls_conf = "ssl_certificate %s;\n        ssl_certificate_key %s;" % (cert, key)
        conf = os.path.join(self.dir, "nginx.conf")
        error_log = os.path.join(self.dir, "error.log")
        # free_port() can race with another process; a lost race shows as
        # "Address already in use" and costs one more try.
        for attempt in range(5):
            self.port = free_port()
            listen = "%s:%d%s" % (LOOPBACK, self.port, " ssl" if self.tls else "")
            with open(conf, "w") as f:
                f.write(_NGINX_CONF.format(dir=self.dir, root=self.root, listen=listen,
                                           tls=tls_conf))
            # -e: nginx opens its error log before it reads the config; keep
            # even that one inside our directory.
            self._proc = subprocess.Popen(
                [nginx, "-p", self.dir, "-e", error_log, "-c", conf],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            if _wait_for_port(self.port, self._proc, time.monotonic() + START_TIMEOUT_S):
                break
            _stop_process(self._proc)
            log = _read_text(error_log)
            self._proc = None
            if "Address already in use" in log and attempt < 4:
                continue
            raise RuntimeError("nginx did not start on port %d; error log:\n%s" % (self.port, log))
        scheme = "https" if self.tls else "http"
        self.url = "%s://%s:%d" % (scheme, LOOPBACK, self.port)
        return self

    def stop(self):
        """Stops nginx by its PID (SIGTERM: fast shutdown) and removes its
        directory. Idempotent."""
        _stop_process(self._proc)
        self._proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def error_log(self):
        return _read_text(os.path.join(self.dir, "error.log"))

    def access_entries(self):
        """Every request answered so far, oldest first, as
        (method, path, status, body_bytes, range_header_or_None); path as the
        client sent it (percent-encoded), query string left out, as in
        FaultProxy's counters."""
        out = []
        path = os.path.join(self.dir, "access.log")
        if not os.path.exists(path):
            return out
        with open(path, "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                method, target, status, nbytes, rng = line.split("\t")
                out.append((method, target.partition("?")[0], int(status), int(nbytes),
                            None if rng == "-" else rng))
        return out

    def access_count(self, path=None):
        """Requests answered so far, all or those for one URL path."""
        return sum(1 for e in self.access_entries() if path is None or e[1] == path)


# --------------------------------------------------------------------------- fault proxy

class _Closed(Exception):
    """A socket of the proxied exchange closed or failed; drop the connection."""


_HOP_BY_HOP = (b"connection", b"keep-alive", b"proxy-connection")
_BUF_SIZE = 1 << 20


class _Conn:
    """One client connection of the proxy and its own upstream connection."""

    def __init__(self, proxy, client):
        self.proxy = proxy
        self.client = client
        self.upstream = None
        self.buf = bytearray()     # bytes read from the client, not yet used
        self.ubuf = bytearray()    # bytes read from upstream, not yet used
        self.view = memoryview(bytearray(_BUF_SIZE))  # body relay buffer
        self.thread = None

    # -- reading helpers
    @staticmethod
    def _read_head(sock, buf):
        """Returns the bytes of one message head (through CRLFCRLF) taken from
        buf, reading more from sock as needed; None on a clean EOF before any
        byte."""
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(buf[:end + 4])
                del buf[:end + 4]
                return head
            if len(buf) > 1 << 16:
                raise _Closed("message head too large")
            try:
                data = sock.recv(65536)
            except OSError as e:
                raise _Closed(str(e))
            if not data:
                if buf:
                    raise _Closed("EOF inside a message head")
                return None
            buf += data

    @staticmethod
    def _parse_headers(head):
        lines = head[:-4].split(b"\r\n")
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers.append((name.strip(), value.strip()))
        return lines[0], headers

    @staticmethod
    def _header(headers, name):
        for k, v in headers:
            if k.lower() == name:
                return v
        return None

    def _send(self, sock, data):
        try:
            sock.sendall(data)
        except OSError as e:
            raise _Closed(str(e))

    # -- body relay
    def _relay_body(self, src, srcbuf, dst, framing, length, cutter=None):
        """Moves one message body from src (its leftover bytes in srcbuf) to
        dst. framing: "length" (length bytes), "chunked" (the chunked coding,
        passed through unchanged) or "close" (until src closes). cutter, if
        given, resets or stalls the stream at its cut point."""
        if framing == "chunked":
            while True:
                line = self._read_line(src, srcbuf)
                self._write_counted(dst, line, cutter)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                self._relay_body(src, srcbuf, dst, "length", size + 2, cutter)
            while True:  # trailers, up to the empty line
                line = self._read_line(src, srcbuf)
                self._write_counted(dst, line, cutter)
                if line == b"\r\n":
                    return
        remaining = length if framing == "length" else -1
        if srcbuf:
            take = len(srcbuf) if remaining < 0 else min(remaining, len(srcbuf))
            data = bytes(srcbuf[:take])
            del srcbuf[:take]
            if remaining > 0:
                remaining -= take
            self._write_counted(dst, data, cutter)
        view = self.view
        while remaining != 0:
            want = len(view) if remaining < 0 else min(len(view), remaining)
            try:
                n = src.recv_into(view, want)
            except OSError as e:
                raise _Closed(str(e))
            if n == 0:
                if remaining < 0:
                    return
                raise _Closed("EOF inside a body")
            if remaining > 0:
                remaining -= n
            self._write_counted(dst, view[:n], cutter)

    def _read_line(self, sock, buf):
        while True:
            end = buf.find(b"\r\n")
            if end >= 0:
                line = bytes(buf[:end + 2])
                del buf[:end + 2]
                return line
            try:
                data = sock.recv(65536)
            except OSError as e:
                raise _Closed(str(e))
            if not data:
                raise _Closed("EOF inside chunked coding")
            buf += data

    def _write_counted(self, dst, data, cutter):
        """Writes body bytes to dst; those to the client count in bytes_sent."""
        count = self.proxy._count_bytes if dst is self.client else (lambda n: None)
        if cutter is not None and not cutter.done:
            room = cutter.fault.after_bytes - cutter.sent
            if len(data) < room:
                cutter.sent += len(data)
            else:
                # The cut point lies in this piece: send up to it, then act.
                self._send(dst, data[:room])
                count(room)
                cutter.sent += room
                cutter.act()
                data = data[room:]
        self._send(dst, data)
        count(len(data))

    # -- upstream
    def _connect_upstream(self):
        p = self.proxy
        try:
            s = socket.create_connection((p._up_host, p._up_port), timeout=30)
        except OSError as e:
            raise _Closed("upstream connect: %s" % e)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(None)
        if p._up_tls:
            s = p._up_ssl.wrap_socket(s, server_hostname=p._up_host)
        self.upstream = s
        self.ubuf = bytearray()
        p._track(s)

    def _close_upstream(self):
        if self.upstream is not None:
            self.proxy._untrack(self.upstream)
            _close_quietly(self.upstream)
            self.upstream = None
            self.ubuf = bytearray()

    def _exchange_upstream(self, request_head, body):
        """Sends one request upstream and reads the response head. A kept
        connection that upstream closed meanwhile is reopened once."""
        for attempt in (0, 1):
            fresh = self.upstream is None
            if fresh:
                self._connect_upstream()
            try:
                self._send(self.upstream, request_head + body)
                head = self._read_head(self.upstream, self.ubuf)
                if head is None:
                    raise _Closed("upstream closed before answering")
                return head
            except _Closed:
                self._close_upstream()
                if fresh or attempt == 1:
                    raise
        raise AssertionError("unreachable")

    # -- the connection loop
    def run(self):
        try:
            while not self.proxy._stopping.is_set():
                if not self._serve_one():
                    break
        except _Closed:
            pass
        except Exception as e:  # a proxy bug must show in the test's output
            self.proxy._errors.append(repr(e))
        finally:
            self._close_upstream()
            self.proxy._untrack(self.client)
            _close_quietly(self.client)
            self.proxy._forget(self)

    def _serve_one(self):
        """Handles one request. Returns False when the connection is done."""
        p = self.proxy
        head = self._read_head(self.client, self.buf)
        if head is None:
            return False
        request_line, headers = self._parse_headers(head)
        try:
            method, target, version = request_line.split(b" ", 2)
        except ValueError:
            raise _Closed("bad request line %r" % request_line)
        # Request body: read whole (test uploads are small) so a retried
        # upstream exchange can send it again.
        body = bytearray()
        te = self._header(headers, b"transfer-encoding")
        cl = self._header(headers, b"content-length")
        sink = _BytesSink(body)
        if te is not None and b"chunked" in te.lower():
            self._relay_body(self.client, self.buf, sink, "chunked", 0)
        elif cl is not None and int(cl) > 0:
            self._relay_body(self.client, self.buf, sink, "length", int(cl))
        conn_hdr = (self._header(headers, b"connection") or b"").lower()
        client_close = b"close" in conn_hdr or (version == b"HTTP/1.0" and
                                               b"keep-alive" not in conn_hdr)

        path = urllib.parse.urlsplit(target.decode("latin-1")).path
        rng = self._header(headers, b"range")
        fault, delay = p._begin_request(method.decode("latin-1"), path,
                                        None if rng is None else rng.decode("latin-1"))
        if delay > 0:
            if p._stopping.wait(delay):
                return False

        if fault is not None and fault.kind == "fail":
            reason = {429: b"Too Many Requests", 503: b"Service Unavailable"}.get(
                fault.status, b"Injected Fault")
            msg = b"injected %d\n" % fault.status
            out = [b"HTTP/1.1 %d %s" % (fault.status, reason),
                   b"Content-Type: text/plain", b"Content-Length: %d" % len(msg)]
            if fault.retry_after is not None:
                out.append(b"Retry-After: %d" % fault.retry_after)
            if client_close:
                out.append(b"Connection: close")
            self._send(self.client, b"\r\n".join(out) + b"\r\n\r\n")
            self._send(self.client, msg if method != b"HEAD" else b"")
            p._count_bytes(len(msg) if method != b"HEAD" else 0)
            return not client_close

        if fault is not None and fault.kind == "reset" and fault.after_bytes == 0:
            _reset(self.client)
            return False

        # Forward: the request line gets the upstream's base path; every header
        # (Host too: S3 signatures cover it) passes unchanged.
        up_target = target
        if p._up_prefix and target.startswith(b"/"):
            up_target = p._up_prefix + target
        up_head = b"\r\n".join([b"%s %s HTTP/1.1" % (method, up_target)] +
                               [b"%s: %s" % (k, v) for k, v in headers
                                if k.lower() not in _HOP_BY_HOP and
                                k.lower() != b"transfer-encoding" and
                                k.lower() != b"content-length"] +
                               ([b"Content-Length: %d" % len(body)]
                                if body or cl is not None or te is not None else []))
        uhead = self._exchange_upstream(up_head + b"\r\n\r\n", bytes(body))
        status_line, uheaders = self._parse_headers(uhead)
        status = int(status_line.split(b" ", 2)[1])
        ute = self._header(uheaders, b"transfer-encoding")
        ucl = self._header(uheaders, b"content-length")
        uconn = (self._header(uheaders, b"connection") or b"").lower()
        if method == b"HEAD" or status in (204, 304) or 100 <= status < 200:
            framing, length = "length", 0
        elif ute is not None and b"chunked" in ute.lower():
            framing, length = "chunked", 0
        elif ucl is not None:
            framing, length = "length", int(ucl)
        else:
            framing, length = "close", 0
        upstream_close = b"close" in uconn or framing == "close"
        close_after = client_close or framing == "close"
        out_head = b"\r\n".join([status_line] + [b"%s: %s" % (k, v) for k, v in uheaders
                                                 if k.lower() not in _HOP_BY_HOP] +
                                ([b"Connection: close"] if close_after else []))
        self._send(self.client, out_head + b"\r\n\r\n")

        cutter = _FaultCutter(self, fault) if fault is not None else None
        try:
            self._relay_body(self.upstream, self.ubuf, self.client, framing, length, cutter)
        except _Reset:
            self._close_upstream()
            _reset(self.client)
            return False
        except _Closed:
            self._close_upstream()
            raise
        if upstream_close:
            self._close_upstream()
        return not close_after


class _BytesSink:
    """A socket-like target that collects bytes (for request bodies)."""

    def __init__(self, out):
        self.out = out

    def sendall(self, data):
        self.out += data


class _Reset(Exception):
    pass


class _FaultCutter:
    """Acts a reset or stall fault once `after_bytes` body bytes went out. A
    body no longer than after_bytes goes out whole and the fault does nothing
    more (a reset still drops the connection if the cut point is its end)."""

    def __init__(self, conn, fault):
        self.conn = conn
        self.fault = fault
        self.sent = 0
        self.done = False

    def act(self):
        self.done = True
        if self.fault.kind == "reset":
            raise _Reset()
        self.conn.proxy._stall(self.fault.seconds)
        if self.conn.proxy._stopping.is_set():
            raise _Closed("proxy stopping")


class _Fault:
    def __init__(self, kind, status=503, retry_after=None, after_bytes=0, seconds=0.0):
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.after_bytes = after_bytes
        self.seconds = seconds


def _close_quietly(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _reset(sock):
    """Closes sock with a TCP RST (SO_LINGER 0), as a crashed server would."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


class FaultProxy:
    """An HTTP/1.1 reverse proxy in front of `upstream_url`, run by threads of
    the test process (one per client connection, each with its own kept-alive
    upstream connection), with faults injected on demand.

    .url   the proxy's base URL ("http://127.0.0.1:PORT"); a request for
           .url + "/x" goes to upstream_url + "/x". Headers pass unchanged
           (Host too, so S3 signatures made for .url stay valid).

    Faults queue up in call order; each new request takes the next one:
      fail_next(n, status=503, retry_after=None)  answer n requests with
          `status` (429 too) and an optional Retry-After (seconds); the
          connection stays usable.
      reset_next(n, after_bytes=0)  forward n requests, then drop the
          connection with a TCP RST: with after_bytes=0 before any byte of the
          response, else after the response head and after_bytes body bytes.
      stall_next(n, after_bytes, seconds)  forward n requests, send the head
          and after_bytes body bytes, then send nothing for `seconds` or until
          release(); the rest of the body follows if the client is still there.
    latency(seconds) delays every later request before it is forwarded.
    down() closes the listening socket and every open connection (new
    connections are refused); up() listens on the same port again.

    Counters (reset_counters() zeroes them): requests (total),
    requests_per_path() ({path: count}, query string left out),
    bytes_sent (response body bytes written to clients, injected ones too),
    ranges() ([(path, Range header or None)] in arrival order), and
    requests_log() ([(method, path, range)]).

    All methods are thread-safe.
    """

    def __init__(self, upstream_url, ca_file=None):
        u = urllib.parse.urlsplit(upstream_url)
        if u.scheme not in ("http", "https"):
            raise ValueError("FaultProxy: upstream must be http(s)://, got %r" % upstream_url)
        self.upstream_url = upstream_url
        self._up_host = u.hostname
        self._up_tls = u.scheme == "https"
        self._up_port = u.port or (443 if self._up_tls else 80)
        self._up_prefix = u.path.rstrip("/").encode("latin-1")
        self._up_ssl = ssl.create_default_context(cafile=ca_file) if self._up_tls else None
        self._mu = threading.Lock()
        self._faults = collections.deque()   # Guarded by _mu.
        self._latency = 0.0                  # Guarded by _mu.
        self._conns = set()                  # Guarded by _mu.
        self._socks = set()                  # Guarded by _mu.
        self._log = []                       # Guarded by _mu.
        self._bytes_sent = 0                 # Guarded by _mu.
        self._errors = []
        self._release = threading.Event()
        self._stopping = threading.Event()
        self._cv = threading.Condition(self._mu)
        self._want_up = True                 # Guarded by _mu.
        self._want_gen = 0                   # Guarded by _mu.
        self._applied_gen = 0                # Guarded by _mu.
        self._listen_error = None
        self._listener = None                # Owned by the accept thread.
        self._accept_thread = None
        self.port = None
        self.url = None

    # -- lifecycle
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, *exc):
        # A failing test's own error matters more than a proxy bug report.
        self.stop(check=exc_type is None)
        return False

    def start(self):
        self._listener = self._listen(0)
        self.port = self._listener.getsockname()[1]
        self.url = "http://%s:%d" % (LOOPBACK, self.port)
        self._accept_thread = threading.Thread(target=self._accept_loop,
                                               name="FaultProxy-accept", daemon=True)
        self._accept_thread.start()
        return self

    def stop(self, check=True):
        """Closes every socket and joins every thread. With check, raises if a
        connection thread hit a proxy bug during the run."""
        self._stopping.set()
        self._release.set()
        if self._accept_thread is not None:
            self._accept_thread.join(10)
            if self._accept_thread.is_alive():
                raise RuntimeError("FaultProxy: accept thread did not stop")
            self._accept_thread = None
        if self._listener is not None:  # start() failed half-way
            _close_quietly(self._listener)
            self._listener = None
        with self._mu:
            conns = list(self._conns)
            socks = list(self._socks)
        for s in socks:
            _close_quietly(s)
        for c in conns:
            c.thread.join(10)
            if c.thread.is_alive():
                raise RuntimeError("FaultProxy: a connection thread did not stop")
        if check and self._errors:
            raise RuntimeError("FaultProxy internal errors: %s" % "; ".join(self._errors))

    @staticmethod
    def _listen(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
            s.listen(128)
        except OSError:
            s.close()
            raise
        # A timeout lets the accept loop notice down(), up() and stop().
        s.settimeout(0.05)
        return s

    def _accept_loop(self):
        # Only this thread opens and closes the listener (after start), so no
        # accept() ever runs on a socket closed under it.
        while True:
            with self._mu:
                want_up = self._want_up and not self._stopping.is_set()
                gen = self._want_gen
            if want_up and self._listener is None:
                try:
                    self._listener = self._listen(self.port)
                    self._listen_error = None
                except OSError as e:
                    self._listen_error = e
            elif not want_up and self._listener is not None:
                _close_quietly(self._listener)
                self._listener = None
            with self._cv:
                self._applied_gen = gen
                self._cv.notify_all()
            if self._stopping.is_set():
                return
            if self._listener is None:
                self._stopping.wait(0.02)
                continue
            try:
                client, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(self, client)
            conn.thread = threading.Thread(target=conn.run, name="FaultProxy-conn", daemon=True)
            with self._mu:
                self._conns.add(conn)
                self._socks.add(client)
            conn.thread.start()

    def _track(self, sock):
        with self._mu:
            self._socks.add(sock)

    def _untrack(self, sock):
        with self._mu:
            self._socks.discard(sock)

    def _forget(self, conn):
        with self._mu:
            self._conns.discard(conn)

    # -- controls
    def latency(self, seconds):
        with self._mu:
            self._latency = float(seconds)

    def fail_next(self, n, status=503, retry_after=None):
        with self._mu:
            self._faults.extend(_Fault("fail", status=status, retry_after=retry_after)
                                for _ in range(n))

    def reset_next(self, n, after_bytes=0):
        with self._mu:
            self._faults.extend(_Fault("reset", after_bytes=after_bytes) for _ in range(n))

    def stall_next(self, n, after_bytes, seconds):
        self._release.clear()
        with self._mu:
            self._faults.extend(_Fault("stall", after_bytes=after_bytes, seconds=seconds)
                                for _ in range(n))

    def release(self):
        """Ends every stall in progress (and ones that start before the next
        stall_next)."""
        self._release.set()

    def clear_faults(self):
        with self._mu:
            self._faults.clear()

    def pending_faults(self):
        with self._mu:
            return len(self._faults)

    def down(self):
        """Refuses connections: closes the listener and every open connection
        (clients see them reset). Returns once connections are refused."""
        self._set_listening(False)
        with self._mu:
            socks = list(self._socks)
        for s in socks:
            _close_quietly(s)

    def up(self):
        """Accepts connections on the same port again."""
        self._set_listening(True)
        if self._listen_error is not None:
            raise RuntimeError("FaultProxy: cannot listen on port %d again: %s" % (
                self.port, self._listen_error))

    def _set_listening(self, want):
        with self._cv:
            self._want_up = want
            self._want_gen += 1
            gen = self._want_gen
            if not self._cv.wait_for(lambda: self._applied_gen >= gen, timeout=10):
                raise RuntimeError("FaultProxy: the accept thread did not answer")

    # -- counters
    @property
    def requests(self):
        with self._mu:
            return len(self._log)

    @property
    def bytes_sent(self):
        with self._mu:
            return self._bytes_sent

    def requests_per_path(self):
        with self._mu:
            return dict(collections.Counter(path for _, path, _ in self._log))

    def ranges(self):
        with self._mu:
            return [(path, rng) for _, path, rng in self._log]

    def requests_log(self):
        with self._mu:
            return list(self._log)

    def reset_counters(self):
        with self._mu:
            self._log = []
            self._bytes_sent = 0

    # -- used by connection threads
    def _begin_request(self, method, path, rng):
        with self._mu:
            self._log.append((method, path, rng))
            fault = self._faults.popleft() if self._faults else None
            return fault, self._latency

    def _count_bytes(self, n):
        with self._mu:
            self._bytes_sent += n

    def _stall(self, seconds):
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._release.wait(min(left, 0.05)):
                return


# --------------------------------------------------------------------------- s3rver

class S3Server(_ServerProcess):
    """@20minutes/s3rver (an S3-compatible server that checks SigV4) started
    with node from tests/remote/s3rver/serve.js, with its own temp directory,
    one bucket and one access key pair.

    .endpoint  "http://127.0.0.1:PORT" (path-style: endpoint/bucket/key)
    .bucket, .access_key, .secret_key, .region, .pid

    s3rver lets requests with no signature at all through as anonymous; only
    a request signed with a wrong secret proves signatures are checked.
    """

    def __init__(self, bucket="shards", access_key="shardfs-test", secret_key=None,
                 region="us-east-1"):
        self.bucket = bucket
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_hex(16)
        self.region = region
        self.dir = None
        self.port = None
        self.endpoint = None
        self._proc = None

    def start(self):
        node = require_tool("node")
        version = subprocess.run([node, "--version"], stdout=subprocess.PIPE,
                                 timeout=30).stdout.decode().strip()
        if int(version.lstrip("v").split(".")[0] or 0) < 20:
            raise RuntimeError("node %s is too old: @20minutes/s3rver 4.x needs Node.js >= 20"
                               % version)
        serve = os.path.join(S3RVER_DIR, "serve.js")
        pkg = os.path.join(S3RVER_DIR, "node_modules", "@20minutes", "s3rver", "package.json")
        if not os.path.exists(pkg):
            raise RuntimeError("@20minutes/s3rver is not installed in %s: run "
                               "scripts/install-test-servers.sh" % S3RVER_DIR)
        self.dir = tempfile.mkdtemp(prefix="shardfs-s3rver-")
        log = os.path.join(self.dir, "s3rver.log")
        with open(log, "wb") as logf:
            self._proc = subprocess.Popen(
                [node, serve, "--address", LOOPBACK, "--port", "0",
                 "--directory", os.path.join(self.dir, "data"), "--bucket", self.bucket,
                 "--access-key", self.access_key, "--secret-key", self.secret_key],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logf)
        # serve.js prints "listening PORT" once it accepts connections.
        line = _readline_with_timeout(self._proc.stdout, START_TIMEOUT_S)
        if not line.startswith(b"listening "):
            _stop_process(self._proc)
            raise RuntimeError("s3rver did not start (stdout %r); log:\n%s" % (
                line, _read_text(log)))
        self.port = int(line.split()[1])
        self.endpoint = "http://%s:%d" % (LOOPBACK, self.port)
        return self

    def stop(self):
        _stop_process(self._proc)
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def url(self, key, endpoint=None):
        """The path-style URL of `key` (endpoint defaults to .endpoint; pass a
        FaultProxy's .url to go through it)."""
        return "%s/%s/%s" % (endpoint or self.endpoint, self.bucket,
                             urllib.parse.quote(key, safe="/-_.~"))

    def s3_url(self, key):
        return "s3://%s/%s" % (self.bucket, key)

    def curl_args(self, secret_key=None):
        """curl arguments that sign a request with SigV4 (curl 7.75+); the
        x-amz-content-sha256 header is one curl 7.88 does not add itself."""
        return [require_tool("curl"), "-sS", "--aws-sigv4", "aws:amz:%s:s3" % self.region,
                "--user", "%s:%s" % (self.access_key, secret_key or self.secret_key),
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]

    def put(self, key, data):
        """Uploads `data` (bytes, or the path of a file) as `key`."""
        path = data
        if isinstance(data, (bytes, bytearray, memoryview)):
            fd, path = tempfile.mkstemp(dir=self.dir, prefix="put-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        try:
            p = subprocess.run(self.curl_args() + ["--fail-with-body", "-T", path, self.url(key)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        finally:
            if path is not data:
                os.unlink(path)
        if p.returncode != 0:
            raise RuntimeError("S3 PUT %s failed (curl %d): %s %s" % (
                key, p.returncode, p.stderr.decode("utf-8", "replace"),
                p.stdout[-2000:].decode("utf-8", "replace")))

    def env(self):
        """The AWS_* variables a client needs to reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
        }


def _readline_with_timeout(pipe, timeout_s):
    """One line from a child's stdout, or b"" if none came within timeout_s."""
    out = []
    t = threading.Thread(target=lambda: out.append(pipe.readline()), daemon=True)
    t.start()
    t.join(timeout_s)
    return out[0] if out else b""


def http_get(url, headers=None, ca_file=None, timeout=10):
    """(status, headers dict, body) of a GET with urllib; HTTP errors are
    returned, not raised."""
    req = urllib.request.Request(url, headers=headers or {})
    ctx = ssl.create_default_context(cafile=ca_file) if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


# --------------------------------------------------------------------------- RangeServer
# A server that misbehaves on purpose (for test_remote_trust.py): kept apart
# from the proxy above, which relays an honest server's answers.

import email.utils as _email_utils  # noqa: E402
import http.server as _http_server  # noqa: E402

KEEP = object()  # RangeServer.misbehave: leave this part of the answer as it was.


class RangeServer:
    """An HTTP/1.1 range server in threads of the test process (stdlib only),
    over https with a self-signed certificate (.ca_file) if tls=True.

    Honest by default, as nginx: byte ranges, a strong ETag and a
    Last-Modified per object, 412 for an If-Match that does not match.
    misbehave(path, ...) then changes what it answers for one path, the way
    real servers do: ignore If-Match and serve other bytes (body), send
    another, a weak or no ETag (etag=None), another or no Last-Modified
    (last_modified=None), answer a status (404), or redirect (location).
    behave(path) makes it honest again. Every request is logged in
    .requests as (method, path, range header, if-match header)."""

    def __init__(self, tls=False, cert_dir=None):
        self.tls = tls
        self._cert_dir = cert_dir
        self._own_cert_dir = None
        self.ca_file = None
        self._objects = {}  # path -> (body, etag, last_modified)
        self._faults = {}   # path -> dict of overrides
        self._lock = threading.Lock()
        self.requests = []
        self._httpd = None
        self._thread = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    @property
    def url(self):
        host, port = self._httpd.server_address[:2]
        return "%s://%s:%d" % ("https" if self.tls else "http", host, port)

    def put(self, path, data, etag=KEEP, last_modified=KEEP):
        """Serves `data` at `path`: with a fresh strong ETag and a
        Last-Modified of now unless given (None: no such header)."""
        if etag is KEEP:
            etag = '"%s"' % secrets.token_hex(8)
        if last_modified is KEEP:
            last_modified = _email_utils.formatdate(time.time(), usegmt=True)
        with self._lock:
            self._objects[path] = (bytes(data), etag, last_modified)
            self._faults.pop(path, None)

    def etag(self, path):
        with self._lock:
            return self._objects[path][1]

    def misbehave(self, path, body=KEEP, etag=KEEP, last_modified=KEEP, status=None,
                  location=None):
        """From now on `path` is answered against the rules; any of `body`,
        `etag`, `last_modified` given replaces that part of the answer and
        makes the server ignore If-Match."""
        with self._lock:
            self._faults[path] = {"body": body, "etag": etag, "last_modified": last_modified,
                                  "status": status, "location": location}

    def behave(self, path):
        with self._lock:
            self._faults.pop(path, None)

    def start(self):
        server = self

        class Handler(_http_server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 60  # An idle kept-alive connection ends its thread.

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._answer(head=True)

            def do_GET(self):
                self._answer(head=False)

            def _send(self, code, headers, body, head):
                self.send_response(code)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _answer(self, head):
                path = urllib.parse.urlsplit(self.path).path
                rng = self.headers.get("Range")
                if_match = self.headers.get("If-Match")
                with server._lock:
                    server.requests.append((self.command, path, rng, if_match))
                    obj = server._objects.get(path)
                    fault = server._faults.get(path)
                if obj is None:
                    return self._send(404, [], b"not found\n", head)
                body, etag, last_modified = obj
                honour_if_match = True
                if fault is not None:
                    if fault["location"] is not None:
                        return self._send(302, [("Location", fault["location"])], b"", head)
                    if fault["status"] is not None:
                        return self._send(fault["status"], [], b"gone\n", head)
                    for key in ("body", "etag", "last_modified"):
                        if fault[key] is not KEEP:
                            honour_if_match = False
                    body = body if fault["body"] is KEEP else fault["body"]
                    etag = etag if fault["etag"] is KEEP else fault["etag"]
                    if fault["last_modified"] is not KEEP:
                        last_modified = fault["last_modified"]
                if honour_if_match and if_match is not None and if_match != etag:
                    return self._send(412, [], b"", head)
                headers = []
                if etag is not None:
                    headers.append(("ETag", etag))
                if last_modified is not None:
                    headers.append(("Last-Modified", last_modified))
                if rng is None:
                    return self._send(200, headers, body, head)
                first, _, last = rng[len("bytes="):].partition("-")
                first = int(first)
                last = min(int(last) if last else len(body) - 1, len(body) - 1)
                headers.append(("Content-Range", "bytes %d-%d/%d" % (first, last, len(body))))
                return self._send(206, headers, body[first:last + 1], head)

        httpd = _http_server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        httpd.daemon_threads = True
        if self.tls:
            if self._cert_dir is None:
                self._own_cert_dir = tempfile.mkdtemp(prefix="shardfs-rangeserver-")
                self._cert_dir = self._own_cert_dir
            cert, key = make_self_signed_cert(self._cert_dir)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
            self.ca_file = cert
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="RangeServer", daemon=True)
        self._thread.start()

    def stop(self):
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=10)
            self._httpd = None
        if self._own_cert_dir is not None:
            shutil.rmtree(self._own_cert_dir, ignore_errors=True)
            self._own_cert_dir = None
