"""shardfs' exceptions, the checks of Index's arguments, and the core's
messages handed to the ``shardfs`` logger.

Every error of the library is a ``shardfs.Error``, itself an ``OSError``:
``except OSError`` keeps working. Errors of an errno Python has a class for
are also that class: ``NotFoundError`` is a ``FileNotFoundError``,
``IsADirError`` an ``IsADirectoryError``, ``NotADirError`` a
``NotADirectoryError``. Bytes that cannot be served as indexed are ``OSError(EIO)``:
``CorruptShardError`` if a shard or member does not match its index,
``FetchError`` if a remote read gave up. The message names the index and the
path; ``filename`` is the path.

The extension (log_queue.cc) calls ``_from_status`` to make an error and
``_emit`` to log the messages it queued.
"""

from __future__ import annotations

import atexit
import errno as _errno
import logging
import os
from typing import Any, Dict, List, Optional, Set, Tuple, Type

logger = logging.getLogger("shardfs")


class Error(OSError):
    """The base of shardfs' errors: an ``OSError`` whose ``strerror`` names
    the index and the path, ``filename`` the path."""


class CorruptShardError(Error):
    """A shard or one of its members does not match the index (changed in
    place, truncated, a checksum mismatch): ``errno.EIO``, never wrong bytes.
    The shard's other files may still be served."""


class FetchError(Error):
    """A read of a remote shard gave up (the server unreachable or refusing,
    its retry budget spent): ``errno.EIO``. A later read tries again."""


class NotFoundError(Error, FileNotFoundError):
    """No such file or directory in the index (``FileNotFoundError``)."""


class IsADirError(Error, IsADirectoryError):
    """A file operation on a directory (``IsADirectoryError``)."""


class NotADirError(Error, NotADirectoryError):
    """A directory operation on a file (``NotADirectoryError``)."""


for _cls in (Error, CorruptShardError, FetchError, NotFoundError, IsADirError, NotADirError):
    _cls.__module__ = "shardfs"  # As users name them.

_BY_ERRNO: Dict[int, Type[Error]] = {
    _errno.ENOENT: NotFoundError,
    _errno.EISDIR: IsADirError,
    _errno.ENOTDIR: NotADirError,
}


def _from_status(err: int, kind: str, message: str, filename: str, index: str) -> Error:
    """The exception of a Status of the core: ``kind`` is "corrupt",
    "fetch" or ""."""
    cls: Type[Error]
    if kind == "corrupt":
        cls = CorruptShardError
    elif kind == "fetch":
        cls = FetchError
    else:
        cls = _BY_ERRNO.get(err, Error)
    said = []
    if filename and filename != index and filename not in message:
        said.append(f"reading {filename}")
    if index and index not in message:
        said.append(f"index {index}")
    where = f" ({' in '.join(said)})" if said else ""
    return cls(err, message + where, filename)


# Messages already logged by this process or, for a forked worker, by its
# parent before the fork: the core says each once per open index, and a
# DataLoader worker opens the index again (see _emit).
_seen: Set[str] = set()
_MAX_SEEN = 100_000


def _emit(records: List[Tuple[int, str, str, str, str]], dropped: int) -> None:
    """Logs the core's queued messages as records of the ``shardfs`` logger,
    each with the attributes ``shard`` and ``path`` (None where the core
    did not say) and ``reason`` (the message itself where it gave none). The core says a message once per open index; a
    forked DataLoader worker opens the index again, so a text this process
    (or its parent, before forking) has logged already is not logged again."""
    for level, message, shard, path, reason in records:
        if message in _seen:
            continue
        if len(_seen) < _MAX_SEEN:
            _seen.add(message)
        extra: Dict[str, Any] = {"shard": shard or None, "path": path or None,
                                 "reason": reason or message}
        logger.log(level, "%s", message, extra=extra)
    if dropped:
        logger.warning("%d messages of the core dropped: more than the queue holds between calls",
                       dropped, extra={"shard": None, "path": None, "reason": "queue full"})


def _drain() -> None:
    from . import _shardfs
    _shardfs._drain_log()


atexit.register(_drain)


def _is_index_dir(path: str) -> bool:
    return all(os.path.isfile(os.path.join(path, n)) for n in ("CURRENT", "IDENTITY"))


def _hint(path: str) -> str:
    """What a path that did not open as an index may have been meant as: a
    pack folder (its index is PACK/index), a tar shard, or a path inside an
    index directory; "" if none."""
    norm = os.path.normpath(path)
    if os.path.isdir(os.path.join(norm, "index")) and any(
            n.endswith(".tar") for n in os.listdir(norm)):
        return f"; {path} is a pack folder: did you mean {os.path.join(norm, 'index')}?"
    if norm.endswith(".tar") and os.path.isfile(norm):
        return f"; {path} is a shard, not an index: build one with `shardfs index build`"
    parent = os.path.dirname(norm)
    while parent and parent != os.path.dirname(parent):
        if _is_index_dir(parent):
            return (f"; the index is {parent}: open it and read "
                    f"{os.path.relpath(norm, parent)!r} inside it")
        parent = os.path.dirname(parent)
    return ""


def with_hint(e: OSError, path: str) -> OSError:
    """``e`` (an error opening ``path``) with the hint for ``path``, if any."""
    hint = _hint(path)
    if not hint or not isinstance(e.strerror, str):
        return e
    cls = type(e) if isinstance(e, Error) else (
        _BY_ERRNO.get(e.errno, Error) if e.errno is not None else Error)
    return cls(e.errno, e.strerror + hint, e.filename)


def _check_int(name: str, value: Any, minimum: int, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        expected = "an int or None" if optional else "an int"
        raise TypeError(f"{name}={value!r}: expected {expected}")
    if value < minimum:
        raise ValueError(f"{name}={value}: expected an int >= {minimum}")


def check_args(path: Any, view: Any, rank: Any, world: Any, seed: Any, rank_keep_dirs: Any,
               verify: Any, cache_dir: Any, cache_size: Any, storage: Any, decode_cache: Any,
               max_open_shards: Any) -> None:
    """Index's arguments, checked before the extension sees them: one line
    saying what was expected."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"path={path!r}: expected str, bytes or os.PathLike")
    if view is not None and not isinstance(view, str):
        raise TypeError(f"view={view!r}: expected a str (NAME, NAME@N or NAME@TAG) or None")
    _check_int("rank", rank, 0, True)
    _check_int("world", world, 1, True)
    if (rank is None) != (world is None):
        raise ValueError(f"rank={rank!r}, world={world!r}: expected both or neither")
    if rank is not None and rank >= world:
        raise ValueError(f"rank={rank}: expected an int below world={world}")
    _check_int("seed", seed, 0, False)
    if not isinstance(rank_keep_dirs, bool):
        raise TypeError(f"rank_keep_dirs={rank_keep_dirs!r}: expected a bool")
    _check_choice("verify", verify, ("auto", "off", "first", "always"))
    if cache_dir is not None and not isinstance(cache_dir, (str, bytes, os.PathLike)):
        raise TypeError(f"cache_dir={cache_dir!r}: expected str, bytes, os.PathLike or None")
    _check_int("cache_size", cache_size, 0, False)
    _check_choice("storage", storage, ("auto", "local", "network"))
    _check_int("decode_cache", decode_cache, 0, True)
    _check_int("max_open_shards", max_open_shards, 1, True)


def _check_choice(name: str, value: Any, choices: Tuple[str, ...]) -> None:
    if value not in choices or not isinstance(value, str):
        raise ValueError(f"{name}={value!r}: expected one of " + ", ".join(map(repr, choices)))
