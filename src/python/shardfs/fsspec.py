"""fsspec's filesystem over a shardfs index: the protocol ``shardfs``.

Registered with fsspec by the package's entry point (the ``fsspec.specs``
group), so that once the package is installed::

    fs = fsspec.filesystem("shardfs", index="train.idx")
    fs.ls("train/cat")
    with fsspec.open("shardfs://train/cat/0001.jpg", index="train.idx") as f:
        ...
    pandas.read_csv("shardfs://meta/labels.csv", storage_options={"index": "train.idx"})

``index`` is an open ``shardfs.Index`` or what ``shardfs.Index`` takes as
its path (an index directory, manifest, bundle or URL); with a path, the
other keyword options (``view=``, ``rank=``, ``world=``, ``verify=``,
``cache_dir=``, ...) are ``Index``'s. An instance opened from a path is
cached by fsspec as its instances are (per process and thread); one over an
``Index`` object is never cached, so that two indexes with the same path and
different options are never taken for each other. Pickled (dask, a
``DataLoader`` started with "spawn") as what opens it again: the index's path
and options, through ``Index``'s own pickling.

Paths are relative to the index's root: the protocol and any leading or
trailing "/" are stripped ("" is the root). ``ls``/``info`` give fsspec's
entries: ``name``, ``size`` (0 for a directory), ``type`` ("file",
"directory", "link" for a symbolic link, as fsspec's SFTP and SMB
filesystems list them, "other"), ``mode``, ``mtime`` (seconds), ``ino``,
``nlink``, ``uid``, ``gid`` and ``islink``; a link also has ``destination``
(its target) and as ``size`` the size of the file it resolves to (0 if none),
as fsspec's local filesystem gives them. ``walk``, ``find`` and ``glob`` are
fsspec's own over ``ls``: like ``os.walk``, they list links as files and do
not descend through them. ``exists``, ``isfile`` and ``isdir`` follow links,
as ``os.path``'s do; ``lexists`` does not.

Costs: ``info`` is one lookup (two and a readlink for a link); ``ls`` lists
the directory and looks up each entry; ``cat_file`` is one read of the range
(and a lookup for a negative ``start`` or ``end``); ``open`` returns
``Index.open``'s seekable binary file, with ``size``.

Read-only: opening for writing, and every call that would change the tree
(``mkdir``, ``rm``, ``mv``, ``cp_file``, ``put_file``, ``pipe_file``,
``touch``...) raise ``PermissionError`` (``errno.EROFS``).

``import shardfs`` does not import this module, nor fsspec.
"""

import datetime
import errno
import stat as _stat
from typing import Any, Dict, List, NoReturn, Optional, Union

import fsspec
from fsspec.spec import _Cached
from fsspec.utils import stringify_path, tokenize

from . import Index

__all__ = ["ShardfsFileSystem"]

# fsspec's own options of AbstractFileSystem.__init__ (the listings cache);
# every other keyword option is Index's.
_FSSPEC_OPTIONS = ("use_listings_cache", "listings_expiry_time", "max_paths", "asynchronous",
                   "loop")

Info = Dict[str, Any]


class _NoCacheForIndexObjects(_Cached):
    """fsspec caches instances by the text of their arguments; an Index
    object's text is its path, which does not tell its options apart."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        index = args[0] if args else kwargs.get("index")
        if isinstance(index, Index):
            kwargs.setdefault("skip_instance_cache", True)
        return super().__call__(*args, **kwargs)


class ShardfsFileSystem(fsspec.AbstractFileSystem,
                        metaclass=_NoCacheForIndexObjects):
    """A shardfs index as a read-only fsspec filesystem (``protocol``
    "shardfs"). ``index``: a ``shardfs.Index``, or the path ``Index`` opens
    with the keyword ``options`` (``view=``, ``verify=``, ...). Raises
    ValueError without ``index``, or with options beside an ``Index``
    object (they were given when it was opened)."""

    protocol = "shardfs"
    root_marker = ""

    def __init__(self, index: Any = None, **options: Any) -> None:
        fs_options = {k: options.pop(k) for k in _FSSPEC_OPTIONS if k in options}
        super().__init__(**fs_options)
        if index is None:
            raise ValueError("shardfs: index= is required (a shardfs.Index or the path of an index)")
        if isinstance(index, Index):
            if options:
                raise ValueError(
                    f"shardfs: options {sorted(options)} apply when index= is a path; "
                    f"index {index.path!r} is already open")
            self.index = index
        else:
            self.index = Index(index, **options)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        for prefix in ("shardfs://", "shardfs::"):
            if path.startswith(prefix):
                path = path[len(prefix):]
        return path.strip("/")

    # -- Metadata -------------------------------------------------------------

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        """The entries of directory ``path`` (through a link to one), in name
        order: their info dicts, or their paths without ``detail``. A file,
        a link to one or a dangling link lists as itself, as in fsspec's
        other filesystems. Raises FileNotFoundError."""
        rel = self._strip_protocol(path)
        try:
            names = self.index.listdir(rel)
        except (NotADirectoryError, FileNotFoundError):
            entry = self.info(rel)  # FileNotFoundError if there is nothing.
            return [entry] if detail else [entry["name"]]
        paths = [f"{rel}/{name}" if rel else name for name in names]
        if not detail:
            return paths
        return [self.info(p) for p in paths]

    def info(self, path: str, **kwargs: Any) -> Info:
        """The entry of ``path`` itself (a link not followed). Raises
        FileNotFoundError."""
        rel = self._strip_protocol(path)
        try:
            st = self.index.lstat(rel)
        except NotADirectoryError as e:  # "file/x": fsspec's callers expect this.
            raise FileNotFoundError(errno.ENOENT, str(e), rel) from e
        mode = st.st_mode
        out: Info = {"name": rel, "size": st.st_size, "type": "file", "mode": mode,
                     "mtime": st.st_mtime, "ino": st.st_ino, "nlink": st.st_nlink,
                     "uid": st.st_uid, "gid": st.st_gid, "islink": False}
        if _stat.S_ISDIR(mode):
            out.update(type="directory", size=0)
        elif _stat.S_ISLNK(mode):
            out.update(type="link", islink=True, destination=self.index.readlink(rel))
            try:
                target = self.index.stat(rel)
                out["size"] = target.st_size if _stat.S_ISREG(target.st_mode) else 0
            except OSError:
                out["size"] = 0
        elif not _stat.S_ISREG(mode):
            out.update(type="other", size=0)
        return out

    def exists(self, path: str, **kwargs: Any) -> bool:
        return bool(self.index.exists(self._strip_protocol(path)))

    def lexists(self, path: str, **kwargs: Any) -> bool:
        try:
            self.index.lstat(self._strip_protocol(path))
            return True
        except OSError:
            return False

    def isdir(self, path: str) -> bool:
        return bool(self.index.isdir(self._strip_protocol(path)))

    def isfile(self, path: str) -> bool:
        return bool(self.index.isfile(self._strip_protocol(path)))

    def modified(self, path: str) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], tz=datetime.timezone.utc)

    def ukey(self, path: str) -> str:
        """Changes when the entry does: the index's path, the entry's path,
        inode number, mode, size and mtime."""
        info = self.info(path)
        return str(tokenize(self.index.path, *(info[k] for k in
                                               ("name", "ino", "mode", "size", "mtime"))))

    # -- Reads ----------------------------------------------------------------

    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None,
                 **kwargs: Any) -> bytes:
        """The bytes of file ``path`` from ``start`` to ``end`` (exclusive),
        as a Python slice takes them: None for its start or end, negative
        counted from the end. Raises FileNotFoundError, IsADirectoryError."""
        rel = self._strip_protocol(path)
        if (start is not None and start < 0) or (end is not None and end < 0):
            size = self.index.stat(rel).st_size
            start, end, _ = slice(start, end).indices(size)
        begin = start or 0
        size = -1 if end is None else max(0, end - begin)
        return bytes(self.index.read(rel, offset=begin, size=size))

    def _open(self, path: str, mode: str = "rb", block_size: Optional[int] = None,
              autocommit: bool = True, cache_options: Optional[Dict[str, Any]] = None,
              **kwargs: Any) -> Any:
        if mode not in ("rb", "br"):
            self._read_only(path)
        rel = self._strip_protocol(path)
        f: Any = self.index.open(rel, buffering=block_size if block_size else -1)
        f.size = f.seek(0, 2)  # fsspec's files tell their size.
        f.seek(0)
        return f

    # -- Writes ---------------------------------------------------------------

    def _read_only(self, path: Union[str, List[str]]) -> NoReturn:
        raise PermissionError(errno.EROFS, f"a shardfs index is read-only: {path}")

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self._read_only(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self._read_only(path)

    def rmdir(self, path: str) -> None:
        self._read_only(path)

    def rm_file(self, path: str) -> None:
        self._read_only(path)

    def _rm(self, path: str) -> None:
        self._read_only(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: Optional[int] = None) -> None:
        self._read_only(path)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        self._read_only(path2)

    def mv(self, path1: Any, path2: Any, recursive: bool = False,
           maxdepth: Optional[int] = None, **kwargs: Any) -> None:
        self._read_only(path1)

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> None:
        self._read_only(rpath)

    def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        self._read_only(path)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        self._read_only(path)
