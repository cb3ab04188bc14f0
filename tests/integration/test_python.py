#!/usr/bin/env python3
"""The Python package `shardfs` (src/python/shardfs): an index read in-process.

One loose tree (nested directories, images of two classes, JSON, an empty
file, a large random file, a zip and a tar as members) is packed four ways:
GNU tar shards, zip archives (stored and deflated), a .tar.gz with seek
points, and a tar of tars indexed with --recursive. For each, every file's
bytes read with `Index.read` (whole, and ranges at random offsets) and through
`Index.open` must equal the loose tree's; `stat`, `listdir`, `walk` and
`files` must agree with os.stat/os.listdir/os.walk.

Then: the errors Python users expect (FileNotFoundError, IsADirectoryError,
NotADirectoryError, ValueError after close, OSError(EIO) for a shard
overwritten with same-size different bytes, a clear message for a bad index
path); concurrent readers; fork safety (os.fork while other threads read, and
a torch DataLoader with 2 forked workers); shardfs.torch.ImageFolder against
torchvision's ImageFolder over the loose tree; SampleDataset against
WebDataset's grouping of the shards read with tarfile; and a run as user
nobody in a mount namespace where /dev/fuse is hidden.

Runs under the interpreter the package was built for (meson sets PYTHONPATH
to <build>/src/python); torch, torchvision and PIL are Debian's.
"""
import ctypes
import errno
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=<build>/src/python)

T0 = 1_600_000_000  # Even: zip's DOS times have 2-second steps.


def make_images(root, seed=5):
    """Two classes of small PNG and JPEG images, a nested subfolder, and a
    file that is no image (left out by ImageFolder)."""
    from PIL import Image
    rnd = random.Random(seed)
    for cls, n in (("cat", 7), ("dog", 5)):
        d = os.path.join(root, "images", cls)
        os.makedirs(os.path.join(d, "more"), exist_ok=True)
        for i in range(n):
            img = Image.new("RGB", (12 + i, 9))
            img.putdata([tuple(rnd.randrange(256) for _ in range(3))
                         for _ in range((12 + i) * 9)])
            sub = "more" if i % 3 == 2 else ""
            ext = "png" if i % 2 == 0 else "JPG"
            img.save(os.path.join(d, sub, f"{cls}-{i:02d}.{ext}"),
                     "PNG" if ext == "png" else "JPEG")
        tl.write_file(os.path.join(d, "notes.txt"), b"not an image\n")


def make_tree(root, seed=11):
    rnd = random.Random(seed)
    os.makedirs(root)
    make_images(root)
    for i in range(40):
        d = os.path.join(root, "data", f"part{i % 4}")
        os.makedirs(d, exist_ok=True)
        tl.write_file(os.path.join(d, f"{i:04d}.json"),
                      json.dumps({"i": i, "pad": "x" * rnd.randrange(3000)}).encode())
        tl.write_file(os.path.join(d, f"{i:04d}.bin"), rnd.randbytes(rnd.randrange(1, 9000)))
    tl.write_file(os.path.join(root, "empty"), b"")
    tl.write_file(os.path.join(root, "large.bin"), rnd.randbytes(1_500_000))  # > 1 MiB
    # Archives as members, for Index.open with zipfile and tarfile.
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(5):
            z.writestr(f"in/{i}.txt", (f"zip member {i}\n" * (i * 50 + 1)).encode())
    os.makedirs(os.path.join(root, "archives"))
    tl.write_file(os.path.join(root, "archives", "inner.zip"), inner.getvalue())
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as t:
        for i in range(4):
            data = rnd.randbytes(1000 * i + 7)
            info = tarfile.TarInfo(f"t/{i}.dat")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    tl.write_file(os.path.join(root, "archives", "inner.tar"), inner.getvalue())
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (T0, T0))


def stat_is_link(st):
    import stat
    return stat.S_ISLNK(st.st_mode)


def loose_files(root):
    """{relpath: bytes} of every file under root."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for n in filenames:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def webdataset_samples(shards):
    """WebDataset's samples of `shards`, read with tarfile: adjacent members
    with the same key (base_plus_ext's regex), extensions lowercased, files
    that do not match left out; each with its shard and its number, as
    webdataset's wids names them (`__shard__`, `__index__`)."""
    key_re = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
    samples = []
    for shard in shards:
        current = None
        with tarfile.open(shard, mode="r|*") as t:
            for m in t:
                if not m.isfile():
                    continue
                data = t.extractfile(m).read()
                g = key_re.match(m.name)
                if not g:
                    continue
                key, ext = g.group(1), g.group(2).lower()
                if current is None or current["__key__"] != key:
                    current = {"__key__": key, "__shard__": shard, "__index__": len(samples)}
                    samples.append(current)
                current[ext] = data
    return samples


class PythonPackageTest(tl.ScratchTestCase):
    PREFIX = "shardfs-python-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        make_tree(cls.src)
        cls.want = loose_files(cls.src)
        cls.indexes = {}
        # GNU tar shards.
        d = os.path.join(cls.tmp, "tar")
        os.makedirs(d)
        shards = tl.tar_into_shards(cls.src, d, 3)
        cls.tar_shards = shards
        cls.indexes["tar"] = os.path.join(d, "idx")
        tl.build_index(shards, cls.indexes["tar"])
        # Zip: one archive stored, one deflated.
        d = os.path.join(cls.tmp, "zip")
        os.makedirs(d)
        tops = sorted(os.listdir(cls.src))
        zips = []
        for i, (level, part) in enumerate((("-0", tops[0::2]), ("-6", tops[1::2]))):
            out = os.path.join(d, f"z{i}.zip")
            subprocess.run(["zip", "-q", "-r", "-X", level, out, "--", *part], cwd=cls.src,
                           check=True)
            zips.append(out)
        cls.indexes["zip"] = os.path.join(d, "idx")
        tl.build_index(zips, cls.indexes["zip"])
        # A .tar.gz with seek points every 64 KiB.
        d = os.path.join(cls.tmp, "tgz")
        os.makedirs(d)
        tgz = os.path.join(d, "all.tar.gz")
        subprocess.run(["tar", "--format=posix", "--sort=name", "-czf", tgz, "-C", cls.src,
                        "--", *tops], check=True)
        cls.indexes["tar.gz"] = os.path.join(d, "idx")
        tl.build_index([tgz], cls.indexes["tar.gz"], "--seek-spacing", "64K")
        # Nested: a tar holding one tar per top-level directory (its
        # contents, named DIR.tar) and the top-level files, indexed with
        # --recursive, one level deep (the tar and zip inside archives/
        # stay files).
        d = os.path.join(cls.tmp, "nested")
        os.makedirs(os.path.join(d, "outer"))
        members = []
        for top in tops:
            path = os.path.join(cls.src, top)
            if os.path.isdir(path):
                tl.tar_create(os.path.join(d, "outer", top + ".tar"), path,
                              sorted(os.listdir(path)))
                members.append(top + ".tar")
            else:
                shutil.copy2(path, os.path.join(d, "outer", top))
                members.append(top)
        outer = os.path.join(d, "outer.tar")
        tl.tar_create(outer, os.path.join(d, "outer"), members)
        cls.indexes["nested"] = os.path.join(d, "idx")
        tl.build_index([outer], cls.indexes["nested"], "--recursive", "--recursive-depth", "1",
                       "--strip-recursive-tar-extension")

    def open(self, kind="tar", **kw):
        return shardfs.Index(self.indexes[kind], **kw)

    # -- Bytes ---------------------------------------------------------------

    def test_bytes_of_every_shard_kind(self):
        rnd = random.Random(3)
        for kind in self.indexes:
            with self.subTest(kind=kind), self.open(kind) as idx:
                self.assertEqual(sorted(idx.files()), sorted(self.want), kind)
                for rel, data in self.want.items():
                    self.assertEqual(idx.read(rel), data, f"{kind}: {rel}")
                    self.assertEqual(idx.read("/" + rel), data, f"{kind}: /{rel}")
                    for _ in range(3):
                        off = rnd.randrange(len(data) + 2)
                        size = rnd.randrange(len(data) + 2)
                        self.assertEqual(idx.read(rel, offset=off, size=size), data[off:off + size],
                                         f"{kind}: {rel} [{off}:+{size}]")
                    with idx.open(rel) as f:
                        self.assertEqual(f.read(), data)
                        f.seek(len(data) // 3)
                        self.assertEqual(f.read(100), data[len(data) // 3:len(data) // 3 + 100])
                        self.assertEqual(f.tell(), min(len(data), len(data) // 3 + 100))
                        self.assertTrue(f.readable() and f.seekable())
                    raw = idx.open(rel, buffering=0)
                    buf = bytearray(len(data) + 10)
                    self.assertEqual(raw.readinto(buf), len(data))
                    self.assertEqual(bytes(buf[:len(data)]), data)
                    raw.close()
                # A batch, in any order: the same bytes as one read each.
                names = sorted(self.want)
                rnd.shuffle(names)
                self.assertEqual(idx.read_many(names), [self.want[n] for n in names], kind)
                self.assertEqual(idx.read_many(["/" + names[0], names[0]]),
                                 [self.want[names[0]]] * 2, kind)
                self.assertEqual(idx.read_many([]), [])
                # Prefetch asks, reads nothing, passes over what is no file.
                self.assertIsNone(idx.prefetch(names + ["no/such/file", "", "data"]))
                self.assertEqual([idx.read(n) for n in names], [self.want[n] for n in names])

    def test_files_in_tree_order_and_by_prefix(self):
        with self.open() as idx:
            files = idx.files()
            # Tree order: path components compared in turn, each by name.
            self.assertEqual(files, sorted(files, key=lambda p: p.split("/")))
            self.assertEqual(idx.files("data/part1/"),
                             [p for p in files if p.startswith("data/part1/")])
            self.assertEqual(idx.files("data/part1/000"),
                             [p for p in files if p.startswith("data/part1/000")])
            self.assertEqual(idx.files("images/c"),
                             [p for p in files if p.startswith("images/c")])
            self.assertEqual(idx.files("nothing/here"), [])

    def test_stat_listdir_walk(self):
        with self.open() as idx:
            for dirpath, dirnames, filenames in os.walk(self.src):
                rel = os.path.relpath(dirpath, self.src)
                rel = "" if rel == "." else rel
                self.assertEqual(idx.listdir(rel), sorted(dirnames + filenames), rel)
                for n in dirnames + filenames:
                    p = os.path.join(dirpath, n)
                    st, got = os.stat(p), idx.stat(os.path.join(rel, n))
                    self.assertEqual(got.st_mode, st.st_mode, p)
                    self.assertEqual(got.st_mtime, st.st_mtime, p)
                    self.assertEqual(got.st_mtime_ns, st.st_mtime_ns, p)
                    if not os.path.isdir(p):
                        self.assertEqual(got.st_size, st.st_size, p)
                    self.assertIsInstance(got, os.stat_result)
            want = [(("" if r == self.src else os.path.relpath(r, self.src)), sorted(d), sorted(f))
                    for r, d, f in os.walk(self.src)]
            self.assertEqual(sorted(idx.walk()), sorted(want))
            # Pruning in place, as os.walk allows.
            seen = []
            for top, dirs, _ in idx.walk():
                seen.append(top)
                dirs[:] = [x for x in dirs if x != "data"]
            self.assertNotIn("data/part0", seen)
            self.assertIn("images/cat/more", seen)
            self.assertTrue(idx.isdir("images") and idx.isfile("empty") and
                            idx.exists("large.bin") and not idx.exists("nope"))

    def test_open_with_pil_zipfile_tarfile(self):
        from PIL import Image
        with self.open("zip") as idx:
            with zipfile.ZipFile(idx.open("archives/inner.zip")) as z, \
                    zipfile.ZipFile(os.path.join(self.src, "archives/inner.zip")) as want:
                self.assertEqual(z.namelist(), want.namelist())
                for n in z.namelist():
                    self.assertEqual(z.read(n), want.read(n))
            with tarfile.open(fileobj=idx.open("archives/inner.tar")) as t, \
                    tarfile.open(os.path.join(self.src, "archives/inner.tar")) as want:
                self.assertEqual(t.getnames(), want.getnames())
                for m in t.getmembers():
                    self.assertEqual(t.extractfile(m).read(), want.extractfile(m.name).read())
            for rel in self.want:
                if rel.endswith((".png", ".JPG")):
                    with Image.open(idx.open(rel)) as got, \
                            Image.open(os.path.join(self.src, rel)) as ref:
                        self.assertEqual(got.size, ref.size)
                        self.assertEqual(got.convert("RGB").tobytes(),
                                         ref.convert("RGB").tobytes(), rel)

    def test_paths_and_symlinks(self):
        """Paths walk as the kernel walks them: "." and ".." and repeated
        slashes, links followed (relative targets), a loop refused; twice
        each, the second time from the remembered directories."""
        src = self.scratch("links-src")
        os.makedirs(os.path.join(src, "d", "e"))
        tl.write_file(os.path.join(src, "d", "e", "f.txt"), b"f")
        tl.write_file(os.path.join(src, "d", "g.txt"), b"gg")
        os.symlink("e/f.txt", os.path.join(src, "d", "to_f"))
        os.symlink("e", os.path.join(src, "d", "to_e"))
        os.symlink("../d/to_e", os.path.join(src, "up"))
        os.symlink("loop", os.path.join(src, "loop"))
        os.symlink("/etc/passwd", os.path.join(src, "outside"))
        d = self.scratch("links")
        shard = tl.tar_create(os.path.join(d, "s.tar"), src, ["d", "up", "loop", "outside"])
        tl.build_index([shard], os.path.join(d, "idx"))
        with shardfs.Index(os.path.join(d, "idx")) as idx:
            for _ in range(2):
                for path, want in (("d/e/f.txt", b"f"), ("d/to_f", b"f"), ("d/to_e/f.txt", b"f"),
                                   ("up/f.txt", b"f"), ("./d//e/../g.txt", b"gg"),
                                   ("d/to_e/../g.txt", b"gg"), ("/d/e/f.txt", b"f"),
                                   ("../d/g.txt", b"gg"), (b"d/g.txt", b"gg")):
                    self.assertEqual(idx.read(path), want, path)
                self.assertEqual(idx.readlink("d/to_f"), "e/f.txt")
                self.assertTrue(stat_is_link(idx.lstat("d/to_f")))
                self.assertEqual(idx.stat("d/to_f").st_size, 1)
                self.assertTrue(idx.isdir("up"))
                self.assertEqual(idx.listdir("up"), ["f.txt"])
                for bad in ("loop", "loop/x"):
                    with self.assertRaises(OSError) as cm:
                        idx.read(bad)
                    self.assertEqual(cm.exception.errno, errno.ELOOP, bad)
                with self.assertRaises(FileNotFoundError):
                    idx.read("outside")
                with self.assertRaises(NotADirectoryError):
                    idx.read("d/g.txt/x")
            top = {t: (dirs, files) for t, dirs, files in idx.walk()}
            self.assertEqual(top["d"], (["e", "to_e"], ["g.txt", "to_f"]))
            self.assertNotIn("d/to_e", top)
            self.assertIn("d/to_e", {t for t, _, _ in idx.walk(followlinks=True)})

    # -- Errors --------------------------------------------------------------

    def test_errors(self):
        idx = self.open()
        with self.assertRaises(FileNotFoundError) as cm:
            idx.read("data/missing.json")
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertEqual(cm.exception.filename, "data/missing.json")
        self.assertIn("data/missing.json", str(cm.exception))
        with self.assertRaises(FileNotFoundError):
            idx.stat("no/such/dir")
        with self.assertRaises(FileNotFoundError):
            idx.open("nope")
        with self.assertRaises(IsADirectoryError):
            idx.read("data")
        with self.assertRaises(IsADirectoryError):
            idx.open("images/cat")
        with self.assertRaises(NotADirectoryError):
            idx.listdir("empty")
        with self.assertRaises(NotADirectoryError):
            idx.read("empty/below")
        with self.assertRaises(ValueError):
            idx.open("empty", "w")
        # A batch fails as its first bad path would, naming it.
        with self.assertRaises(FileNotFoundError) as cm:
            idx.read_many(["empty", "data/missing.json", "data"])
        self.assertEqual(cm.exception.filename, "data/missing.json")
        with self.assertRaises(IsADirectoryError) as cm:
            idx.read_many(["empty", "data"])
        self.assertEqual(cm.exception.filename, "data")
        f = idx.open("large.bin")
        idx.close()
        idx.close()  # Idempotent.
        self.assertTrue(idx.closed)
        for call in (lambda: idx.read("empty"), lambda: idx.read_many(["empty"]),
                     lambda: idx.prefetch(["empty"]),
                     lambda: idx.stat("empty"),
                     lambda: idx.listdir(), lambda: idx.files(), lambda: f.read()):
            with self.assertRaises(ValueError):
                call()
        # Bad index paths, named in the message.
        missing = os.path.join(self.tmp, "no-such-index")
        with self.assertRaises(FileNotFoundError) as cm:
            shardfs.Index(missing)
        self.assertIn(missing, str(cm.exception))
        not_index = self.scratch("not-an-index")
        tl.write_file(os.path.join(not_index, "CURRENT"), b"junk\n")
        with self.assertRaises(OSError) as cm:
            shardfs.Index(not_index)
        self.assertIn(not_index, str(cm.exception))
        with self.assertRaises(ValueError):
            shardfs.Index(self.indexes["tar"], rank=1)
        with self.assertRaises(ValueError):
            shardfs.Index(self.indexes["tar"], verify="sometimes")

    def test_changed_shard_gives_eio_never_wrong_bytes(self):
        # A copy of the tar index and its shards, one shard overwritten in
        # place with same-size different bytes inside one member.
        d = self.scratch("changed")
        for s in self.tar_shards:
            shutil.copy(s, d)
        idx_path = os.path.join(d, "idx")
        tl.build_index([os.path.join(d, os.path.basename(s)) for s in self.tar_shards], idx_path)
        rel = "large.bin"
        for s in self.tar_shards:
            shard = os.path.join(d, os.path.basename(s))
            with open(shard, "rb") as f:
                blob = f.read()
            if self.want[rel][:4096] in blob:
                break
        at = blob.index(self.want[rel][:4096]) + 300_000  # The middle of the member.
        with shardfs.Index(idx_path) as idx:
            self.assertEqual(idx.read(rel, offset=0, size=10), self.want[rel][:10])
        with open(shard, "r+b") as f:
            f.seek(at)
            f.write(bytes(b ^ 0x5A for b in blob[at:at + 64]))
        self.assertEqual(os.path.getsize(shard), len(blob))
        with shardfs.Index(idx_path) as idx:
            for call in (lambda: idx.read(rel), lambda: idx.read(rel, offset=299_000, size=4096),
                         lambda: idx.open(rel).read(), lambda: idx.read_many(["empty", rel])):
                with self.assertRaises(OSError) as cm:
                    call()
                self.assertEqual(cm.exception.errno, errno.EIO)
        # A shard replaced by one of another size: every read of it fails.
        with open(shard, "ab") as f:
            f.write(b"\0" * 512)
        with shardfs.Index(idx_path, verify="off") as idx:
            with self.assertRaises(OSError) as cm:
                idx.read(rel)
            self.assertEqual(cm.exception.errno, errno.EIO)

    # -- Threads and fork ----------------------------------------------------

    def test_threads(self):
        names = sorted(self.want)
        bad = []
        with self.open("tar.gz") as idx:
            def reader(seed):
                rnd = random.Random(seed)
                for _ in range(300):
                    rel = rnd.choice(names)
                    if idx.read(rel) != self.want[rel]:
                        bad.append(rel)
            threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
                self.assertFalse(t.is_alive(), "a reader hangs")
        self.assertEqual(bad, [])

    def wait_child(self, pid, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.02)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        self.fail(f"child {pid} hangs after fork")

    def test_fork_while_threads_read(self):
        names = sorted(self.want)
        for kind in ("tar", "zip"):
            with self.subTest(kind=kind), self.open(kind) as idx:
                idx.read(names[0])
                stop = threading.Event()

                def reader():
                    rnd = random.Random(1)
                    while not stop.is_set():
                        idx.read(rnd.choice(names))
                threads = [threading.Thread(target=reader) for _ in range(3)]
                for t in threads:
                    t.start()
                try:
                    for i in range(8):
                        pid = os.fork()
                        if pid == 0:
                            ok = all(idx.read(n) == self.want[n] for n in names)
                            ok = ok and idx.files() == sorted(names, key=lambda p: p.split("/"))
                            if i % 2:
                                # exit() as a Python script's end makes it (after
                                # finalising): RocksDB's static timer, copied from
                                # this parent, would block it for ever.
                                ctypes.CDLL(None).exit(5 if ok else 3)
                            os._exit(0 if ok else 3)
                        self.assertEqual(self.wait_child(pid), 5 if i % 2 else 0)
                finally:
                    stop.set()
                    for t in threads:
                        t.join()
                # The parent's index still works.
                self.assertEqual(idx.read(names[-1]), self.want[names[-1]])

    def test_fork_with_chunk_cache(self):
        """With cache_dir, reads go through the chunk fetcher, whose threads
        the child does not have: the child must open its own."""
        names = sorted(self.want)
        cache = self.scratch("chunks")
        with self.open("tar", cache_dir=cache) as idx:
            self.assertEqual(idx.read(names[0]), self.want[names[0]])
            for _ in range(2):
                pid = os.fork()
                if pid == 0:
                    ok = all(idx.read(n) == self.want[n] for n in names)
                    os._exit(0 if ok else 3)
                self.assertEqual(self.wait_child(pid, timeout=30), 0)
            self.assertEqual(idx.read(names[-1]), self.want[names[-1]])

    def test_forked_children_do_not_repeat_the_storage_line(self):
        """On network storage (storage="network") the opening process says
        once how shards are read (a record of the "shardfs" logger, here
        printed by logging's handler); DataLoader workers that open the index
        again after fork() do not say it again."""
        script = r"""
import logging, os, sys
import shardfs
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
idx = shardfs.Index(sys.argv[1], storage="network")
names = idx.files()
idx.read(names[0])
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        idx.read(names[-1])
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
idx.close()
"""
        env = dict(os.environ, XDG_CACHE_HOME=self.scratch("xdg-cache"))  # Not the user's.
        p = subprocess.run([sys.executable, "-c", script, self.indexes["tar"]], env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [l for l in p.stderr.splitlines() if "network storage" in l]
        self.assertEqual(len(lines), 1, p.stderr)

    def test_dataloader_two_workers(self):
        import torch.utils.data
        import shardfs.torch as st
        idx = self.open("zip")
        idx.read("empty")  # Opened and used before the workers fork.
        names = sorted(self.want)

        class Files(torch.utils.data.Dataset):
            def __len__(self):
                return len(names)

            def __getitem__(self, i):
                return names[i], idx.read(names[i]), os.getpid()

        loader = torch.utils.data.DataLoader(
            Files(), batch_size=4, num_workers=2, multiprocessing_context="fork",
            sampler=st.EpochSampler(len(names), seed=9), collate_fn=lambda b: b, timeout=120)
        got, pids = {}, set()
        for batch in loader:
            for name, data, pid in batch:
                got[name] = data
                pids.add(pid)
        self.assertEqual(got, self.want)
        self.assertEqual(len(pids), 2)
        self.assertNotIn(os.getpid(), pids)
        idx.close()

    # -- shardfs.torch --------------------------------------------------------

    def test_imagefolder_equals_torchvision(self):
        import torch
        import torchvision
        import torchvision.transforms as T
        import shardfs.torch as st
        root = os.path.join(self.src, "images")
        want = torchvision.datasets.ImageFolder(root, transform=T.ToTensor())
        for kind in ("tar", "zip", "nested"):
            with self.subTest(kind=kind):
                got = st.ImageFolder(self.open(kind), transform=T.ToTensor(), root="images")
                self.assertEqual(got.classes, want.classes)
                self.assertEqual(got.class_to_idx, want.class_to_idx)
                self.assertEqual([(os.path.join(self.src, p), t) for p, t in got.samples],
                                 want.samples)
                self.assertEqual(got.targets, want.targets)
                self.assertEqual(len(got), len(want))
                for i in range(len(want)):
                    (a, ta), (b, tb) = got[i], want[i]
                    self.assertEqual(ta, tb)
                    self.assertTrue(torch.equal(a, b), got.samples[i][0])
        # Through a DataLoader with 2 forked workers.
        got = st.ImageFolder(self.indexes["tar"], transform=T.ToTensor(), root="images")
        loader = torch.utils.data.DataLoader(got, batch_size=None, num_workers=2,
                                             multiprocessing_context="fork", timeout=120)
        for i, (a, t) in enumerate(loader):
            self.assertTrue(torch.equal(a, want[i][0]))
            self.assertEqual(t, want[i][1])
        # In batches: DataLoader asks __getitems__ for each (its files
        # prefetched first), which gives what item by item gives.
        order = list(range(len(want)))
        random.Random(8).shuffle(order)
        batch = got.__getitems__(order)
        self.assertEqual([t for _, t in batch], [want[i][1] for i in order])
        for (a, _), i in zip(batch, order):
            self.assertTrue(torch.equal(a, want[i][0]), got.samples[i][0])
        loader = torch.utils.data.DataLoader(got, batch_size=3, num_workers=2,
                                             multiprocessing_context="fork", timeout=120,
                                             collate_fn=lambda b: b)
        seen = 0
        for items in loader:
            for a, t in items:
                self.assertTrue(torch.equal(a, want[seen][0]))
                self.assertEqual(t, want[seen][1])
                seen += 1
        self.assertEqual(seen, len(want))

    def test_sample_dataset_equals_webdataset_grouping(self):
        import shardfs.torch as st
        rnd = random.Random(21)
        src = self.scratch("wds-src")
        d = self.scratch("wds")
        for s in range(3):
            for i in range(25):
                key = f"shard{s}/{s * 100 + i:06d}"
                os.makedirs(os.path.join(src, f"shard{s}"), exist_ok=True)
                tl.write_file(os.path.join(src, key + ".jpg"), rnd.randbytes(rnd.randrange(50, 900)))
                tl.write_file(os.path.join(src, key + ".json"), json.dumps({"i": i}).encode())
                tl.write_file(os.path.join(src, key + ".seg.PNG"), rnd.randbytes(40))
                if i % 5 == 0:
                    tl.write_file(os.path.join(src, key + ".cls"), b"%d" % (i % 3))
            tl.write_file(os.path.join(src, f"shard{s}", "README"), b"no dot: left out")
        shards = [tl.tar_create(os.path.join(d, f"{s:03d}.tar"), src, [f"shard{s}"])
                  for s in range(3)]
        idx = os.path.join(d, "idx")
        tl.build_index(shards, idx)
        want = webdataset_samples(shards)
        got = st.SampleDataset(idx)
        self.assertEqual(len(got), len(want))
        self.assertEqual([got[i] for i in range(len(got))], want)
        for i in random.Random(4).sample(range(len(want)), 20):  # Random access.
            self.assertEqual(got[i], want[i])
        some = random.Random(5).sample(range(len(want)), 30)  # A DataLoader's batch.
        self.assertEqual(got.__getitems__(some), [want[i] for i in some])
        # Rank splitting: the ranks' samples are disjoint, as many on each
        # (one padded with a repeat of its own), and cover the view.
        seen = []
        for rank in range(2):
            part = st.SampleDataset(idx, rank=rank, world=2)
            self.assertEqual(len(part), -(-len(want) // 2))
            seen.append({part[i]["__key__"] for i in range(len(part))})
        self.assertEqual(seen[0] & seen[1], set())
        self.assertEqual(sorted(seen[0] | seen[1]), sorted(s["__key__"] for s in want))
        # A per-epoch permutation, seeded, the same in every process.
        a, b = st.EpochSampler(got, seed=1), st.EpochSampler(got, seed=1)
        self.assertEqual(list(a), list(b))
        self.assertEqual(sorted(a), list(range(len(got))))
        a.set_epoch(1)
        self.assertNotEqual(list(a), list(b))

    def test_import_needs_no_torch(self):
        p = subprocess.run(
            [sys.executable, "-c",
             "import sys, shardfs; assert 'torch' not in sys.modules, 'torch imported'"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(p.returncode, 0, p.stderr.decode())

    # -- Unprivileged, without /dev/fuse --------------------------------------

    def test_nobody_without_dev_fuse(self):
        """As user nobody, in a mount namespace whose /dev/fuse is /dev/null,
        every file of the tar and zip indexes reads as in the loose tree."""
        d = self.scratch("nobody")
        os.chmod(d, 0o755)
        os.chmod(self.tmp, 0o755)
        pkg = os.path.join(d, "pkg")
        shutil.copytree(os.path.dirname(shardfs.__file__), os.path.join(pkg, "shardfs"),
                        ignore=shutil.ignore_patterns("*.p", "__pycache__"))
        for kind in ("tar", "zip"):
            shutil.copytree(os.path.dirname(self.indexes[kind]), os.path.join(d, kind),
                            symlinks=True)
        hashes = os.path.join(d, "want.json")
        with open(hashes, "w") as f:
            json.dump({k: v.hex() for k, v in self.want.items()}, f)
        script = os.path.join(d, "read_all.py")
        tl.write_file(script, b"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import shardfs
assert os.getuid() != 0 and os.geteuid() != 0, "still root"
fuse, null = os.stat("/dev/fuse"), os.stat("/dev/null")
assert fuse.st_rdev == null.st_rdev, "/dev/fuse is not hidden"
want = json.load(open(sys.argv[2]))
n = 0
for idx_path in sys.argv[3:]:
    with shardfs.Index(idx_path) as idx:
        assert sorted(idx.files()) == sorted(want), idx_path
        for rel, hexdata in want.items():
            assert idx.read(rel).hex() == hexdata, rel
            n += 1
print("read", n, "files as uid", os.getuid())
""")
        for root, dirs, files in os.walk(d):
            for x in dirs:
                os.chmod(os.path.join(root, x), 0o755)
            for x in files:
                os.chmod(os.path.join(root, x), 0o644)
        inner = ("mount --bind /dev/null /dev/fuse && exec setpriv --reuid=nobody "
                 "--regid=nogroup --clear-groups -- \"$@\"")
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner, "sh",
                sys.executable, "-I", script, pkg, hashes,
                os.path.join(d, "tar", "idx"), os.path.join(d, "zip", "idx")]
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        self.assertIn(b"read %d files as uid 65534" % (2 * len(self.want)), p.stdout)
        # The host's /dev/fuse is untouched.
        self.assertNotEqual(os.stat("/dev/fuse").st_rdev, os.stat("/dev/null").st_rdev)


if __name__ == "__main__":
    unittest.main()
