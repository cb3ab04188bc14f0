#!/usr/bin/env python3
"""The Python package is typed: `mypy --strict` (Debian's python3-mypy) checks
the package itself and a program that uses every public name, and flags the
wrong calls a user makes (a positional offset, size, view, rank or world; a
result used as the wrong type; a misspelt keyword). `inspect.signature` reads
every public method of Index, and the write side's options (Index.build,
pack) are keyword-only; `shardfs.__version__` is the build's version.

The package's own check skips torch's sources (huge, and typed or not by
release): `shardfs.torch`'s classes then subclass an unknown type, which is
allowed for that module alone (mypy.ini below); its own signatures are still
checked, and so are the calls of the user program into it.
"""
import inspect
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=<build>/src/python)

PACKAGE = os.path.dirname(shardfs.__file__)

MYPY_INI = """[mypy]
[mypy-torch.*]
follow_imports = skip
[mypy-shardfs.torch]
disallow_subclassing_any = False
[mypy-shardfs.fsspec]
disallow_subclassing_any = False
[mypy-fsspec.*]
ignore_missing_imports = True
[mypy-PIL.*]
ignore_missing_imports = True
"""

# Every public name, used as documented.
GOOD = '''
import io
import os
from typing import Any, BinaryIO, Collection, Dict, Iterator, List, Optional, TextIO, Tuple
import shardfs
import shardfs.torch as st


def caption(key: str, data: bytes) -> Optional[str]:
    return data.decode() if key == ".txt" else None


def use(path: str) -> None:
    version: str = shardfs.__version__
    p: shardfs.StrPath = os.fsencode(path)
    with shardfs.Index(p, view=None, rank=None, world=None, seed=0, rank_keep_dirs=False,
                       verify="auto", cache_dir=None, cache_size=0, storage="auto",
                       decode_cache=None, max_open_shards=None) as ix:
        data: bytes = ix.read("a/b.jpg", offset=0, size=-1)
        many: List[bytes] = ix.read_many(["a/b.jpg"])
        ix.prefetch(["a/b.jpg"])
        names: List[str] = ix.files("a/")
        target: str = ix.readlink("link")
        st_: os.stat_result = ix.stat("a", follow_symlinks=False)
        lst: os.stat_result = ix.lstat("a")
        flags: Tuple[bool, bool, bool] = (ix.exists("a"), ix.isdir("a"), ix.isfile("a"))
        listed: List[str] = ix.listdir("")
        for dirpath, dirs, files in ix.walk("", topdown=True, followlinks=False):
            print(dirpath.upper(), len(dirs), len(files))
        f: BinaryIO = ix.open("a/b.jpg")
        raw: BinaryIO = ix.open("a/b.jpg", "rb", buffering=0)
        t: TextIO = ix.open("a/c.json", "r", encoding="utf-8")
        print(version, data, many, names, target, st_, lst, flags, listed, f.read(), raw.read(1),
              t.read(), ix.path, ix.closed)
        paths: Collection[str] = ix
        count: int = len(ix)
        has: bool = "a/b.jpg" in ix and b"a/b.jpg" in ix
        each: Iterator[str] = iter(ix)
        print(paths, count, has, next(each).upper(), [p.lower() for p in ix])
        try:
            ix.read("a")
        except (shardfs.CorruptShardError, shardfs.FetchError) as e1:
            err: shardfs.Error = e1
            eio: OSError = err
            print(eio.errno, eio.filename)
        except (shardfs.NotFoundError, shardfs.IsADirError, shardfs.NotADirError) as e2:
            missing: FileNotFoundError | IsADirectoryError | NotADirectoryError = e2
            print(missing)
    ix.close()
    ds = st.SampleDataset(path, view=None, root="", rank=None, world=None, seed=0,
                          drop_last=False, decode=None, transform=None, extensions=("jpg",))
    item: Dict[str, Any] = ds[0]
    shard: str = item["__shard__"]
    decoded = st.SampleDataset(path + "/train", decode="torchrgb",
                               transform=lambda it: (it["jpg"], it["cls"]), extensions="jpg cls")
    mine = st.SampleDataset(path, decode=caption, extensions=[".txt"])
    decoder: st.Decoder = caption
    specs: List[str] = list(st.IMAGE_DECODERS)
    batch: List[Any] = decoded.__getitems__([0, 1])
    im = st.ImageFolder(path, None, None, lambda f: f.read(), None, False, root="train")
    im2 = st.ImageFolder(path + "/train", loader=st.pil_loader)
    print(len(ds), len(im), len(im2), ds.placements[0][0] + 1, shard, mine[0], decoder, specs,
          batch, st.DEFAULT_DECODERS["cls"](b"1"))
    s = st.JobSampler(ds, rank=0, world=1, seed=0, shuffle=True, drop_last=False, block=64)
    s.set_epoch(1)
    e = st.EpochSampler(ds, 0, True, rank=0, world=1, drop_last=False)
    stream = st.SampleStream(path, rank=0, world=1, seed=0, shuffle_buffer=10, decode=None,
                             extensions=None, drop_last=False)
    stream.set_epoch(2)
    share: List[int] = stream.worker_share(0, 2)
    print(list(s), list(e), len(stream), share)
    built: shardfs.Index = shardfs.Index.build(
        path + ".idx", [path, os.fsencode(path)], force=False, jobs=2, memory="1G",
        checksum=True, seek_spacing=2 << 20, from_list=None, url_prefix=None, part=(0, 2),
        max_shard_size="64G", max_list_pages=10, recursive=True, recursive_depth=2,
        strip_recursive_tar_extension=True, strip_recursive_zip_extension=False,
        max_zip_ratio=100, recursive_max_entries=None)
    packed: shardfs.Index = shardfs.pack(
        path, path + ".out", shard_size=1 << 30, max_files=None, name="s-%06d.tar", jobs=4,
        from_list=None, shuffle=7, exclude=["*.tmp"], skip_unreadable=False, skip_special=True,
        follow_symlinks=False, force=True, compress="zstd", compress_level=3, group_bytes="1M",
        part="0/2")
    with shardfs.Index.build(path + ".idx", path) as one:
        print(built.files(), packed.read("a"), one.path)
'''

# Each line marked "# wrong" must get an error from mypy.
BAD = '''
import shardfs
import shardfs.torch as st


def use(path: str) -> None:
    ix = shardfs.Index(path)
    ix.read("a", 5)  # wrong
    ix.read("a", offset=0, size=1).upper().lower()
    shardfs.Index(path, "view")  # wrong
    text: str = ix.read("a")  # wrong
    ix.read("a", ofset=3)  # wrong
    ds = st.SampleDataset(path, "view")  # wrong
    st.JobSampler(ds, 0, 1)  # wrong
    st.ImageFolder(path, allow_empty="yes")  # wrong
    ix.open("a", "w")  # wrong
    shardfs.pack(path, path, shard_sise="1G")  # wrong
    shardfs.pack(path, path, 1 << 30)  # wrong
    shardfs.Index.build(path, [path], jobs="2")  # wrong
    shardfs.Index.build(path, [path], part=[0, 2])  # wrong
    name: str = shardfs.pack(path, path)  # wrong
    st.SampleDataset(path, decode=3)  # wrong
    st.SampleDataset(path, decode=lambda data: data)  # wrong
    n_files: str = len(ix)  # wrong
    first_file: bytes = next(iter(ix))  # wrong
    print(text, n_files, first_file)
'''


class TypingTest(tl.ScratchTestCase):
    PREFIX = "shardfs-python-typing-"

    def mypy(self, *targets, cwd=None):
        ini = os.path.join(self.tmp, "mypy.ini")
        with open(ini, "w") as f:
            f.write(MYPY_INI)
        env = dict(os.environ, MYPYPATH=os.path.dirname(PACKAGE))
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--config-file", ini,
             "--cache-dir", os.path.join(self.tmp, "mypy-cache"), *targets],
            cwd=cwd or self.tmp, env=env, capture_output=True, text=True, timeout=600)

    def test_package_and_a_user_program_check_strict(self):
        prog = os.path.join(self.tmp, "good.py")
        with open(prog, "w") as f:
            f.write(GOOD)
        for args in (["-p", "shardfs"], [prog]):
            p = self.mypy(*args)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("Success", p.stdout)

    def test_wrong_calls_are_flagged(self):
        prog = os.path.join(self.tmp, "bad.py")
        with open(prog, "w") as f:
            f.write(BAD)
        want = {i + 1 for i, line in enumerate(BAD.splitlines()) if line.endswith("# wrong")}
        p = self.mypy(prog)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        got = {int(m.group(1)) for m in re.finditer(r"^bad\.py:(\d+): error", p.stdout, re.M)}
        self.assertEqual(got, want, p.stdout)

    def test_signatures_and_version(self):
        for name in ("read", "read_many", "prefetch", "files", "readlink", "close", "open",
                     "stat", "lstat", "exists", "isdir", "isfile", "listdir", "walk",
                     "__init__", "__len__", "__iter__", "__contains__"):
            sig = inspect.signature(getattr(shardfs.Index, name))
            self.assertIn("self", sig.parameters, name)
            for param in sig.parameters.values():
                if param.name not in ("self", "exc"):
                    self.assertIsNot(param.annotation, inspect.Parameter.empty, (name, param))
        read = inspect.signature(shardfs.Index.read).parameters
        self.assertEqual(read["offset"].kind, inspect.Parameter.KEYWORD_ONLY)
        self.assertEqual(read["size"].kind, inspect.Parameter.KEYWORD_ONLY)
        # The write side's options: keyword-only, annotated.
        for fn, positional in ((shardfs.Index.build, ("out", "shards")),
                               (shardfs.pack, ("src", "out"))):
            params = inspect.signature(fn).parameters
            self.assertEqual(tuple(params)[:2], positional)
            for param in list(params.values())[2:]:
                self.assertEqual(param.kind, inspect.Parameter.KEYWORD_ONLY, param)
                self.assertIsNot(param.annotation, inspect.Parameter.empty, param)
        init = inspect.signature(shardfs.Index.__init__).parameters
        for name in ("view", "rank", "world"):
            self.assertEqual(init[name].kind, inspect.Parameter.KEYWORD_ONLY, name)
        p = tl.run_shardfs("--version", check=0)
        out = p.stdout.decode() if isinstance(p.stdout, bytes) else p.stdout
        self.assertEqual(out.split()[-1], shardfs.__version__)
        self.assertTrue(os.path.exists(os.path.join(PACKAGE, "py.typed")))


if __name__ == "__main__":
    tl.main()
