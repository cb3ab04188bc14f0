"""Python's buffered ``open(path, "rb")`` without its ``isatty()`` round trip,
for files under a shardfs FUSE mount: opt in, no change to the loader.

Before 3.14, Python's default ``open(path, "rb")`` asks ``raw.isatty()`` (an
``ioctl(TCGETS)``) at every open, only to choose a buffer size it then
ignores in binary mode. Under a FUSE mount the kernel sends every ioctl to
the daemon and never remembers its answer: one round trip per file, which
costs more than the rest of a small file's ``open().read()`` (``man
shardfs-mount``, "What a file costs"). Python 3.14 skips the call for files
that its open-time ``fstat`` shows are not character devices; ``install()``
does the same for binary reads under a shardfs mount on older versions::

    import shardfs.fastopen
    shardfs.fastopen.install()     # builtins.open and io.open, this process
    # ... an unmodified torchvision ImageFolder, PIL.Image.open, json.load ...

Or for a script that is not to be changed, and every process it starts
(``DataLoader`` workers, forked or spawned): the environment variable
``SHARDFS_FASTOPEN=1``, read at interpreter startup by the ``.pth`` file the
package installs (a pip or meson install; not a ``PYTHONPATH`` of the build
tree, whose ``.pth`` files Python does not read).

What changes. Only ``open(file, "rb")`` (or ``"br"``) with the default
buffering, of a path (``str``, ``bytes`` or ``os.PathLike``) that is, as
written and made absolute against the working directory, under a shardfs
FUSE mount (``fuse.shardfs`` in ``/proc/self/mountinfo``; a mount made later
is seen within a tenth of a second, or at once after ``shardfs_mounts()``). Such an open builds what ``open()`` builds, the
same ``io.FileIO`` in a ``io.BufferedReader`` of the file's ``st_blksize``,
minus the ``isatty()`` call, which for a binary file changes nothing: the
object, its bytes and its errors are those of ``open()``. Everything else
(text mode, writing, an explicit ``buffering``, descriptors, other files,
a path reaching a mount through a symbolic link) goes to the original
``open()`` untouched. On Python 3.14 and later ``install()`` does nothing.

Cost: the mount check is a string comparison, and at most ten times a second
a ``poll()`` of ``/proc/self/mountinfo`` (no round trip): a few tenths of a
microsecond per open, of any file; the ``isatty()`` it saves is one FUSE
round trip (tens of microseconds).
"""

from __future__ import annotations

import builtins
import io
import os
import select
import sys
import threading
import time
from typing import IO, Any, Callable, List, Optional, Tuple

__all__ = ["install", "uninstall", "installed", "shardfs_mounts", "ENV_VAR"]

ENV_VAR = "SHARDFS_FASTOPEN"
"""The environment variable the package's ``.pth`` file reads at startup:
set and not ``""`` or ``"0"``, it calls ``install()``."""

_MOUNTINFO = "/proc/self/mountinfo"
_FSTYPE = "fuse.shardfs"
_POLL_EVERY_S = 0.1  # A poll is a system call: not at every open.

_original_open: Optional[Callable[..., Any]] = None
_lock = threading.Lock()


class _Mounts:
    """The shardfs mount points, read from mountinfo again when the kernel
    says the mount table changed (a poll of the open mountinfo file, at most
    every _POLL_EVERY_S unless forced)."""

    def __init__(self) -> None:
        self.prefixes: Tuple[str, ...] = ()
        self.roots: Tuple[str, ...] = ()
        self._file: Optional[IO[bytes]] = None
        self._poll: Optional[Any] = None
        self._next_poll = 0.0

    def _reopen(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = builtins.open(_MOUNTINFO, "rb", buffering=0)
        poll = select.poll()
        poll.register(self._file.fileno(), select.POLLPRI)
        self._poll = poll  # Reports the changes after this open: read now.
        self._read()

    def _read(self) -> None:
        assert self._file is not None
        data = os.pread(self._file.fileno(), 1 << 22, 0)
        while True:  # A mountinfo longer than one read.
            more = os.pread(self._file.fileno(), 1 << 22, len(data))
            if not more:
                break
            data += more
        roots: List[str] = []
        for line in data.decode("utf-8", "surrogateescape").splitlines():
            fields, sep, rest = line.partition(" - ")
            parts = fields.split(" ")
            if not sep or len(parts) < 5 or rest.split(" ", 1)[0] != _FSTYPE:
                continue
            roots.append(_unescape(parts[4]))
        self.roots = tuple(roots)
        self.prefixes = tuple(r.rstrip("/") + "/" for r in roots)

    def current(self, force: bool = False) -> Tuple[str, ...]:
        """The mount points' prefixes ("/mnt/x/"), read again if the mount
        table changed since the last poll."""
        now = time.monotonic()
        if now < self._next_poll and not force:
            return self.prefixes
        self._next_poll = now + _POLL_EVERY_S
        if self._poll is None:
            with _lock:
                if self._poll is None:
                    self._reopen()
        elif self._poll.poll(0):
            with _lock:
                self._read()
        return self.prefixes

    def after_fork(self) -> None:
        # The child shares the parent's mountinfo file and its poll state:
        # its own, opened at its first check.
        if self._file is not None:
            self._file.close()
        self._file = None
        self._poll = None
        self._next_poll = 0.0


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are octal escapes."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and i + 4 <= len(field):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


_mounts = _Mounts()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mounts.after_fork)


def _under_mount(file: Any) -> bool:
    """Whether `file` names a path under a shardfs mount; False for anything
    open() would refuse (it then raises its own error)."""
    if not isinstance(file, (str, bytes, os.PathLike)):
        return False
    try:
        prefixes = _mounts.current()
        if not prefixes:
            return False
        path = os.fspath(file)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not path or "\0" in path:
            return False
        if path[0] != "/":
            path = os.path.join(os.getcwd(), path)
    except Exception:
        return False
    return path.startswith(prefixes) or path + "/" in prefixes


def _open(file: Any, mode: str = "r", buffering: int = -1, encoding: Optional[str] = None,
          errors: Optional[str] = None, newline: Optional[str] = None, closefd: bool = True,
          opener: Optional[Callable[[str, int], int]] = None) -> Any:
    real = _original_open
    assert real is not None
    if (type(buffering) is int and buffering == -1 and (mode == "rb" or mode == "br")
            and encoding is None and errors is None and newline is None
            and _under_mount(file)):
        # What io.open builds for "rb" with buffering < 0, less raw.isatty():
        # in binary mode its answer picks the same buffer size.
        raw = io.FileIO(file, "r", closefd, opener=opener)
        try:
            return io.BufferedReader(raw, getattr(raw, "_blksize", io.DEFAULT_BUFFER_SIZE))
        except BaseException:
            raw.close()
            raise
    return real(file, mode, buffering, encoding, errors, newline, closefd, opener)


def install() -> bool:
    """Makes ``builtins.open`` and ``io.open`` skip ``isatty()`` for binary
    reads under shardfs mounts, in this process and its forked children.
    Idempotent. Returns whether it is in place (False on Python 3.14 and
    later, whose ``open()`` skips the call by itself)."""
    global _original_open
    if sys.version_info >= (3, 14):
        return False
    with _lock:
        if _original_open is None:
            _original_open = builtins.open
            _open.__doc__ = _original_open.__doc__
            _open.__name__ = _open.__qualname__ = "open"
            setattr(builtins, "open", _open)
            setattr(io, "open", _open)
    return True


def uninstall() -> None:
    """Puts the original ``open()`` back (where ``install()`` put its own)."""
    global _original_open
    with _lock:
        if _original_open is None:
            return
        if builtins.open is _open:
            setattr(builtins, "open", _original_open)
        if io.open is _open:
            setattr(io, "open", _original_open)
        _original_open = None


def installed() -> bool:
    """Whether ``install()`` is in effect."""
    return _original_open is not None and builtins.open is _open


def shardfs_mounts() -> Tuple[str, ...]:
    """The mount points of shardfs FUSE mounts in this process's mount
    namespace, as ``/proc/self/mountinfo`` has them now (read again if the
    mount table changed)."""
    _mounts.current(force=True)
    return _mounts.roots


def _install_from_env() -> None:
    """The ``.pth`` file's call: ``install()`` if ``SHARDFS_FASTOPEN`` asks."""
    if os.environ.get(ENV_VAR, "") not in ("", "0"):
        install()
