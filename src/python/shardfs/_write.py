"""shardfs' write side from Python: ``shardfs.pack`` (here) packs a loose
tree as ``shardfs pack SRC --out OUT`` does, and ``shardfs.Index.build``
builds an index from shards as ``shardfs index build --out OUT ...`` does,
in-process, each returning the new index opened.

The work is the command's own code, in the extension module
``shardfs._build`` (imported only when one of them is called, so that
``import shardfs`` and every read need neither it nor libarchive; without it
they raise ImportError saying so). So the command's rules hold as they are:
nothing is deleted or overwritten that the call did not write (``force``
replaces only an earlier index, or for ``pack`` only what a pack's own
records list; a folder holding anything else is refused and left as it
was), an input is never overwritten, and an index is published atomically
once complete: a failed or interrupted call leaves none that looks valid.
The GIL is released while it works.

Options are the command's, by their Python names (``--shard-size`` is
``shard_size=``, ``--no-checksum`` is ``checksum=False``), keyword-only and
checked before anything is read: a bad value raises one line of TypeError or
ValueError naming it, an unknown keyword a TypeError listing the known ones.
Sizes take an int of bytes or the command's text ("512M", "4G"); ``part``
takes "K/N" or a tuple ``(K, N)``. No progress is shown; what the command
would print (warnings, entries skipped, the summary) goes to the ``shardfs``
logger. Failures raise ``shardfs.Error`` (an OSError) naming the file and the
reason: ``shardfs.NotFoundError`` for a missing input,
``shardfs.CorruptShardError`` for a shard that does not scan, errno EEXIST for
an output that exists, EINVAL for input that cannot be used.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, Type,
                    TypeVar, Union, cast)

from . import _errors

if TYPE_CHECKING:
    from . import Index, StrPath

Size = Union[int, str]
"""A byte count: an int, or the command's text ("512M", "4G", "1T")."""

Part = Union[str, Tuple[int, int]]
"""Part K (0-based) of N: "K/N" or ``(K, N)``."""

_F = TypeVar("_F", bound=Callable[..., Any])


def known_keywords(f: _F) -> _F:
    """``f`` with unknown keyword arguments refused by a TypeError that lists
    the keyword-only parameters ``f`` knows (Python's own would name only
    the unknown one)."""
    known = [p.name for p in inspect.signature(f).parameters.values()
             if p.kind is inspect.Parameter.KEYWORD_ONLY]
    name = f.__qualname__

    @functools.wraps(f)
    def checked(*args: Any, **kwargs: Any) -> Any:
        unknown = sorted(k for k in kwargs if k not in known)
        if unknown:
            raise TypeError(f"{name}(): unknown option {', '.join(map(repr, unknown))}; known "
                            f"options: {', '.join(known)}")
        return f(*args, **kwargs)

    return cast(_F, checked)


def _module() -> Any:
    """The extension shardfs._build, imported now; ImportError saying what
    is missing if this installation lacks it."""
    try:
        from . import _build
    except ImportError as e:
        raise ImportError(
            "shardfs.pack and shardfs.Index.build need the extension module shardfs._build (the "
            f"write side), which this installation of shardfs lacks: {e}; reading indexes works "
            "without it, and the `shardfs` command builds and packs") from e
    return _build


def _error(err: int, kind: str, message: str, paths: List[str]) -> _errors.Error:
    """The exception of a failed build (_build.cc): ``kind`` is "corrupt",
    "fetch" or ""; its ``filename`` is the longest path the message names
    that is one of ``paths`` (the call's arguments) or lies below one
    ("OUT/index"), else None."""
    cls: Type[_errors.Error] = _errors._BY_ERRNO.get(err, _errors.Error)
    if kind == "corrupt":
        cls = _errors.CorruptShardError
    elif kind == "fetch":
        cls = _errors.FetchError
    named = [m.group(0) for p in paths for m in re.finditer(
        r"(?:^|(?<=[\s'\"(]))" + re.escape(p.rstrip("/")) + r"(?:/[^\s:'\",)]*)?(?=$|[\s:'\",)])",
        message)]
    return cls(err, message, max(named, key=len) if named else None)


# Checks of the options' values, each one line saying what was expected.

def _path(name: str, value: Any) -> str:
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name}={value!r}: expected str, bytes or os.PathLike")
    path = os.fsdecode(os.fspath(value))
    if not path:
        raise ValueError(f"{name}='': expected a path")
    return path


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r}: expected a bool")
    return value


def _int(name: str, value: Any, low: int, high: int = 2**64 - 1) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r}: expected an int or None")
    if not low <= value <= high:
        raise ValueError(f"{name}={value}: expected an int from {low} to {high}")
    return value


def _size(name: str, value: Any) -> Optional[Size]:
    if isinstance(value, str):
        return value  # The command's grammar, checked by the extension (base/parse.h).
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"{name}={value!r}: expected an int of bytes, a str such as '512M', "
                        "or None")
    return _int(name, value, 1)


def _part(value: Any) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value  # "K/N", checked by the extension as the command checks it.
    if (not isinstance(value, tuple) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise TypeError(f"part={value!r}: expected 'K/N', a tuple (K, N) of ints, or None")
    k, n = value
    if not 0 <= k < n:
        raise ValueError(f"part={value!r}: expected 0 <= K < N")
    return f"{k}/{n}"


def _choice(name: str, value: Any, choices: Tuple[Optional[str], ...]) -> Any:
    if value not in choices or not (value is None or isinstance(value, str)):
        raise ValueError(f"{name}={value!r}: expected one of " + ", ".join(map(repr, choices)))
    return value


def _strs(name: str, value: Any) -> List[str]:
    try:
        items: List[Any] = [value] if isinstance(value, str) else list(value)
    except TypeError:
        raise TypeError(f"{name}={value!r}: expected a str or an iterable of str") from None
    if not all(isinstance(v, str) for v in items):
        raise TypeError(f"{name}={value!r}: expected a str or an iterable of str")
    return items


def _shards(shards: Any) -> List[str]:
    if isinstance(shards, (str, bytes, os.PathLike)):
        return [_path("shards", shards)]
    try:
        items = list(shards)
    except TypeError:
        raise TypeError(f"shards={shards!r}: expected a path (a shard, a directory, a glob or a "
                        "URL) or an iterable of them") from None
    return [_path("shards", s) for s in items]


def build_index(out: Any, shards: Any, o: Dict[str, Any]) -> str:
    """Index.build's work: checks ``o`` (its keyword options), builds, and
    returns the index's path."""
    checked: Dict[str, Any] = dict(
        force=_bool("force", o["force"]), checksum=_bool("checksum", o["checksum"]),
        jobs=_int("jobs", o["jobs"], 1, 4096), memory=_size("memory", o["memory"]),
        seek_spacing=_size("seek_spacing", o["seek_spacing"]),
        from_list=None if o["from_list"] is None else _path("from_list", o["from_list"]),
        part=_part(o["part"]), max_shard_size=_size("max_shard_size", o["max_shard_size"]),
        max_list_pages=_int("max_list_pages", o["max_list_pages"], 1),
        recursive=_bool("recursive", o["recursive"]),
        recursive_depth=_int("recursive_depth", o["recursive_depth"], 1, 64),
        max_zip_ratio=_int("max_zip_ratio", o["max_zip_ratio"], 1),
        recursive_max_entries=_int("recursive_max_entries", o["recursive_max_entries"], 1))
    if o["url_prefix"] is not None and not isinstance(o["url_prefix"], str):
        raise TypeError(f"url_prefix={o['url_prefix']!r}: expected a str or None")
    checked["url_prefix"] = o["url_prefix"]
    for name in ("strip_recursive_tar_extension", "strip_recursive_zip_extension"):
        checked[name] = _bool(name, o[name])
    if not checked["recursive"]:
        for name in ("recursive_depth", "strip_recursive_tar_extension",
                     "strip_recursive_zip_extension", "recursive_max_entries"):
            if checked[name] not in (None, False):
                raise ValueError(f"{name}={checked[name]!r} needs recursive=True")
    out_path = _path("out", out)
    inputs = _shards(shards)
    if not inputs and checked["from_list"] is None:
        raise ValueError("shards=[]: no shards given (expected shard paths, directories, globs "
                         "or URLs, or from_list=)")
    path: str = _module().build_index(out_path, inputs, checked)
    return path


@known_keywords
def pack(src: StrPath, out: StrPath, *, shard_size: Optional[Size] = None,
         max_files: Optional[int] = None, name: Optional[str] = None, jobs: Optional[int] = None,
         from_list: Optional[StrPath] = None, shuffle: Optional[int] = None,
         exclude: Union[str, Iterable[str]] = (), skip_unreadable: bool = False,
         skip_special: bool = False, follow_symlinks: bool = False, force: bool = False,
         compress: Optional[str] = None, compress_level: Optional[int] = None,
         group_bytes: Optional[Size] = None, part: Optional[Part] = None) -> Index:
    """Packs the loose tree ``src`` into tar shards and their index in folder
    ``out``, as ``shardfs pack SRC --out OUT`` does, and returns the index
    opened (``OUT/index``; with ``part``, ``OUT/part-K/index``). Every file
    is read once and its bytes written once; the shards and offsets are the
    command's, byte for byte, for the same tree and options.

    Options (``man shardfs-pack`` says more of each): ``shard_size`` (the
    largest shard, default 1G), ``max_files`` (members per shard), ``name``
    (shard names, one printf integer conversion, default "train-%06d.tar"),
    ``jobs`` (reader threads), ``from_list`` (only the paths that file
    lists, samples in its order), ``shuffle`` (a seed: samples in an order
    drawn from it), ``exclude`` (a glob or several), ``skip_unreadable``,
    ``skip_special``, ``follow_symlinks``, ``force`` (replace an earlier
    pack at ``out``), ``compress`` ("zstd" or "gzip" shards, readable by
    random access), ``compress_level``, ``group_bytes``, ``part`` (part K
    of N of the tree, into ``OUT/part-K``, for a job array).

    Safety, as the command's: without ``force``, an ``out`` that holds an
    index or a file named like a shard is refused before anything is
    written; with it, ``out`` may hold only what a pack's own records say a
    pack wrote, which is replaced whole (anything else refuses the call and
    is left as it was). Neither of ``src`` and ``out`` may hold the other.

    Raises TypeError or ValueError for a bad option (before anything is
    read), ``shardfs.NotFoundError`` if ``src`` does not exist,
    ``shardfs.Error`` naming the file and the reason otherwise (each entry
    that cannot be read is also logged); no index is published then.
    ImportError if this installation lacks shardfs._build.
    """
    o = dict(
        shard_size=_size("shard_size", shard_size), max_files=_int("max_files", max_files, 1),
        jobs=_int("jobs", jobs, 1, 4096),
        from_list=None if from_list is None else _path("from_list", from_list),
        shuffle=_int("shuffle", shuffle, 0), exclude=_strs("exclude", exclude),
        skip_unreadable=_bool("skip_unreadable", skip_unreadable),
        skip_special=_bool("skip_special", skip_special),
        follow_symlinks=_bool("follow_symlinks", follow_symlinks), force=_bool("force", force),
        compress=_choice("compress", compress, (None, "zstd", "gzip", "none")),
        compress_level=_int("compress_level", compress_level, 0, 99),
        group_bytes=_size("group_bytes", group_bytes), part=_part(part))
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name={name!r}: expected a str such as 'train-%06d.tar' or None")
    o["name"] = name
    if o["compress"] in (None, "none") and (compress_level is not None or group_bytes is not None):
        raise ValueError("compress_level and group_bytes need compress='zstd' or 'gzip'")
    src_path, out_path = _path("src", src), _path("out", out)
    index_path: str = _module().pack(src_path, out_path, o)
    from . import Index
    return Index(index_path)
