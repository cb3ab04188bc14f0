"""Where the time goes: `perf record -a -g` around an extra, untimed run of a bench row (the
benches' --perf DIR), so that a target not met comes with its profile and the timed runs stay
unprofiled.

Profile(directory, name) is a context manager: perf samples every CPU (-a, call graphs, 999 Hz)
while the body runs; on exit it is stopped with SIGINT, and `perf report` (self time, no
children, by command, object and symbol) is written to DIR/NAME.txt beside DIR/NAME.data.
`summary` then holds the top entries: [{"percent", "command", "object", "symbol"}], what the
bench's JSON keeps. perf must be installed (linux-perf: scripts/install-deps.sh test) and
allowed (root, or perf_event_paranoid <= -1 for -a).
"""

import os
import re
import shutil
import signal
import subprocess

from bench_common import BenchError

TOP = 15  # Entries kept in the report's JSON; the .txt has everything above 0.5%.
# "  12.34%  python3  [kernel.kallsyms]  [k] do_syscall_64"
_LINE = re.compile(r"^\s*([0-9.]+)%\s+(\S+)\s+(\S+)\s+\[(.)\]\s+(.+?)\s*$")


class Profile:
    def __init__(self, directory, name):
        self.directory, self.name = directory, name
        self.data = os.path.join(directory, f"{name}.data")
        self.text = os.path.join(directory, f"{name}.txt")
        self.proc = None
        self.summary = []

    def __enter__(self):
        if shutil.which("perf") is None:
            raise BenchError("--perf: perf is not installed (the package linux-perf)")
        os.makedirs(self.directory, exist_ok=True)
        self.proc = subprocess.Popen(
            ["perf", "record", "-a", "-g", "-F", "999", "--quiet", "-o", self.data],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise BenchError(f"perf record ({self.name}) did not stop")
        if not os.path.exists(self.data):
            raise BenchError(f"perf record ({self.name}) wrote nothing: {err.strip()[-300:]}")
        rep = subprocess.run(
            ["perf", "report", "-i", self.data, "--stdio", "--no-children", "-g", "none",
             "--sort", "comm,dso,sym", "--percent-limit", "0.5"],
            capture_output=True, text=True, timeout=600)
        # Who called the top symbols: in a virtual machine without NMIs, samples taken
        # while interrupts were off land where they are enabled again (pvm_irq_enable,
        # native_irq_enable...), so a self-time entry there is the caller's time.
        callers = []
        for line in rep.stdout.splitlines():
            m = _LINE.match(line)
            if m and len(callers) < 3:
                c = subprocess.run(
                    ["perf", "report", "-i", self.data, "--stdio", "--no-children",
                     "--comms", m.group(2), "--dsos", m.group(3), "--symbols", m.group(5),
                     "-g", "caller,2,callee,function,percent", "--percent-limit", "1"],
                    capture_output=True, text=True, timeout=600)
                callers.append(f"\n# callers of {m.group(5)} in {m.group(2)}\n" + c.stdout)
        with open(self.text, "w") as f:
            f.write(rep.stdout)
            f.write("".join(callers))
        for line in rep.stdout.splitlines():
            m = _LINE.match(line)
            if m and len(self.summary) < TOP:
                self.summary.append({"percent": float(m.group(1)), "command": m.group(2),
                                     "object": m.group(3), "symbol": m.group(5)})
        return False


def print_profiles(profiles, out):
    """The top entries of each profile: {name: summary}."""
    for name, top in profiles.items():
        out.write(f"\nperf, {name} (self time, all CPUs):\n")
        for e in top[:10]:
            out.write(f"  {e['percent']:5.1f}%  {e['command'][:16]:16} {e['object'][:22]:22} "
                      f"{e['symbol'][:60]}\n")
