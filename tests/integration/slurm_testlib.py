"""A single-node Slurm of the test's own (Python 3 stdlib only).

SingleNodeSlurm(tmp) is a context manager that, as root, in the folder `tmp`
(made if missing; every directory above it must be searchable by all, as
munged checks):
- makes a munge key and runs its own munged (its key, socket, pid, log and
  seed files all in `tmp`: nothing system-wide is read or written);
- writes a slurm.conf with spare ports, its own state, spool, log and pid
  files, and one node (this host, 2 CPUs) in one default partition;
- runs slurmctld and slurmd in the foreground (-D) as its own children;
- waits, bounded, until the node is idle.
On exit, even after a failure, it cancels the jobs left, stops every daemon
it started by its PID, then any job step (slurmstepd, a job's processes)
still running, found by this cluster's SLURM_CONF in its environment. `env` is the environment for the Slurm commands (SLURM_CONF set);
`logs()` is every daemon's log, for failure messages.

The packages are Debian 12's slurm-wlm and munge (scripts/install-deps.sh
test). Nothing here skips: a Slurm that cannot start raises with the logs.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

# Slurm 22.05's daemons and clients, and munge's.
PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol",
            "scancel")


class SlurmError(AssertionError):
    pass


def _spare_ports(n):
    """n TCP ports free on 127.0.0.1 right now (the kernel's choice)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _with_env(marker):
    """PIDs of the live processes whose environment holds `marker` (bytes
    "NAME=VALUE"): what the daemons started here forked, whatever session or
    parent it has now (slurmstepd calls setsid, and outlives a killed slurmd)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                env = f.read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if marker in env and _alive(int(name)):
            out.append(int(name))
    return out


class SingleNodeSlurm:
    def __init__(self, tmp, cpus=2, start_timeout=30.0):
        self.tmp = tmp
        self.cpus = cpus
        self.start_timeout = start_timeout
        self.node = socket.gethostname().split(".")[0]
        self.conf = os.path.join(tmp, "slurm.conf")
        self.run_dir = os.path.join(tmp, "run")  # munge's socket, the pid files
        self.log_dir = os.path.join(tmp, "log")
        self.munge_socket = os.path.join(self.run_dir, "munge.socket")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.procs = {}  # name -> Popen, in start order

    # -- setup ------------------------------------------------------------

    def __enter__(self):
        missing = [p for p in PROGRAMS if shutil.which(p) is None]
        if missing:
            raise SlurmError("not installed: %s (scripts/install-deps.sh test installs "
                             "slurm-wlm and munge)" % ", ".join(missing))
        if os.geteuid() != 0:
            raise SlurmError("a single-node Slurm runs its daemons as root; run this test as root")
        try:
            self._start()
        except BaseException as e:
            self.__exit__(type(e), e, None)
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.stop()
        except SlurmError as e:
            if exc is None:
                raise
            print("while handling the failure: %s" % e, file=sys.stderr)  # keep the first error
        return False

    def _start(self):
        # munged wants every directory above its socket searchable by all
        # (the caller sees to those above `tmp`), and its key readable by its
        # own user only.
        os.makedirs(self.tmp, exist_ok=True)
        os.chmod(self.tmp, 0o755)
        key_dir = os.path.join(self.tmp, "munge")
        for d, mode in ((key_dir, 0o700), (self.run_dir, 0o755), (self.log_dir, 0o755)):
            os.makedirs(d)
            os.chmod(d, mode)
        for d in ("state", "spool"):
            os.makedirs(os.path.join(self.tmp, d))
        key = os.path.join(key_dir, "munge.key")
        subprocess.run(["mungekey", "--create", "--keyfile", key, "--bits", "1024"], check=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
        self._spawn("munged", ["munged", "--foreground", "--key-file", key,
                               "--socket", self.munge_socket,
                               "--pid-file", os.path.join(self.run_dir, "munged.pid"),
                               "--log-file", os.path.join(self.log_dir, "munged.log"),
                               "--seed-file", os.path.join(key_dir, "munged.seed")])
        self._wait("munged's socket", lambda: os.path.exists(self.munge_socket), ["munged"])

        self._write_conf(*_spare_ports(2))
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", self.conf])
        self._spawn("slurmd", ["slurmd", "-D", "-f", self.conf])
        self._wait("node %s idle" % self.node, self._node_idle, ["munged", "slurmctld", "slurmd"])

    def _write_conf(self, ctld_port, slurmd_port):
        t = self.tmp
        plugstack = os.path.join(t, "plugstack.conf")  # none of the system's SPANK plugins
        open(plugstack, "w").close()
        lines = [
            "ClusterName=shardfstest",
            "SlurmctldHost=%s(127.0.0.1)" % self.node,
            "SlurmctldPort=%d" % ctld_port,
            "SlurmdPort=%d" % slurmd_port,
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "AuthInfo=socket=%s" % self.munge_socket,
            "CredType=cred/munge",
            "StateSaveLocation=%s/state" % t,
            "SlurmdSpoolDir=%s/spool" % t,
            "SlurmctldPidFile=%s/slurmctld.pid" % self.run_dir,
            "SlurmdPidFile=%s/slurmd.pid" % self.run_dir,
            "SlurmctldLogFile=%s/slurmctld.log" % self.log_dir,
            "SlurmdLogFile=%s/slurmd.log" % self.log_dir,
            "PlugStackConfig=%s" % plugstack,
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin",
            "MpiDefault=none",
            "MailProg=/bin/true",  # Debian installs no mail program
            "ReturnToService=2",
            "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "NodeName=%s NodeAddr=127.0.0.1 CPUs=%d State=UNKNOWN" % (self.node, self.cpus),
            "PartitionName=test Nodes=%s Default=YES MaxTime=INFINITE State=UP" % self.node,
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _spawn(self, name, argv):
        out = open(os.path.join(self.log_dir, name + ".out"), "wb")
        try:
            # Its own session: a signal to the test's terminal does not reach it
            # before stop() does.
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        finally:
            out.close()
        self.procs[name] = p

    def _wait(self, what, ready, daemons):
        end = time.monotonic() + self.start_timeout
        while True:
            for d in daemons:
                if self.procs[d].poll() is not None:
                    raise SlurmError("%s exited with %d while waiting for %s\n%s" % (
                        d, self.procs[d].returncode, what, self.logs()))
            if ready():
                return
            if time.monotonic() > end:
                raise SlurmError("no %s after %.0f s\n%s" % (what, self.start_timeout,
                                                             self.logs()))
            time.sleep(0.1)

    def _node_idle(self):
        p = subprocess.run(["sinfo", "--noheader", "--Node", "--nodes", self.node,
                            "--format", "%T"], env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=10)
        return p.returncode == 0 and p.stdout.decode().strip() == "idle"

    # -- use --------------------------------------------------------------

    def run(self, argv, timeout, **kw):
        """Runs a Slurm client command with this cluster's SLURM_CONF."""
        return subprocess.run(argv, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout, **kw)

    def job_records(self, job_id):
        """`scontrol show job -o JOB`, one dict per array task (slurmctld keeps
        finished jobs for MinJobAge, 300 s by default)."""
        p = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=20)
        if p.returncode != 0:
            raise SlurmError("scontrol show job %s: %s\n%s" % (
                job_id, p.stderr.decode(errors="replace"), self.logs()))
        out = []
        for line in p.stdout.decode().splitlines():
            rec = {}
            for field in line.split():
                k, _, v = field.partition("=")
                rec[k] = v
            if rec:
                out.append(rec)
        return out

    def logs(self):
        parts = []
        for name in sorted(os.listdir(self.log_dir)) if os.path.isdir(self.log_dir) else []:
            with open(os.path.join(self.log_dir, name), "rb") as f:
                text = f.read()[-6000:].decode(errors="replace")
            parts.append("---- %s ----\n%s" % (name, text))
        return "\n".join(parts) or "(no daemon logs)"

    # -- teardown ---------------------------------------------------------

    def stop(self, timeout=15.0):
        """Cancels the jobs left, stops the daemons (newest first: SIGTERM,
        SIGKILL after `timeout`), then the job steps left. Idempotent."""
        ctld = self.procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            try:
                self.run(["scancel", "--user", str(os.geteuid())], timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for name in reversed(list(self.procs)):
            p = self.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        # Job steps left (slurmstepd and the job's own processes), found by
        # their environment and stopped by PID, never by name. A slurmstepd
        # whose job still runs may ignore SIGTERM.
        marker = os.fsencode("SLURM_CONF=" + self.conf)
        end = time.monotonic() + 5
        sig = signal.SIGTERM
        while True:
            left = _with_env(marker)
            if not left:
                break
            if time.monotonic() > end:
                if sig == signal.SIGKILL:
                    raise SlurmError("job steps of this Slurm outlived SIGKILL: %s" % left)
                sig, end = signal.SIGKILL, time.monotonic() + 5
            for pid in left:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        self.procs.clear()
