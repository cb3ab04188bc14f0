"""shardfs without FUSE: read a shardfs index in-process.

The same index a ``shardfs mount`` serves, read from inside the process: a
read is an index lookup and one ``pread`` of a shard range, with no kernel
round trip, no ``/dev/fuse`` and no root::

    import shardfs
    with shardfs.Index("train.idx") as index:
        data = index.read("train/cat/0001.jpg")

Every kind of shard the mount serves is read: tar, zip, compressed tars with
seek points, nested slices, remote shards (with the chunk cache). Each read is
checked as the mount checks it with ``-o verify=first`` (``verify="auto"``:
where the index has checksums): a file's content against its checksum on its
first read, and before every read its shard's stamp (inode, size, mtime,
ctime) against the one taken when the shard was checked: a shard written in
place after a file's first read gives EIO (with its mtime set back, its files
are verified again, and those whose bytes changed give EIO).
One file whose bytes do not match its checksum fails alone (naming it and its
shard); the shard's other files go on serving. ``man shardfs-mount``, ``verify=``,
says what each mode catches and what it does not.

An ``Index`` may be used from many threads at once (lookups and reads release
the GIL) and survives ``fork()``: a child process (a PyTorch ``DataLoader``
worker) opens the index again on its first call, with the parent's chunk
cache directory: every process of a user on a node shares one (its
``cache_dir``, or for remote shards and on network storage the default one), so each chunk is
fetched once per node. A forked child of a process that opened
an index ends, after Python's own finalisation and ``atexit`` functions,
without running C++ static destructors (RocksDB's static timer, copied from
the parent, would block exit() for ever); its exit status is kept.

Errors. Every error of the library is a ``shardfs.Error``, an ``OSError``
whose message names the index and the path (``filename``: the path), and
also the class Python's own file functions raise for its errno:
``shardfs.NotFoundError`` is a ``FileNotFoundError``, ``shardfs.IsADirError``
an ``IsADirectoryError``, ``shardfs.NotADirError`` a ``NotADirectoryError``.
Bytes that cannot be served as indexed (never wrong bytes) are
``errno.EIO``: ``shardfs.CorruptShardError`` if a shard or member does not
match its index (changed in place, a checksum mismatch),
``shardfs.FetchError`` if a read of a remote shard gave up (the server
unreachable or refusing, the retry budget spent); so ``except OSError``
catches them all. Bad arguments raise a one-line ``TypeError`` or
``ValueError`` saying what was expected, and opening what is not an index
says what it looks like (a pack folder, a ``.tar`` shard, a folder inside an
index). ``ValueError`` after ``close()``.

Messages. What the core reports (a corrupt shard, a fetch that gave up, a
chunk cache it cannot write) goes to the ``logging`` logger ``"shardfs"``,
never to stderr directly: each record has the attributes ``shard``, ``path``
and ``reason`` (None where unknown). The core queues them, and they are
logged in the calling thread when a call of the index returns (messages of
background threads at the next call, or at exit). A message is logged once
per process; a forked DataLoader worker does not repeat one its parent
logged before the fork. Without a handler configured, Python's last-resort
handler prints warnings and errors; ``logging.getLogger("shardfs")``
filters or silences them.

Writing. ``shardfs.Index.build(out, shards, ...)`` builds an index from
shards and ``shardfs.pack(src, out, ...)`` packs a loose tree, as ``shardfs
index build`` and ``shardfs pack`` do, and return it opened: see
``shardfs._write``. Their extension module, ``shardfs._build``, is imported
only then: reading never loads the write side.

``shardfs.torch`` (imported only when asked) has PyTorch datasets over an
index; ``shardfs.fsspec`` the index as an fsspec filesystem (the protocol
``shardfs``, found by fsspec through the package's entry point).
"""

from __future__ import annotations

import functools
import io
import os
import stat as _stat
from typing import (Any, BinaryIO, Dict, Iterable, Iterator, List, Literal, Optional, TextIO, Tuple,
                    Union, cast, overload)


def _check_build() -> None:
    """Raises ImportError naming the interpreter the extension module was built
    for (the tags of the ``_shardfs.*.so`` files next to this file) and how to
    rebuild it, where none of them fits the running one: instead of Python's
    "cannot import name '_shardfs' (most likely due to a circular import)"."""
    import importlib.machinery
    import platform
    import re
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    built = sorted(n for n in os.listdir(here) if re.fullmatch(r"_shardfs\.[^.]+\.(so|pyd)", n))
    if any(n[len("_shardfs"):] in importlib.machinery.EXTENSION_SUFFIXES for n in built):
        return  # built for this interpreter, failing for another reason: its own message
    running = "%s %d.%d (%s)" % (platform.python_implementation(), *sys.version_info[:2],
                                 sys.executable)
    versions = sorted({"CPython %s.%s" % m.groups() if m else n
                       for n in built for m in [re.search(r"\.cpython-(\d)(\d+)", n)]})
    if built:
        what = "was built for %s (%s), not for %s" % (" and ".join(versions), ", ".join(built),
                                                        running)
    else:
        what = "has no _shardfs.*.so: it was not built (for %s)" % running
    raise ImportError(
        "shardfs in %s %s. Run it with the interpreter it was built for, or rebuild it for this "
        "one: in the shardfs source tree, %s -m pip install --no-build-isolation . (README.md, "
        "\"Python, without FUSE\")" % (here, what, sys.executable),
        name="shardfs._shardfs", path=here) from None


try:
    from . import _shardfs
except ImportError:
    _check_build()
    raise
from . import _errors  # after _shardfs: it drains the core's messages at exit
from ._errors import (CorruptShardError, Error, FetchError, IsADirError, NotADirError,
                      NotFoundError)
from . import _write  # The write side's checks; its extension is imported when called.
from ._write import pack

__all__ = ["CorruptShardError", "Error", "FetchError", "Index", "IsADirError", "NotADirError",
           "NotFoundError", "StrPath", "__version__", "pack"]

__version__: str = _shardfs.__version__
"""The version of shardfs this package was built from (``shardfs --version``)."""

StrPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
"""A path argument: str, bytes or os.PathLike, as Python's os functions take it."""


class Index(_shardfs.Volume):
    """An open shardfs index.

    ``path`` is what ``shardfs mount`` takes as INDEX: an index directory, a
    manifest file, an index bundle, or an http(s):// or s3:// URL of a bundle
    or manifest. ``view`` is a view ("NAME", "NAME@N" or "NAME@TAG"; None:
    the full tree). ``rank`` and ``world`` (together) give rank ``rank``'s
    share of the view, as ``-o rank=,world=`` does (``seed`` and
    ``rank_keep_dirs`` as ``-o seed=,rank_dirs=keep``).

    Keyword options, as the mount's ``-o`` options of the same names:
    ``verify`` ("auto": "first" where the index has checksums, else "off";
    or "off", "first", "always"), ``cache_dir`` and ``cache_size`` (the chunk
    cache of remote shards), ``storage`` ("auto", "local" or "network": shards
    on network storage are read through a node-local chunk cache, and the
    index from a node-local copy), ``decode_cache`` (bytes of decoded blocks),
    ``max_open_shards``.

    Raises TypeError or ValueError (one line) for a bad argument,
    FileNotFoundError (``shardfs.NotFoundError``) if ``path`` does not
    exist and ``shardfs.Error`` naming it if it is not a readable shardfs
    index, with a hint where it looks like a pack folder, a shard or a
    folder inside an index.

    Reading: ``read(relpath, offset=0, size=-1) -> bytes``; ``open(relpath)``
    (a read-only binary file; text with mode "r"). Metadata: ``stat``,
    ``lstat``, ``listdir``, ``walk``, ``files(prefix)``, ``exists``,
    ``isdir``, ``isfile``, ``readlink``. A context manager; ``close()``,
    ``closed``.

    A container of the paths ``files()`` gives (every regular file and
    symbolic link, never a directory): ``iter(ix)`` yields them in the same
    order, lazily (one directory listed at a time); ``len(ix)`` counts them;
    ``p in ix`` is true for exactly those paths. An Index is always true
    (``bool(ix)``), as a file object is: ``len(ix) == 0`` tests for no files.
    """

    def __init__(self, path: StrPath, *, view: Optional[str] = None, rank: Optional[int] = None,
                 world: Optional[int] = None, seed: int = 0, rank_keep_dirs: bool = False,
                 verify: str = "auto", cache_dir: Optional[StrPath] = None, cache_size: int = 0,
                 storage: str = "auto", decode_cache: Optional[int] = None,
                 max_open_shards: Optional[int] = None) -> None:
        _errors.check_args(path, view, rank, world, seed, rank_keep_dirs, verify, cache_dir,
                           cache_size, storage, decode_cache, max_open_shards)
        path = os.fsdecode(os.fspath(path))
        self._path = path
        self._count: Optional[int] = None  # len(self), once counted.
        self._args: Dict[str, Any] = dict(
            view=view, rank=rank, world=world, seed=seed, rank_keep_dirs=rank_keep_dirs,
            verify=verify, cache_dir=cache_dir, cache_size=cache_size, storage=storage,
            decode_cache=decode_cache, max_open_shards=max_open_shards)
        try:
            super().__init__(path, **self._args)
        except OSError as e:
            hinted = _errors.with_hint(e, path)
            if hinted is e:
                raise
            raise hinted from None

    # Pickled (a DataLoader started with "spawn") as what opens it again.
    def __reduce__(self) -> Tuple[Any, Tuple[()]]:
        return (functools.partial(Index, self._path, **self._args), ())

    # Building.

    @classmethod
    @_write.known_keywords
    def build(cls, out: StrPath, shards: Union[StrPath, Iterable[StrPath]], *,
              force: bool = False, jobs: Optional[int] = None,
              memory: Optional[_write.Size] = None, checksum: bool = True,
              seek_spacing: Optional[_write.Size] = None, from_list: Optional[StrPath] = None,
              url_prefix: Optional[str] = None, part: Optional[_write.Part] = None,
              max_shard_size: Optional[_write.Size] = None, max_list_pages: Optional[int] = None,
              recursive: bool = False, recursive_depth: Optional[int] = None,
              strip_recursive_tar_extension: bool = False,
              strip_recursive_zip_extension: bool = False, max_zip_ratio: Optional[int] = None,
              recursive_max_entries: Optional[int] = None) -> "Index":
        """Builds an index at ``out`` from ``shards`` as ``shardfs index build
        --out OUT SHARDS...`` does, and returns it opened. ``shards`` is what
        the command takes: a tar, compressed tar or zip shard, a directory
        (its ``*.tar`` in name order), a glob, an http(s):// or s3:// URL, or
        a list of these; ``from_list`` a file of more, one per line
        (``url_prefix`` the base of its lines that are not URLs). Every shard
        is scanned once (headers, and content for the checksums).

        Options, by the command's names (``man shardfs-index``): ``force``
        (replace an existing index at ``out``: only an index or an empty
        folder, never one holding an input), ``jobs`` (shards scanned at
        once), ``memory`` (members spill to disk beyond it), ``checksum``
        (False: headers only, as ``--no-checksum``), ``seek_spacing``,
        ``part`` (part K of N of the shards, "K/N" or ``(K, N)``),
        ``max_shard_size`` and ``max_list_pages`` (remote shards),
        ``recursive`` and its ``recursive_depth``,
        ``strip_recursive_tar_extension``,
        ``strip_recursive_zip_extension``, ``recursive_max_entries``;
        ``max_zip_ratio``. Sizes take an int of bytes or a str ("512M").

        Raises TypeError or ValueError for a bad option (before anything is
        read; an unknown one lists the known ones), ``shardfs.NotFoundError``
        for a missing shard, ``shardfs.CorruptShardError`` for a shard that
        does not scan (naming it and the byte offset), ``shardfs.Error``
        (errno EEXIST) if ``out`` exists and ``force`` is not given; the index
        is published only once complete, so nothing that looks like one is
        left after a failure. ImportError if this installation lacks
        shardfs._build. The GIL is released during the build; what the
        command would print goes to the ``shardfs`` logger.
        """
        options = dict(locals())
        for name in ("cls", "out", "shards"):
            del options[name]
        return cls(_write.build_index(out, shards, options))

    # Lifetime.

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<shardfs.Index {self._path!r} {state}>"

    def close(self) -> None:
        """Closes the index; any later call raises ValueError. Idempotent."""
        self._close()

    @property
    def path(self) -> str:
        """The path or URL the index was opened with."""
        return self._path

    # Reads.

    def read(self, relpath: StrPath, *, offset: int = 0, size: int = -1) -> bytes:
        """The bytes of file ``relpath`` from ``offset``, at most ``size`` of
        them (-1: to the end), checked as the mount checks them. Raises
        FileNotFoundError, IsADirectoryError, NotADirectoryError, or
        OSError(EIO) if the bytes cannot be served as indexed:
        CorruptShardError (a changed or corrupt shard), FetchError (a remote
        read gave up); ValueError after close(). Costs one pread of the
        shard (and one fstat, its stamp); the path's lookup in the index the
        first time it is read (the volume remembers its record)."""
        return self._read(relpath, offset, size)

    def read_many(self, relpaths: Iterable[StrPath]) -> List[bytes]:
        """The whole bytes of each file of ``relpaths``, in order: what
        ``[read(p) for p in relpaths]`` returns, with the same checks and
        errors (raised for the first path that fails, before any is read).
        Faster for a batch: every file is looked up first and the kernel asked
        for all their bytes at once, so that reads from a local disk overlap.
        It holds the whole batch in memory at once; ``prefetch``, then
        ``read`` file by file, holds one file's bytes at a time."""
        data: List[bytes] = self._read_many(relpaths)
        return data

    def prefetch(self, relpaths: Iterable[StrPath]) -> None:
        """Asks the kernel for the bytes of each file of ``relpaths`` at once,
        without waiting: the reads that follow, one by one, find them on their
        way or cached, so that a batch's reads from a local disk overlap each
        other and the work between them. Paths that name no file are passed
        over (their read raises). ValueError after close()."""
        self._prefetch(relpaths)

    def files(self, prefix: StrPath = "") -> List[str]:
        """The paths of every file and symbolic link whose path starts with
        ``prefix``, in tree order (a directory's entries in name order, each
        subdirectory's files where its name falls). The prefix is made plain
        first, as os.path.normpath makes a path ("." and ".." taken out, never
        above the root), so every path returned is a path from the root."""
        paths: List[str] = self._files(prefix)
        return paths

    def readlink(self, relpath: StrPath) -> str:
        """The target of symbolic link ``relpath``, as ``os.readlink``."""
        target: str = self._readlink(relpath)
        return target

    @overload
    def open(self, relpath: StrPath, mode: Literal["rb", "br"] = "rb", buffering: int = -1,
             encoding: None = None, errors: None = None, newline: None = None) -> BinaryIO: ...

    @overload
    def open(self, relpath: StrPath, mode: Literal["r", "rt", "tr"], buffering: int = -1,
             encoding: Optional[str] = None, errors: Optional[str] = None,
             newline: Optional[str] = None) -> TextIO: ...

    def open(self, relpath: StrPath, mode: str = "rb", buffering: int = -1,
             encoding: Optional[str] = None, errors: Optional[str] = None,
             newline: Optional[str] = None) -> Union[BinaryIO, TextIO]:
        """Opens file ``relpath`` for reading, as ``open()`` does: with mode
        "rb" a read-only binary file object (``read``, ``readinto``,
        ``seek``, ``tell``, ...) that ``PIL.Image.open``, ``tarfile`` and
        ``zipfile`` take, unbuffered with ``buffering=0``; with mode "r" (or
        "rt") text, decoded with ``encoding``, ``errors`` and ``newline`` as
        ``open()`` decodes them. Any other mode raises ValueError.
        """
        text = mode in ("r", "rt", "tr")
        if mode not in ("rb", "br") and not text:
            raise ValueError(f"mode {mode!r}: shardfs files open for reading only: 'rb' (bytes) "
                             f"or 'r' (text)")
        if not text and (encoding is not None or errors is not None or newline is not None):
            raise ValueError("binary mode takes no encoding, errors or newline")
        if text and buffering == 0:
            raise ValueError("can't have unbuffered text I/O")
        rel = _rel(relpath)
        st = self._stat_tuple(rel, True)
        if _stat.S_ISDIR(st[0]):
            raise IsADirError(21, f"{rel}: is a directory in index {self._path}", rel)
        raw = _RawFile(self, rel, st[1], st[5])
        if buffering == 0:
            return cast(BinaryIO, raw)
        size = io.DEFAULT_BUFFER_SIZE if buffering in (-1, 1) else buffering
        buffered = io.BufferedReader(raw, buffer_size=size)
        if text:
            return io.TextIOWrapper(buffered, encoding=encoding, errors=errors, newline=newline)
        return cast(BinaryIO, buffered)

    # A container of the paths files() gives.

    def __len__(self) -> int:
        """The number of paths ``iter(self)`` and ``files()`` give: regular
        files and symbolic links, a hard-linked file once per name; never
        directories. Counted on the first call by a walk of the directory
        records in the core, with no Python object per file (the index's own
        count, ``shardfs index info``'s "files", counts file inodes of the
        whole view: it differs with hard links, symbolic links and a
        ``rank``'s share), then remembered: the index does not change while
        open. ValueError after close()."""
        if self.closed or self._count is None:
            self._count = self._count_files()
        return self._count

    def __bool__(self) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        """The paths ``files()`` gives, in the same order, one directory
        listed at a time: memory for the largest directory, not the tree."""
        return self._iter_dir("")

    def _iter_dir(self, top: str) -> Iterator[str]:
        for name, mode in self._listdir(top):
            path = f"{top}/{name}" if top else name
            if _stat.S_ISDIR(mode):
                yield from self._iter_dir(path)
            else:
                yield path

    def __contains__(self, relpath: object) -> bool:
        """True if ``relpath`` is one of the paths ``iter(self)`` gives: a
        file or symbolic link (not followed) at a plain path ("a/b.jpg": no
        ".", "..", empty, leading or trailing components) whose every
        directory is a directory, not a link to one. A path is taken as every
        method takes it (str, bytes, os.PathLike); anything else is not in
        the index. Costs one lookup per component."""
        if not isinstance(relpath, (str, bytes, os.PathLike)):
            return False
        rel = _rel(relpath)
        if not rel or _plain(rel) != rel:
            return False
        try:
            if _stat.S_ISDIR(self._stat_tuple(rel, False)[0]):
                return False
            slash = rel.find("/")
            while slash != -1:  # Each directory on the way, no link.
                if not _stat.S_ISDIR(self._stat_tuple(rel[:slash], False)[0]):
                    return False
                slash = rel.find("/", slash + 1)
        except OSError:
            return False
        return True

    # Metadata.

    def _stat_tuple(self, rel: str, follow: bool) -> Tuple[int, ...]:
        st: Tuple[int, ...] = self._stat(rel, follow)
        return st

    def stat(self, relpath: StrPath, *, follow_symlinks: bool = True) -> os.stat_result:
        """An ``os.stat_result`` for ``relpath`` (``st_mode``, ``st_size``,
        ``st_mtime``, ``st_mtime_ns``, ``st_ino`` (the index's inode number),
        ``st_nlink``, ``st_uid``, ``st_gid``, ``st_blocks``; ``st_dev`` 0).
        Symbolic links are followed unless ``follow_symlinks`` is false.
        """
        mode, ino, nlink, uid, gid, size, mtime_ns, blocks = self._stat_tuple(
            _rel(relpath), follow_symlinks)
        sec = mtime_ns // 10**9
        t = mtime_ns / 1e9
        return os.stat_result(
            (mode, ino, 0, nlink, uid, gid, size, sec, sec, sec),
            {"st_atime": t, "st_mtime": t, "st_ctime": t,
             "st_atime_ns": mtime_ns, "st_mtime_ns": mtime_ns, "st_ctime_ns": mtime_ns,
             "st_blksize": 4096, "st_blocks": blocks})

    def lstat(self, relpath: StrPath) -> os.stat_result:
        """``stat`` without following a symbolic link at the end."""
        return self.stat(relpath, follow_symlinks=False)

    # As os.path's: False for any OSError (a loop of links too).
    def exists(self, relpath: StrPath) -> bool:
        try:
            self._stat_tuple(_rel(relpath), True)
            return True
        except OSError:
            return False

    def isdir(self, relpath: StrPath) -> bool:
        try:
            return _stat.S_ISDIR(self._stat_tuple(_rel(relpath), True)[0])
        except OSError:
            return False

    def isfile(self, relpath: StrPath) -> bool:
        try:
            return _stat.S_ISREG(self._stat_tuple(_rel(relpath), True)[0])
        except OSError:
            return False

    def listdir(self, relpath: StrPath = "") -> List[str]:
        """The names in directory ``relpath`` ("" is the root), in name
        order. Raises FileNotFoundError, NotADirectoryError."""
        return [name for name, _ in self._listdir(relpath)]

    def walk(self, top: StrPath = "", topdown: bool = True,
             followlinks: bool = False) -> Iterator[Tuple[str, List[str], List[str]]]:
        """Like ``os.walk``: yields ``(dirpath, dirnames, filenames)`` for
        each directory under ``top``; ``dirpath`` is relative to the root
        ("" for the root itself) and names in each list are in name order.
        With ``topdown``, ``dirnames`` may be edited in place to prune.
        Symbolic links are listed as files unless they point at a directory
        (then in ``dirnames``, walked only with ``followlinks``), as
        ``os.walk`` lists them. ``top`` is made plain first (``_plain``: "."
        and ".." taken out, never above the root), so every ``dirpath`` is a
        path from the root.
        """
        top = _plain(_rel(top))
        try:
            entries = self._listdir(top)
        except (FileNotFoundError, NotADirectoryError):
            return
        dirs: List[str] = []
        files: List[str] = []
        for name, mode in entries:
            path = f"{top}/{name}" if top else name
            if _stat.S_ISDIR(mode):
                dirs.append(name)
            elif _stat.S_ISLNK(mode) and self.isdir(path):
                dirs.append(name)
            else:
                files.append(name)
        if topdown:
            yield top, dirs, files
        for name in dirs:
            path = f"{top}/{name}" if top else name
            if followlinks or not _stat.S_ISLNK(self._stat_tuple(path, False)[0]):
                yield from self.walk(path, topdown, followlinks)
        if not topdown:
            yield top, dirs, files


def _rel(relpath: StrPath) -> str:
    p = os.fspath(relpath)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def _plain(relpath: str) -> str:
    """``relpath`` as a plain path from the root, as ``os.path.normpath``
    makes it: "." and empty components dropped, ".." taking away the one
    before it (none above the root); "" for the root. Paths built on it lie
    inside the tree."""
    parts: List[str] = []
    for comp in relpath.split("/"):
        if comp == "..":
            if parts:
                parts.pop()
        elif comp and comp != ".":
            parts.append(comp)
    return "/".join(parts)


class _RawFile(io.RawIOBase):
    """A file of an index, read by offset: what ``Index.open`` buffers."""

    def __init__(self, index: Index, name: str, inode: int, size: int) -> None:
        super().__init__()
        self._index = index
        self.name = name
        self._inode = inode
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def readinto(self, b: Any) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if self._pos >= self._size:
            return 0
        n = self._index._readinto(self._inode, self._pos, b, self.name)
        self._pos += n
        return n

    def readall(self) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        data = self._index.read(self.name, offset=self._pos)
        self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"whence {whence}: expected 0, 1 or 2")
        if pos < 0:
            raise OSError(22, f"{self.name}: negative seek position {pos}")
        self._pos = pos
        return pos

    def tell(self) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        return self._pos

    def fileno(self) -> int:
        raise io.UnsupportedOperation(f"{self.name}: a shardfs file has no descriptor")

    def __repr__(self) -> str:
        return f"<shardfs file {self.name!r}>"
