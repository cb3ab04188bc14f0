#!/usr/bin/env python3
"""shardfs.fsspec: a shardfs index as an fsspec filesystem (protocol "shardfs").

One loose tree (nested directories, a link to a directory, a link to a file,
a dangling link, an empty file, a 1.5 MB random file) is tarred into three
shards and indexed. fsspec's calls on the index are compared with the same
calls of fsspec's LocalFileSystem on the loose tree (ls, find, glob, walk:
the same paths) and with os (info: type, size, mode, mtime, links' targets;
cat_file: Python's slices of the file's bytes, negative bounds too; open:
reads after seeks). Then: writes refused, fsspec.open with index=, the
instance cache (one per path and options, never shared between two Index
objects), view= passed to Index, pickling into a fresh interpreter.

The entry point: the `fsspec.specs` table of pyproject.toml, read with
pyproject-metadata (what meson-python writes the wheel's metadata from),
is written as a dist-info's entry_points.txt in a scratch folder; a fresh
interpreter with that folder on its path must find the protocol through
fsspec's own entry-point scan. No wheel is built or installed: the test
covers the table's content and fsspec's reading of it, not meson-python's
copying it into a wheel. In this process the class is registered by hand
when no entry point names it (the build tree is not installed).

Runs under the interpreter the package was built for, with Debian's
python3-fsspec.
"""
import os
import pickle
import random
import stat
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

import fsspec  # noqa: E402
from fsspec.implementations.local import LocalFileSystem  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=<build>/src/python)

T0 = 1_600_000_000
SOURCE_ROOT = os.environ.get("SHARDFS_SOURCE_ROOT",
                             os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

if "shardfs" not in fsspec.available_protocols():
    fsspec.register_implementation("shardfs", "shardfs.fsspec.ShardfsFileSystem")


def make_tree(root, seed=7):
    rnd = random.Random(seed)
    for d in ("train/cat", "train/dog/sub/deep", "val"):
        os.makedirs(os.path.join(root, d))
    for i in range(5):
        tl.write_file(os.path.join(root, "train", "cat", f"{i}.jpg"), rnd.randbytes(100 + 37 * i))
    tl.write_file(os.path.join(root, "train", "dog", "x.jpg"), rnd.randbytes(999))
    tl.write_file(os.path.join(root, "train", "dog", "sub", "deep", "y.txt"), b"deep\n")
    tl.write_file(os.path.join(root, "val", "a.csv"), b"x,y\n1,2\n3,4\n")
    tl.write_file(os.path.join(root, "val", "b.csv"), b"x,y\n")
    tl.write_file(os.path.join(root, "empty"), b"")
    tl.write_file(os.path.join(root, "large.bin"), rnd.randbytes(1_500_000))
    os.symlink("cat", os.path.join(root, "train", "cats"))
    os.symlink("large.bin", os.path.join(root, "large.link"))
    os.symlink("nowhere", os.path.join(root, "dangling"))
    os.chmod(os.path.join(root, "val", "b.csv"), 0o600)
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (T0, T0), follow_symlinks=False)
    os.utime(root, (T0, T0))


def expected_info(root, rel):
    """fsspec's entry for `rel`, from os.lstat/os.stat of the loose tree."""
    p = os.path.join(root, rel)
    st = os.lstat(p)
    out = {"name": rel, "mode": st.st_mode, "mtime": float(st.st_mtime), "islink": False}
    if stat.S_ISDIR(st.st_mode):
        out.update(type="directory", size=0)
    elif stat.S_ISLNK(st.st_mode):
        out.update(type="link", islink=True, destination=os.readlink(p))
        target = os.stat(p) if os.path.exists(p) else None
        out["size"] = target.st_size if target and stat.S_ISREG(target.st_mode) else 0
    else:
        out.update(type="file", size=st.st_size)
    return out


class FsspecTest(tl.ScratchTestCase):
    PREFIX = "shardfs-fsspec-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        os.makedirs(cls.src)
        make_tree(cls.src)
        shards = os.path.join(cls.tmp, "shards")
        os.makedirs(shards)
        cls.idx = os.path.join(cls.tmp, "idx")
        tl.build_index(tl.tar_into_shards(cls.src, shards, 3), cls.idx)
        cls.fs = fsspec.filesystem("shardfs", index=cls.idx)
        cls.local = LocalFileSystem()

    def rel(self, path):
        r = os.path.relpath(path, self.src)
        return "" if r == "." else r

    def loose_dirs(self):
        """Every directory of the loose tree (not through links), relative."""
        return [self.rel(d) for d, _, _ in os.walk(self.src)]

    def loose_entries(self):
        out = []
        for d, dirnames, filenames in os.walk(self.src):
            out += [self.rel(os.path.join(d, n)) for n in dirnames + filenames]
        return sorted(out)

    def loose_bytes(self, rel):
        return tl.read_file(os.path.join(self.src, rel))

    # -- Metadata -------------------------------------------------------------

    def test_ls_matches_local_filesystem(self):
        for d in self.loose_dirs() + ["train/cats"]:
            want = sorted(self.rel(p) for p in self.local.ls(os.path.join(self.src, d),
                                                             detail=False))
            got = self.fs.ls(d, detail=False)
            self.assertEqual(got, want, d)
            self.assertEqual(got, sorted(got), f"{d}: not in name order")
            self.assertEqual([e["name"] for e in self.fs.ls(d)], got, d)

    def test_info_matches_os(self):
        for rel in self.loose_entries():
            got = self.fs.info(rel)
            want = expected_info(self.src, rel)
            self.assertEqual({k: got.get(k) for k in want}, want, rel)
            self.assertEqual(self.fs.size(rel), want["size"], rel)
            self.assertEqual(self.fs.modified(rel).timestamp(), T0, rel)
        root = self.fs.info("")
        self.assertEqual((root["name"], root["type"]), ("", "directory"))

    def test_ls_detail_is_info(self):
        for d in self.loose_dirs():
            for entry in self.fs.ls(d, detail=True):
                self.assertEqual(entry, self.fs.info(entry["name"]))

    def test_ls_of_a_file_and_errors(self):
        for rel in ("large.bin", "large.link", "dangling", "val/a.csv"):
            self.assertEqual(self.fs.ls(rel, detail=True), [self.fs.info(rel)], rel)
            self.assertEqual(self.fs.ls(rel, detail=False), [rel], rel)
        for bad in ("nope", "train/nope", "large.bin/x"):
            with self.assertRaises(FileNotFoundError, msg=bad):
                self.fs.info(bad)
            with self.assertRaises(FileNotFoundError, msg=bad):
                self.fs.ls(bad)

    def test_paths_with_protocol_and_slashes(self):
        want = self.fs.ls("train/dog", detail=False)
        for p in ("shardfs://train/dog", "/train/dog/", "shardfs:///train/dog", "train/dog/"):
            self.assertEqual(self.fs.ls(p, detail=False), want, p)
        self.assertEqual(self.fs.info("shardfs://val/a.csv")["name"], "val/a.csv")
        self.assertEqual(self.fs.ls("shardfs://", detail=False), self.fs.ls("", detail=False))

    def test_exists_isdir_isfile_as_os_path(self):
        for rel in self.loose_entries() + ["nope", "val/nope", "train/cats/0.jpg"]:
            p = os.path.join(self.src, rel)
            self.assertEqual(self.fs.exists(rel), os.path.exists(p), rel)
            self.assertEqual(self.fs.lexists(rel), os.path.lexists(p), rel)
            self.assertEqual(self.fs.isdir(rel), os.path.isdir(p), rel)
            self.assertEqual(self.fs.isfile(rel), os.path.isfile(p), rel)

    def test_find_matches_local_filesystem(self):
        for path, kw in (("", {}), ("", {"withdirs": True}), ("", {"maxdepth": 1}),
                         ("train", {}), ("train", {"withdirs": True, "maxdepth": 2}),
                         ("train/cats", {}), ("large.bin", {}), ("nope", {})):
            want = [self.rel(p) for p in self.local.find(os.path.join(self.src, path), **kw)]
            self.assertEqual(self.fs.find(path, **kw), want, (path, kw))
        self.assertEqual(sorted(self.fs.find("", detail=True)), self.fs.find(""))

    def test_glob_matches_local_filesystem(self):
        for pattern in ("**/*.jpg", "train/*", "train/*/*.jpg", "*", "train/**", "val/?.csv",
                        "large.bin", "large.*", "nope*", "*/[ab].csv",
                        "train/cats/*"):
            want = [self.rel(p) for p in self.local.glob(os.path.join(self.src, pattern))]
            self.assertEqual(self.fs.glob(pattern), want, pattern)
            self.assertEqual(self.fs.glob("shardfs://" + pattern), want, pattern)
        # A path ending in "/" without magic lists the directory, as fsspec's
        # spec says (LocalFileSystem strips the "/" before its base class sees it).
        self.assertEqual(self.fs.glob("train/dog/"), self.fs.ls("train/dog", detail=False))

    def test_walk_matches_local_filesystem(self):
        def norm(walk, root):
            return sorted((self.rel(os.path.join(root, d)) if root else d,
                           sorted(dirs), sorted(files)) for d, dirs, files in walk)

        for top, kw in (("", {}), ("train", {}), ("", {"maxdepth": 2}),
                        ("", {"topdown": False})):
            want = norm(self.local.walk(os.path.join(self.src, top), **kw), self.src)
            got = list(self.fs.walk(top, **kw))
            self.assertEqual(norm(got, None), want, (top, kw))
        got = list(self.fs.walk("", topdown=False))
        self.assertEqual(got[-1][0], "", "bottom-up: the top comes last")
        detail = list(self.fs.walk("train", detail=True))
        self.assertEqual(detail[0][2]["cats"], self.fs.info("train/cats"))

    # -- Reads ----------------------------------------------------------------

    def test_cat_file_whole_and_ranges(self):
        rnd = random.Random(3)
        files = [r for r in self.loose_entries() if os.path.isfile(os.path.join(self.src, r))]
        for rel in files:
            data = self.loose_bytes(rel)
            self.assertEqual(self.fs.cat_file(rel), data, rel)
            n = len(data)
            bounds = [None, 0, 1, -1, n, n + 5, -n - 5]
            bounds += [rnd.randrange(-n - 2, n + 2) for _ in range(6)]
            for _ in range(30):
                start, end = rnd.choice(bounds), rnd.choice(bounds)
                self.assertEqual(self.fs.cat_file(rel, start, end), data[start:end],
                                 (rel, start, end))
        self.assertEqual(self.fs.cat_file("large.bin", -10), self.loose_bytes("large.bin")[-10:])
        got = self.fs.cat(["val/a.csv", "shardfs://val/b.csv"])
        self.assertEqual(got, {"val/a.csv": self.loose_bytes("val/a.csv"),
                               "val/b.csv": self.loose_bytes("val/b.csv")})
        with self.assertRaises(IsADirectoryError):
            self.fs.cat_file("train")
        with self.assertRaises(FileNotFoundError):
            self.fs.cat_file("dangling", 0, 0)

    def test_open_read_and_seek(self):
        data = self.loose_bytes("large.bin")
        rnd = random.Random(4)
        for path in ("large.bin", "large.link", "shardfs://large.bin"):
            with self.fs.open(path) as f:
                self.assertEqual(f.size, len(data))
                self.assertTrue(f.seekable() and f.readable())
                self.assertEqual(f.read(1000), data[:1000])
                for _ in range(50):
                    whence = rnd.choice((0, 1, 2))
                    off = {0: rnd.randrange(len(data) + 10), 1: rnd.randrange(-f.tell(), 5000),
                           2: -rnd.randrange(len(data))}[whence]
                    pos = (off, f.tell() + off, len(data) + off)[whence]
                    self.assertEqual(f.seek(off, whence), pos, (path, whence, off))
                    self.assertEqual(f.tell(), pos)
                    n = rnd.randrange(70000)
                    self.assertEqual(f.read(n), data[pos:pos + n], (path, whence, off, n))
        with self.fs.open("empty") as f:
            self.assertEqual((f.size, f.read()), (0, b""))
        with self.fs.open("val/a.csv", "r") as f:
            self.assertEqual(f.read(), self.loose_bytes("val/a.csv").decode())
        for off, length in ((1, 6), (0, 5), (5, 100), (3, 0)):
            self.assertEqual(self.fs.read_block("val/a.csv", off, length, delimiter=b"\n"),
                             self.local.read_block(os.path.join(self.src, "val/a.csv"), off,
                                                   length, delimiter=b"\n"), (off, length))
        self.assertEqual(self.fs.head("large.bin", 77), data[:77])
        self.assertEqual(self.fs.tail("large.bin", 77), data[-77:])
        with self.assertRaises(IsADirectoryError):
            self.fs.open("train")
        with self.assertRaises(FileNotFoundError):
            self.fs.open("nope")

    def test_fsspec_open_with_index_option(self):
        with fsspec.open("shardfs://train/dog/x.jpg", index=self.idx) as f:
            self.assertEqual(f.read(), self.loose_bytes("train/dog/x.jpg"))
        with fsspec.open("shardfs://val/a.csv", "rt", index=self.idx) as f:
            self.assertEqual(f.readlines(), ["x,y\n", "1,2\n", "3,4\n"])
        files = fsspec.open_files("shardfs://train/cat/*.jpg", index=self.idx)
        self.assertEqual([f.path for f in files], [f"train/cat/{i}.jpg" for i in range(5)])
        for f in files:
            with f as g:
                self.assertEqual(g.read(), self.loose_bytes(f.path))

    def test_writes_refused(self):
        fs = self.fs
        calls = [
            lambda: fs.open("new", "wb"), lambda: fs.open("val/a.csv", "ab"),
            lambda: fs.open("val/a.csv", "w"), lambda: fs.pipe_file("new", b"x"),
            lambda: fs.pipe("val/a.csv", b"x"), lambda: fs.touch("new"),
            lambda: fs.mkdir("d"), lambda: fs.makedirs("d/e", exist_ok=True),
            lambda: fs.rmdir("val"), lambda: fs.rm("val/a.csv"),
            lambda: fs.rm("train", recursive=True), lambda: fs.rm_file("val/a.csv"),
            lambda: fs.mv("val/a.csv", "val/c.csv"), lambda: fs.copy("val/a.csv", "val/c.csv"),
            lambda: fs.cp_file("val/a.csv", "val/c.csv"),
            lambda: fs.put_file(os.path.join(self.src, "empty"), "new"),
        ]
        for i, call in enumerate(calls):
            with self.assertRaises(PermissionError, msg=f"call {i}") as cm:
                call()
            self.assertIn("read-only", str(cm.exception))
        self.assertEqual(fs.find(""), [self.rel(p) for p in self.local.find(self.src)])

    # -- Instances ------------------------------------------------------------

    def test_instances_options_and_views(self):
        self.assertIs(fsspec.filesystem("shardfs", index=self.idx), self.fs)
        tl.view_create(self.idx, "noval", "--exclude", "val")
        view = fsspec.filesystem("shardfs", index=self.idx, view="noval")
        self.assertIsNot(view, self.fs)
        self.assertNotIn("val", view.ls("", detail=False))
        self.assertIn("val", self.fs.ls("", detail=False))
        # Two Index objects of one path: never taken for each other.
        a = fsspec.filesystem("shardfs", index=shardfs.Index(self.idx, view="noval"))
        b = fsspec.filesystem("shardfs", index=shardfs.Index(self.idx))
        self.assertFalse(a.exists("val/a.csv"))
        self.assertTrue(b.exists("val/a.csv"))
        with self.assertRaises(ValueError):
            fsspec.filesystem("shardfs")
        with self.assertRaises(ValueError):
            fsspec.filesystem("shardfs", index=shardfs.Index(self.idx), view="noval")
        with self.assertRaises(FileNotFoundError):
            fsspec.filesystem("shardfs", index=os.path.join(self.tmp, "no-index"))

    def test_pickled_into_a_fresh_interpreter(self):
        code = textwrap.dedent("""
            import pickle, sys
            fs = pickle.loads(sys.stdin.buffer.read())
            out = [fs.ls("", detail=False), fs.cat_file("large.bin", -7).hex(),
                   type(fs.index).__name__]
            sys.stdout.write(repr(out))
        """)
        for fs in (self.fs, fsspec.filesystem("shardfs", index=shardfs.Index(self.idx))):
            p = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(fs),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            want = [self.fs.ls("", detail=False), self.loose_bytes("large.bin")[-7:].hex(), "Index"]
            self.assertEqual(p.stdout.decode(), repr(want))

    # -- Packaging ------------------------------------------------------------

    def test_entry_point_found_by_fsspec(self):
        import tomllib
        from pyproject_metadata import StandardMetadata
        with open(os.path.join(SOURCE_ROOT, "pyproject.toml"), "rb") as f:
            meta = StandardMetadata.from_pyproject(tomllib.load(f), SOURCE_ROOT)
        self.assertEqual(meta.entrypoints.get("fsspec.specs"),
                         {"shardfs": "shardfs.fsspec:ShardfsFileSystem"})
        site = self.scratch("site")
        dist = os.path.join(site, f"{meta.name}-{meta.version}.dist-info")
        os.makedirs(dist)
        tl.write_file(os.path.join(dist, "METADATA"),
                      f"Metadata-Version: 2.1\nName: {meta.name}\nVersion: {meta.version}\n".encode())
        text = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
                       for group, eps in meta.entrypoints.items())
        tl.write_file(os.path.join(dist, "entry_points.txt"), text.encode())
        code = textwrap.dedent("""
            import sys
            from importlib.metadata import entry_points
            import fsspec
            [ep] = [e for e in entry_points(group="fsspec.specs") if e.name == "shardfs"]
            where = str(ep.dist.locate_file(""))
            assert where.rstrip("/") == sys.argv[1], where
            fs = fsspec.filesystem("shardfs", index=sys.argv[2])
            print(type(fs).__module__, type(fs).__name__, fs.cat_file("val/a.csv").hex())
        """)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, os.environ["PYTHONPATH"]]))
        p = subprocess.run([sys.executable, "-c", code, site, self.idx], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode().split(),
                         ["shardfs.fsspec", "ShardfsFileSystem",
                          self.loose_bytes("val/a.csv").hex()])

    def test_import_shardfs_imports_no_fsspec(self):
        p = subprocess.run(
            [sys.executable, "-c",
             "import sys, shardfs; assert 'fsspec' not in sys.modules, 'fsspec imported'"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(p.returncode, 0, p.stderr.decode())


if __name__ == "__main__":
    tl.main()
