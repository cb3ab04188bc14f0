"""A real network filesystem for the integration tests (Python 3 stdlib only).

NetFs, a context manager (run as root), builds in a temporary directory of
its own:
- an sshd of its own: its own ed25519 host key and client key (ssh-keygen),
  its own sshd_config (ListenAddress 127.0.0.1 on a spare port, HostKey,
  AuthorizedKeysFile and PidFile in the temporary directory, StrictModes no,
  PermitRootLogin prohibit-password, UsePAM no, PermitUserRC no, Subsystem
  sftp internal-sftp), run as `/usr/sbin/sshd -D -e -f CONF`,
  a child of this process. It exports NetFs.export, a directory in the
  temporary directory. Neither side reads or writes ~/.ssh or /etc/ssh: the
  client is a wrapper script running `ssh -F /dev/null` with the temporary
  known_hosts, the temporary key only (IdentitiesOnly, no agent), BatchMode.
- DelayProxy, a loopback TCP proxy in front of sshd that holds every chunk
  for rtt/2 in each direction (threads; each chunk is stamped when read and
  sent once its time has come, in order), so that sshfs sees that round-trip
  time on top of loopback's.
- sshfs mounts of the export through the proxy (NetFs.mount), optionally
  with the server's metadata calls counted: the mount's sftp-server then runs
  under `strace -f --seccomp-bpf -y -e trace=METADATA_SYSCALLS -o FILE` (sshfs
  -o sftp_server=SCRIPT, a script that execs /usr/lib/openssh/sftp-server,
  the same code as sshd's internal-sftp; sshd runs the script through root's
  login shell, which costs a counted mount a second or two of shell start-up
  on some machines, untraced), and after unmount
  SshfsMount.export_syscalls() gives {syscall: calls} of those that name a
  path in the export (as an argument, or through a descriptor opened there:
  strace -y), metadata_calls() their sum, and syscalls() every traced call,
  sftp-server's own start-up included. A full trace rather than `strace -c`,
  whose table cannot tell the export's calls from sftp-server's own:
  loading libc, reading /etc/passwd, and a stat of /etc/localtime for every
  entry of a directory listing (glibc's localtime, for the long names).
- Faults: stop_sshd() stops sshd and cuts every connection through the proxy
  (as a server going away does); start_sshd() starts it again on the same
  port.

On exit, also after a failure, it unmounts every sshfs mount it made
(fusermount3 -u, then lazily), stops every process it started (sshd, sshfs,
and the sshd session processes and ssh clients those started, each checked by
PID and start time), and removes its temporary directory.

sshfs options (SSHFS_OPTIONS) and why:
- sshfs's own caches stay at their defaults, as a user gets them: the
  directory cache (dir_cache=yes: names, attributes and symlink targets of
  listed directories, dcache_timeout 20 s) and readahead of reads; the kernel
  caches entries and attributes for 1 s (sshfs's entry_timeout/attr_timeout
  defaults) and file pages while a file is open (no kernel_cache, so pages
  are dropped at each open).
- reconnect: after the connection is lost, sshfs answers each request with
  EIO after one failed attempt to connect again (at once while the server
  refuses connections), and the next request after the server is back
  reconnects; descriptors opened before the loss keep failing with EIO, so a
  reader must open its files again. Without it (checked here), sshfs exits
  when the connection ends and, run as root, detaches its own mount: open
  descriptors then give ENOTCONN and the mount point is the empty local
  directory again (opens give ENOENT, a write would land on the local disk)
  until sshfs is mounted anew.
- ServerAliveInterval=1, ServerAliveCountMax=5: ssh gives up on a silent
  connection (a server or network that vanished without closing it) after
  about 5 s instead of TCP's hours; sshfs then fails every pending request.
- ConnectTimeout=10: an attempt to reconnect waits at most 10 s.
So a request to sshfs should be answered within about 15 s whatever the
server does (the tests stop the server and close its connections; a
silently vanished network is not exercised).
"""

import collections
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"

# What counts as a metadata call of the storage server (the calls a network
# filesystem's metadata server answers): opening a file or directory,
# stat-like calls, directory listing, symlinks, access checks, filesystem
# statistics. read/pread/lseek/close and the rest are not counted.
METADATA_SYSCALLS = frozenset([
    "open", "openat", "openat2", "creat",
    "stat", "lstat", "fstat", "newfstatat", "statx",
    "getdents", "getdents64",
    "readlink", "readlinkat",
    "access", "faccessat", "faccessat2",
    "statfs", "fstatfs",
])

SERVER_ALIVE_INTERVAL_S = 1
SERVER_ALIVE_COUNT_MAX = 5
CONNECT_TIMEOUT_S = 10
SSHFS_OPTIONS = ["reconnect"]


def require_root():
    if os.geteuid() != 0:
        raise RuntimeError("the network filesystem tests run sshd and sshfs as root")


def require_tools():
    """Fails loudly (never skips) when a tool of the rig is missing:
    scripts/install-deps.sh test installs them."""
    missing = [t for t in (SSHD, SFTP_SERVER) if not os.access(t, os.X_OK)]
    missing += [t for t in ("ssh", "ssh-keygen", "sshfs", "strace", "fusermount3")
                if shutil.which(t) is None]
    if missing:
        raise RuntimeError("missing for the network filesystem tests: %s "
                           "(bash scripts/install-deps.sh test)" % ", ".join(missing))


def spare_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_time(pid):
    """The start time of `pid` (clock ticks since boot), or None if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


def _children_of(pid):
    out = []
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            out = [int(x) for x in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


class ProcessTracker:
    """Processes this rig started, directly or through sshd and sshfs, as
    (pid, start time) pairs, so that a later kill never hits a reused PID."""

    def __init__(self):
        self._seen = {}
        self._lock = threading.Lock()

    def note_tree(self, pid):
        """Notes `pid` and its descendants as they are now."""
        todo = [pid]
        while todo:
            p = todo.pop()
            st = _start_time(p)
            if st is None:
                continue
            with self._lock:
                self._seen[p] = st
            todo.extend(_children_of(p))

    def kill_all(self, sig=signal.SIGKILL):
        """Sends `sig` to every noted process still running (same PID, same
        start time). Returns how many it signalled."""
        n = 0
        with self._lock:
            items = list(self._seen.items())
        for pid, st in items:
            if _start_time(pid) == st:
                try:
                    os.kill(pid, sig)
                    n += 1
                except ProcessLookupError:
                    pass
        return n


class DelayProxy:
    """A TCP proxy on 127.0.0.1 that forwards to `target_port` and holds
    every chunk for `rtt_s / 2` in each direction, keeping byte order.

    cut() closes every connection it carries; new connections are forwarded
    again at once (while the target refuses them, they are closed at once)."""

    def __init__(self, target_port, rtt_s):
        self.target_port = target_port
        self.one_way_s = rtt_s / 2.0
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._conns = []  # Guarded by _lock: (client, upstream) socket pairs.
        self._closed = False
        self._threads = []
        self.connections = 0
        self._down = 0  # Guarded by _lock: bytes read from the server, for clients.
        t = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)
        t.start()
        self._threads.append(t)

    def _accept_loop(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # Closed.
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()  # The server is down: refuse, as a dead host's port would.
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._conns.append((client, upstream))
                self.connections += 1
            for src, dst, down in ((client, upstream, False), (upstream, client, True)):
                self._pump(src, dst, down)

    def bytes_down(self):
        """The bytes the server has sent its clients through this proxy so
        far (ssh's framing and encryption included: a few percent)."""
        with self._lock:
            return self._down

    def _pump(self, src, dst, down):
        """Two threads: one reads `src` and stamps each chunk (counted in
        bytes_down when `down`), one sends each chunk to `dst` once rtt/2
        has passed since it was read."""
        chunks = queue.SimpleQueue()

        def reader():
            while True:
                try:
                    data = src.recv(1 << 16)
                except OSError:
                    data = b""
                if down:
                    with self._lock:
                        self._down += len(data)
                chunks.put((time.monotonic() + self.one_way_s, data))
                if not data:
                    return

        def writer():
            while True:
                due, data = chunks.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    try:
                        src.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return

        for fn in (reader, writer):
            t = threading.Thread(target=fn, daemon=True)
            t.start()

    def cut(self):
        """Closes every connection now (both ends see it end)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for pair in conns:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self):
        with self._lock:
            self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self.cut()


_TRACE_LINE = re.compile(r"^(?:\d+ +)?([a-z0-9_]+)\((.*)$")


_OPENED_PATH = re.compile(r'^"([^"]*)"')


def parse_trace(text, under):
    """From the output of `strace -f -y -o FILE`: ({syscall: calls},
    {syscall: calls that name a path at or below `under`, as an argument or
    as the path of a descriptor}, {path below `under`: opens}). A call split
    by another process's (<unfinished ...> / <... resumed>) counts once."""
    every, on, opens = collections.Counter(), collections.Counter(), collections.Counter()
    marks = tuple(q + under + end for q in ('"', "<") for end in ('"', ">", "/"))
    for line in text.splitlines():
        m = _TRACE_LINE.match(line)
        if not m:
            continue  # "<... resumed>", "+++ exited", "--- SIG".
        name, args = m.groups()
        every[name] += 1
        if any(mark in args for mark in marks):
            on[name] += 1
            if name in ("open", "openat", "openat2", "creat"):
                if name != "open" and name != "creat":
                    args = args.split(", ", 1)[-1]  # After the directory descriptor.
                path = _OPENED_PATH.match(args)
                if path and path.group(1).startswith(under + "/"):
                    opens[path.group(1)[len(under) + 1:]] += 1
    return dict(every), dict(on), dict(opens)


def _unmount_fuse(mnt):
    """fusermount3 -u, retried while busy, then lazily. Returns a problem
    text or None."""
    last = ""
    for _ in range(25):
        if not _in_mount_table(mnt):
            return None
        p = subprocess.run(["fusermount3", "-u", mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        last = p.stderr.decode(errors="replace").strip()
        if not _in_mount_table(mnt):
            return None
        time.sleep(0.2)
    subprocess.run(["fusermount3", "-u", "-z", mnt], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE)
    return "fusermount3 -u %s kept failing (%s); detached lazily" % (mnt, last)


def _in_mount_table(mnt):
    want = os.path.realpath(mnt)
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 1 and fields[1].replace("\\040", " ") == want:
                return True
    return False


class SshfsMount:
    """One `sshfs -f` of the export at `mnt` (made by NetFs.mount)."""

    def __init__(self, netfs, mnt, count_syscalls, extra_options):
        self.netfs = netfs
        self.mnt = mnt
        self.proc = None
        self.trace_out = None
        self._counts = None
        self._log = None
        opts = list(SSHFS_OPTIONS) + list(extra_options)
        if count_syscalls:
            n = netfs._next_id()
            self.trace_out = os.path.join(netfs.tmp, "sftp-trace-%d.txt" % n)
            script = os.path.join(netfs.tmp, "sftp-trace-%d.sh" % n)
            with open(script, "w") as f:
                f.write("#!/bin/sh\nexec %s -f --seccomp-bpf -y -e trace=%s -o %s %s\n" % (
                    shutil.which("strace"), ",".join(sorted(METADATA_SYSCALLS)),
                    self.trace_out, SFTP_SERVER))
            os.chmod(script, 0o755)
            opts.append("sftp_server=" + script)
        self.argv = ["sshfs", "-f", "-p", str(netfs.proxy.port),
                     "-o", "ssh_command=" + netfs.ssh_client]
        if opts:
            self.argv += ["-o", ",".join(opts)]
        self.argv += ["root@127.0.0.1:" + netfs.export, mnt]

    def start(self, deadline=30.0):
        self._log = tempfile.NamedTemporaryFile(prefix="sshfs-", suffix=".log", dir=self.netfs.tmp,
                                                delete=False)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self._log)
        self.netfs.tracker.note_tree(self.proc.pid)
        end = time.monotonic() + deadline
        while not _in_mount_table(self.mnt):
            if self.proc.poll() is not None:
                raise RuntimeError("sshfs exited %d before mounting %s:\n%s" % (
                    self.proc.returncode, self.mnt, self.log()))
            if time.monotonic() > end:
                self.stop()
                raise RuntimeError("sshfs did not mount %s within %.0f s:\n%s" % (
                    self.mnt, deadline, self.log()))
            time.sleep(0.02)
        self.netfs.tracker.note_tree(self.proc.pid)  # Its ssh client.
        return self

    def log(self):
        if self._log is None:
            return ""
        with open(self._log.name, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        """Unmounts (fusermount3 -u, lazily as a last resort) and waits for
        sshfs to exit, killing it by PID if it does not. Returns a problem
        text or None."""
        if self.proc is None:
            return None
        problem = _unmount_fuse(self.mnt)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)
            problem = (problem or "") + " sshfs pid %d did not exit; killed" % self.proc.pid
        self.proc = None
        if self._log is not None:
            self._log.close()
        if self in self.netfs._mounts:
            self.netfs._mounts.remove(self)
        return problem

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        problem = self.stop()
        if problem and exc_type is None:
            raise RuntimeError(problem)
        return False

    def _parse(self, timeout=20.0):
        if self.trace_out is None:
            raise ValueError("mounted without count_syscalls")
        if self._counts is None:
            if self.proc is not None:
                raise ValueError("the server's calls are counted once the mount is stopped")
            # strace has written everything once sftp-server exits (its
            # connection ended with the unmount).
            end = time.monotonic() + timeout
            text = ""
            while time.monotonic() < end:
                if os.path.exists(self.trace_out):
                    with open(self.trace_out) as f:
                        text = f.read()
                    if "+++ exited" in text or "+++ killed" in text:
                        break
                time.sleep(0.05)
            else:
                raise RuntimeError("sftp-server under strace did not end within %.0f s (%s)" % (
                    timeout, self.trace_out))
            self._counts = parse_trace(text, self.netfs.export)
        return self._counts

    def syscalls(self):
        """{syscall: calls} of this mount's sftp-server, METADATA_SYSCALLS
        only (the only ones traced), on any path: its own start-up (the
        loader, /etc/passwd) and per-entry stat of /etc/localtime in
        directory listings included."""
        return self._parse()[0]

    def export_syscalls(self):
        """{syscall: calls} of METADATA_SYSCALLS on the export: those that
        name a path at or below NetFs.export, as an argument or through a
        descriptor opened there. What a storage server's metadata service
        would answer."""
        return self._parse()[1]

    def opens(self):
        """{path relative to the export: how often it was opened}."""
        return self._parse()[2]

    def metadata_calls(self):
        """The sum of export_syscalls()."""
        return sum(self.export_syscalls().values())


class NetFs:
    """sshd + delay proxy + sshfs mounts; see the module's docstring.

    Attributes: tmp (its temporary directory), export (the directory the
    server exports: write test data here, the server's local view), proxy."""

    def __init__(self, rtt_ms=1.0, prefix="shardfs-netfs-", parent=None):
        self.rtt_s = rtt_ms / 1000.0
        self.prefix = prefix
        self.parent = parent  # Where the temporary directory goes (None: tempfile's default).
        self.tmp = None
        self.sshd = None
        self.proxy = None
        self.tracker = ProcessTracker()
        self._mounts = []
        self._ids = 0
        self._sshd_log = None

    def _next_id(self):
        self._ids += 1
        return self._ids

    def __enter__(self):
        require_root()
        require_tools()
        self.tmp = tempfile.mkdtemp(prefix=self.prefix, dir=self.parent)
        try:
            self._setup()
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        problems = self._teardown()
        if problems and exc_type is None:
            raise RuntimeError("; ".join(problems))
        return False

    def _setup(self):
        t = self.tmp
        self.export = os.path.join(t, "export")
        os.mkdir(self.export)
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "shardfs-netfs", "-f"]
        self.host_key = os.path.join(t, "host_ed25519")
        self.client_key = os.path.join(t, "client_ed25519")
        for key in (self.host_key, self.client_key):
            subprocess.run(keygen + [key], check=True, stdout=subprocess.DEVNULL,
                           stdin=subprocess.DEVNULL)
        self.authorized_keys = os.path.join(t, "authorized_keys")
        shutil.copyfile(self.client_key + ".pub", self.authorized_keys)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir.
        self.sshd_port = spare_port()
        self.sshd_config = os.path.join(t, "sshd_config")
        with open(self.sshd_config, "w") as f:
            f.write("\n".join([
                "ListenAddress 127.0.0.1",
                "Port %d" % self.sshd_port,
                "HostKey %s" % self.host_key,
                "AuthorizedKeysFile %s" % self.authorized_keys,
                "PidFile %s" % os.path.join(t, "sshd.pid"),
                "StrictModes no",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "PermitUserRC no",
                "PermitUserEnvironment no",
                "PrintMotd no",
                "PrintLastLog no",
                "X11Forwarding no",
                "AllowTcpForwarding no",
                "AllowAgentForwarding no",
                "UseDNS no",
                "MaxStartups 100",
                "MaxSessions 100",
                "LogLevel ERROR",
                # In sshd's own process: a command (or an external
                # subsystem) starts through root's login shell, whose
                # start-up files this rig does not control (and which take
                # seconds on some machines).
                "Subsystem sftp internal-sftp",
                "",
            ]))
        self.known_hosts = os.path.join(t, "known_hosts")
        with open(self.host_key + ".pub") as f:
            host_pub = " ".join(f.read().split()[:2])
        self.start_sshd()
        self.proxy = DelayProxy(self.sshd_port, self.rtt_s)
        with open(self.known_hosts, "w") as f:
            # The client connects to the proxy's port; the host is the same.
            f.write("[127.0.0.1]:%d %s\n" % (self.proxy.port, host_pub))
        self.ssh_client = os.path.join(t, "ssh-client")
        with open(self.ssh_client, "w") as f:
            f.write("\n".join([
                "#!/bin/sh",
                "# ssh with this rig's key and known_hosts only: no ~/.ssh, no /etc/ssh.",
                "unset SSH_AUTH_SOCK",
                "exec ssh -F /dev/null -o UserKnownHostsFile=%s -o GlobalKnownHostsFile=/dev/null"
                " -o StrictHostKeyChecking=yes -o UpdateHostKeys=no -o IdentityFile=%s"
                " -o IdentitiesOnly=yes -o IdentityAgent=none -o BatchMode=yes"
                " -o ControlMaster=no -o ControlPath=none -o LogLevel=ERROR"
                " -o ServerAliveInterval=%d -o ServerAliveCountMax=%d -o ConnectTimeout=%d"
                ' "$@"' % (self.known_hosts, self.client_key, SERVER_ALIVE_INTERVAL_S,
                           SERVER_ALIVE_COUNT_MAX, CONNECT_TIMEOUT_S),
                "",
            ]))
        os.chmod(self.ssh_client, 0o755)

    def set_rtt(self, rtt_ms):
        """Changes the proxy's round-trip delay from now on (for chunks read
        from now; connections stay up), so one rig serves several delays."""
        self.rtt_s = rtt_ms / 1000.0
        self.proxy.one_way_s = self.rtt_s / 2.0

    def sshd_log(self):
        if self._sshd_log is None:
            return ""
        with open(self._sshd_log.name, "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def start_sshd(self, deadline=20.0):
        """Starts sshd (again) on its port; returns once it accepts."""
        if self.sshd is not None:
            raise RuntimeError("sshd is already running")
        if self._sshd_log is None:
            self._sshd_log = tempfile.NamedTemporaryFile(prefix="sshd-", suffix=".log",
                                                         dir=self.tmp, delete=False)
        self.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", self.sshd_config],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._sshd_log)
        self.tracker.note_tree(self.sshd.pid)
        end = time.monotonic() + deadline
        while True:
            if self.sshd.poll() is not None:
                code = self.sshd.returncode
                self.sshd = None
                raise RuntimeError("sshd exited %d:\n%s" % (code, self.sshd_log()))
            try:
                socket.create_connection(("127.0.0.1", self.sshd_port), timeout=1).close()
                return
            except OSError:
                pass
            if time.monotonic() > end:
                raise RuntimeError("sshd does not accept on port %d after %.0f s:\n%s" % (
                    self.sshd_port, deadline, self.sshd_log()))
            time.sleep(0.05)

    def note_sessions(self):
        """Notes sshd's session processes (and what they run) for the final
        cleanup."""
        if self.sshd is not None:
            self.tracker.note_tree(self.sshd.pid)
        for m in self._mounts:
            if m.proc is not None:
                self.tracker.note_tree(m.proc.pid)

    def _stop_sshd_process(self):
        """Stops the sshd this NetFs started (SIGTERM, then SIGKILL), by PID."""
        if self.sshd is None:
            return
        self.sshd.terminate()
        try:
            self.sshd.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.sshd.kill()
            self.sshd.wait(timeout=15)
        self.sshd = None

    def stop_sshd(self):
        """The server goes away: sshd stops (SIGTERM, by PID) and every
        connection through the proxy is cut, so its session processes end
        too. New connections are refused until start_sshd()."""
        self.note_sessions()
        self._stop_sshd_process()
        if self.proxy is not None:
            self.proxy.cut()

    def mount(self, mnt, count_syscalls=False, extra_options=()):
        """Mounts the export at `mnt` (an existing empty directory) with sshfs
        through the proxy. Returns an SshfsMount, usable in a `with`; NetFs's
        exit unmounts it if still mounted. With count_syscalls, the mount's
        sftp-server runs under strace: call syscalls() after stop()."""
        m = SshfsMount(self, mnt, count_syscalls, extra_options)
        self._mounts.append(m)
        try:
            m.start()
        except BaseException:
            if m in self._mounts:
                self._mounts.remove(m)
            raise
        self.note_sessions()
        return m

    def _teardown(self):
        problems = []
        for m in list(self._mounts):
            p = m.stop()
            if p:
                problems.append(p)
        self.note_sessions()
        if self.proxy is not None:
            self.proxy.close()
        self._stop_sshd_process()
        # Session processes end when their connection does; give them a
        # moment, then stop what is left by PID.
        time.sleep(0.2)
        if self.tracker.kill_all(signal.SIGTERM):
            time.sleep(0.5)
            self.tracker.kill_all(signal.SIGKILL)
        if self._sshd_log is not None:
            self._sshd_log.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return problems
