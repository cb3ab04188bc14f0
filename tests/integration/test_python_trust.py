#!/usr/bin/env python3
"""What the Python package and the mount trust, tried as a careful and as a
hostile user would.

- `readinto` takes only a writable, C-contiguous buffer (io.FileIO's rule):
  a reversed or strided view, or a read-only one, raises TypeError and
  nothing is written outside the buffer.
- A shard rewritten in place after a file's first read, with its mtime set
  back, serves EIO for that file (never the new bytes): in the package
  (verify="auto") and through `mount -o verify=first`. Its other files,
  verified again, serve. Written without setting the mtime back, the whole
  shard gives EIO, naming the change.
- Every path argument with an embedded NUL raises ValueError("embedded null
  byte"), as open() does; a symbolic link loop raises ELOOP; `files()` and
  `walk()` never return a path with "..", whatever prefix they were given.
- One corrupt member of a shard that is otherwise as indexed: its reads fail
  with EIO naming that member and its shard, and the other members of the
  same shard are served (package and mount).
- fork() while other threads open and close indexes never leaves a child
  hanging, and a forked child reads the index version its parent opened,
  not one `index add` made since.

Runs under the interpreter the package was built for (meson sets PYTHONPATH
to <build>/src/python).
"""
import errno
import os
import random
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=<build>/src/python)


def make_tree(root):
    rnd = random.Random(3)
    files = {}
    for cls in ("cat", "dog"):
        for i in range(6):
            files[f"train/{cls}/{i:03d}.bin"] = rnd.randbytes(rnd.randrange(3000, 40000))
    files["val/cat/000.bin"] = rnd.randbytes(5000)
    files["big.bin"] = rnd.randbytes(300_000)
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tl.write_file(path, data)
    os.symlink("loop_b", os.path.join(root, "loop_a"))
    os.symlink("loop_a", os.path.join(root, "loop_b"))
    return files


def member_offset(shard, data):
    """Where `data` lies in shard file `shard` (it must be there once)."""
    blob = tl.read_file(shard)
    at = blob.find(data)
    assert at > 0 and blob.find(data, at + 1) < 0, "member not stored verbatim, once"
    return at


def poke(shard, at, data, keep_mtime):
    """Writes `data` at byte `at` of `shard` in place; with keep_mtime sets
    its mtime (and atime) back to what they were, as a hostile writer
    would."""
    st = os.stat(shard)
    with open(shard, "r+b") as f:
        f.seek(at)
        f.write(data)
    if keep_mtime:
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(shard).st_mtime_ns == st.st_mtime_ns


def drop_file_pages(path):
    """Lets the kernel forget the cached pages of one file of a mount, so
    that the next read asks the daemon again (no cache-wide drop: other
    tests run beside this one)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class TrustTest(tl.ScratchTestCase):
    PREFIX = "shardfs-python-trust-"

    @classmethod
    def fresh(cls, name):
        """A new tree packed into one GNU tar shard and indexed:
        (dir, shard, index, {relpath: bytes})."""
        d = tempfile.mkdtemp(prefix=name + "-", dir=cls.tmp)
        src = os.path.join(d, "src")
        files = make_tree(src)
        shard = tl.tar_create(os.path.join(d, "s.tar"), src, sorted(os.listdir(src)))
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx)
        return d, shard, idx, files

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _, cls.shard, cls.idx, cls.files = cls.fresh("shared")

    def test_readinto_takes_only_contiguous_writable_buffers(self):
        with shardfs.Index(self.idx) as ix:
            want = self.files["big.bin"]
            with ix.open("big.bin", buffering=0) as f:
                for bad in (memoryview(bytearray(65536))[::-1],
                            memoryview(bytearray(65536))[::2], b"x" * 100,
                            memoryview(bytearray(100)).toreadonly()):
                    with self.assertRaises(TypeError, msg=repr(bad)):
                        f.readinto(bad)
                self.assertEqual(f.tell(), 0)
                buf = bytearray(1000)
                self.assertEqual(f.readinto(buf), 1000)
                self.assertEqual(bytes(buf), want[:1000])
                # A contiguous slice of a larger buffer: only it is written.
                outer = bytearray(b"\xee" * 3000)
                self.assertEqual(f.readinto(memoryview(outer)[1000:2000]), 1000)
                self.assertEqual(bytes(outer[1000:2000]), want[1000:2000])
                self.assertEqual(bytes(outer[:1000] + outer[2000:]), b"\xee" * 2000)
            # The buffered reader above it, and a C-contiguous array of
            # wider items (its bytes count).
            import array
            with ix.open("big.bin", buffering=0) as f:
                a = array.array("I", [0] * 256)
                self.assertEqual(f.readinto(a), 1024)
                self.assertEqual(a.tobytes(), want[:1024])
            with ix.open("big.bin") as f:
                self.assertEqual(f.read(), want)

    def test_embedded_nul_loops_and_dotdot(self):
        with self.assertRaisesRegex(ValueError, "embedded null byte"):
            shardfs.Index(self.idx + "\0junk")
        with self.assertRaisesRegex(ValueError, "embedded null byte"):
            shardfs.Index(os.fsencode(self.idx) + b"\0junk")
        with self.assertRaisesRegex(ValueError, "embedded null byte"):
            shardfs.Index(self.idx, cache_dir=self.tmp + "\0x")
        with shardfs.Index(self.idx) as ix:
            for call in (lambda: ix.read("big.bin\0x"), lambda: ix.stat("train\0"),
                         lambda: ix.open("big.bin\0"), lambda: ix.listdir("train\0cat"),
                         lambda: ix.read_many(["big.bin", "big\0.bin"]),
                         lambda: ix.files("train\0"), lambda: ix.readlink("loop_a\0"),
                         lambda: ix.prefetch(["a\0b"])):
                with self.assertRaisesRegex(ValueError, "embedded null byte"):
                    call()
            for name in ("loop_a", "loop_b/x"):
                with self.assertRaises(OSError) as cm:
                    ix.read(name)
                self.assertEqual(cm.exception.errno, errno.ELOOP, name)
            with self.assertRaises(OSError) as cm:
                ix.stat("loop_a")
            self.assertEqual(cm.exception.errno, errno.ELOOP)
            every = sorted(p for p in self.files)
            links = ["loop_a", "loop_b"]
            self.assertEqual(sorted(ix.files("../../")), sorted(every + links))
            self.assertEqual(sorted(ix.files("/../")), sorted(every + links))
            self.assertEqual(ix.files("val/../train/c"), ix.files("train/c"))
            self.assertEqual(ix.files("val/../train/c"),
                             sorted(p for p in every if p.startswith("train/cat/")))
            self.assertEqual(ix.files("train/cat/.."), ix.files("train/"))
            self.assertEqual(ix.files("./train/./dog/"), ix.files("train/dog/"))
            for prefix in ("../", "../../train", "val/../../", "train/..", "./"):
                for p in ix.files(prefix):
                    self.assertNotIn("..", p.split("/"), (prefix, p))
                    self.assertFalse(p.startswith("/") or p.startswith("./"), (prefix, p))
            for top in ("../", "..", "train/../..", "/../train"):
                walked = list(ix.walk(top))
                self.assertTrue(walked, top)
                for dirpath, _, names in walked:
                    self.assertNotIn("..", dirpath.split("/"), (top, dirpath))
                    for n in names:
                        ix.lstat(f"{dirpath}/{n}" if dirpath else n)  # Raises if not there.
            self.assertEqual([t for t, _, _ in ix.walk("/../train")],
                             [t for t, _, _ in ix.walk("train")])
            self.assertEqual(list(ix.walk("..")), list(ix.walk("")))

    def test_in_place_rewrite_with_mtime_set_back_is_eio(self):
        # The package, verify="auto" (first read): a file read once, its
        # bytes rewritten in place, the mtime set back. The shard's ctime
        # moved: it is checked again and the file verified again (EIO,
        # naming it), while the shard's other files, verified again, serve.
        _, shard, idx, files = self.fresh("rewrite-package")
        rel = "train/dog/002.bin"
        at = member_offset(shard, files[rel])
        with shardfs.Index(idx) as ix:
            self.assertEqual(ix.read(rel), files[rel])
            self.assertEqual(ix.read("big.bin", offset=0, size=10), files["big.bin"][:10])
            poke(shard, at + 100, b"EVIL", keep_mtime=True)
            for call in (lambda: ix.read(rel), lambda: ix.read(rel, offset=100, size=4),
                         lambda: ix.open(rel).read(), lambda: ix.read_many([rel])):
                with self.assertRaises(OSError) as cm:
                    call()
                self.assertEqual(cm.exception.errno, errno.EIO)
                self.assertIn(rel, cm.exception.strerror)
                self.assertIn("s.tar", cm.exception.strerror)
            self.assertEqual(ix.read("big.bin"), files["big.bin"])
            # Written without setting the mtime back: the whole shard
            # gives EIO, naming the change.
            poke(shard, at + 100, b"EVIL", keep_mtime=False)
            for other in (rel, "big.bin", "train/cat/000.bin"):
                with self.assertRaises(OSError) as cm:
                    ix.read(other)
                self.assertEqual(cm.exception.errno, errno.EIO)
                self.assertIn("changed since it was checked", str(cm.exception))
        # Put back as it was: a new open serves it again, checked afresh.
        poke(shard, at + 100, files[rel][100:104], keep_mtime=True)
        with shardfs.Index(idx) as ix:
            self.assertEqual(ix.read(rel), files[rel])
        # verify="off" trusts no written shard either.
        with shardfs.Index(idx, verify="off") as ix:
            self.assertEqual(ix.read(rel, offset=0, size=10), files[rel][:10])
            poke(shard, at + 100, b"EVIL", keep_mtime=False)
            with self.assertRaises(OSError) as cm:
                ix.read(rel)
            self.assertEqual(cm.exception.errno, errno.EIO)

    def test_in_place_rewrite_through_the_mount(self):
        d, shard, idx, files = self.fresh("rewrite-mount")
        rel = "train/cat/004.bin"
        at = member_offset(shard, files[rel])
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt, options="verify=first") as m:
            path = os.path.join(mnt, rel)
            other = os.path.join(mnt, "train/dog/001.bin")
            self.assertEqual(tl.read_file(path), files[rel])
            self.assertEqual(tl.read_file(other), files["train/dog/001.bin"])
            poke(shard, at + 200, b"EVIL", keep_mtime=True)
            drop_file_pages(path)
            drop_file_pages(other)
            with self.assertRaises(OSError) as cm:
                tl.read_file(path)
            self.assertEqual(cm.exception.errno, errno.EIO)
            self.assertEqual(tl.read_file(other), files["train/dog/001.bin"])
            self.assertTrue(tl.wait_until(lambda: rel in m.stderr()), m.stderr()[-2000:])
            self.assertIn("ctime moved", m.stderr())
            # Written again, its mtime left: every file of the shard fails.
            poke(shard, at + 200, b"EVIL", keep_mtime=False)
            drop_file_pages(other)
            with self.assertRaises(OSError) as cm:
                tl.read_file(other)
            self.assertEqual(cm.exception.errno, errno.EIO)
            self.assertTrue(tl.wait_until(lambda: "changed since it was checked" in m.stderr()),
                            m.stderr()[-2000:])

    def test_one_corrupt_member_fails_alone_and_is_named(self):
        d, shard, idx, files = self.fresh("one-bad")
        bad, good = "train/cat/003.bin", "train/cat/001.bin"
        at = member_offset(shard, files[bad])
        # Corrupted before any reader opened the shard: the shard's size and
        # fingerprint are as indexed, one member's bytes are not.
        poke(shard, at + 1000, b"\x00\x01\x02\x03", keep_mtime=False)
        with shardfs.Index(idx) as ix:
            for _ in range(2):
                with self.assertRaises(OSError) as cm:
                    ix.read(bad)
                self.assertEqual(cm.exception.errno, errno.EIO)
                self.assertEqual(cm.exception.filename, bad)
                self.assertIn(bad, cm.exception.strerror)
                self.assertIn("s.tar", cm.exception.strerror)
                for rel in sorted(files):
                    if rel != bad:
                        self.assertEqual(ix.read(rel), files[rel], rel)
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt, options="verify=first") as m:
            with self.assertRaises(OSError) as cm:
                tl.read_file(os.path.join(mnt, bad))
            self.assertEqual(cm.exception.errno, errno.EIO)
            self.assertEqual(tl.read_file(os.path.join(mnt, good)), files[good])
            for rel in sorted(files):
                if rel != bad:
                    self.assertEqual(tl.read_file(os.path.join(mnt, rel)), files[rel], rel)
            self.assertTrue(tl.wait_until(lambda: bad in m.stderr()), m.stderr()[-2000:])
            self.assertNotIn(good, m.stderr())

    def test_sample_reads_are_checked_as_reads(self):
        # SampleDataset reads a sample's members, next to each other in the
        # shard, with one stamp check and one read once they are verified
        # (at once with verify="off"): a shard written in place still gives
        # EIO, never other bytes.
        import shardfs.torch as st
        d = tempfile.mkdtemp(prefix="samples-", dir=self.tmp)
        src = os.path.join(d, "src")
        os.makedirs(os.path.join(src, "s"))
        rnd = random.Random(5)
        files = {}
        for i in range(4):
            for ext, n in (("cls", 2), ("jpg", 5000 + 700 * i), ("json", 40)):
                rel = f"s/{i:03d}.{ext}"
                files[rel] = rnd.randbytes(n)
                with open(os.path.join(src, rel), "wb") as f:
                    f.write(files[rel])
        shard = tl.tar_create(os.path.join(d, "s.tar"), src, ["s"])
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx)
        rel = "s/002.jpg"
        at = member_offset(shard, files[rel])
        for verify, keep_mtime in (("auto", True), ("auto", False), ("off", False)):
            with shardfs.Index(idx, verify=verify) as ix:
                ds = st.SampleDataset(ix)
                self.assertEqual(len(ds), 4)
                for _ in range(2):  # The first pass verifies, the second reads samples whole.
                    for i in range(4):
                        item = ds[i]
                        for ext in ("cls", "jpg", "json"):
                            self.assertEqual(item[ext], files[f"s/{i:03d}.{ext}"], (i, ext))
                poke(shard, at + 100, b"EVIL", keep_mtime=keep_mtime)
                for i in (2, 1, 2):
                    with self.assertRaises(OSError) as cm:
                        ds[i]
                    self.assertEqual(cm.exception.errno, errno.EIO)
                    self.assertIn("s.tar", cm.exception.strerror)
            # Put back, with an mtime of long ago: the next write moves it
            # however soon it comes.
            poke(shard, at + 100, files[rel][100:104], keep_mtime=False)
            os.utime(shard, ns=(10**18, 10**18))

    def test_fork_while_other_threads_open_and_close(self):
        # Threads open, read and close indexes without pause while the main
        # thread forks children that open one and read: no child may hang
        # (RocksDB's process-wide scheduler lock copied into it held).
        stop = threading.Event()
        errors = []

        def churn():
            try:
                while not stop.is_set():
                    with shardfs.Index(self.idx) as ix:
                        ix.read("big.bin", offset=0, size=16)
            except Exception as e:  # noqa: BLE001  (reported below)
                errors.append(e)

        threads = [threading.Thread(target=churn) for _ in range(3)]
        for t in threads:
            t.start()
        hung = []
        try:
            for i in range(30):
                pid = os.fork()
                if pid == 0:
                    try:
                        with shardfs.Index(self.idx) as ix:
                            ok = ix.read("train/cat/000.bin") == self.files["train/cat/000.bin"]
                        os._exit(0 if ok else 3)
                    except BaseException:  # noqa: BLE001
                        os._exit(4)
                deadline = time.monotonic() + 20
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        self.assertEqual(os.waitstatus_to_exitcode(status), 0, f"child {i}")
                        break
                    if time.monotonic() > deadline:
                        hung.append(i)
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                        break
                    time.sleep(0.005)
                if hung:
                    break  # One is enough: the rest would wait as long each.
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(hung, [], "forked children that hung")
        self.assertEqual(errors, [])

    def test_no_thread_of_rocksdb_runs_beside_an_open_index(self):
        # What makes fork() safe against RocksDB itself: an index is opened
        # read-only with no background thread pools and without RocksDB's
        # periodic task scheduler, whose timer thread (unnamed: it carries
        # the process's name) held its mutex for a moment every few seconds,
        # so no thread of RocksDB can hold one of its locks when a DataLoader
        # worker is forked. Opening indexes starts no thread at all.
        def threads():
            return {t: tl.read_file(f"/proc/self/task/{t}/comm").decode().strip()
                    for t in os.listdir("/proc/self/task")}
        before = threads()
        with shardfs.Index(self.idx) as a, shardfs.Index(self.idx) as b:
            a.read("train/cat/000.bin")
            b.files()
            started = {t: n for t, n in threads().items() if t not in before}
        self.assertEqual(started, {})

    def test_a_forked_child_reads_the_version_its_parent_opened(self):
        d, shard, idx, files = self.fresh("fork-version")
        extra_src = os.path.join(d, "extra")
        os.makedirs(os.path.join(extra_src, "added"))
        tl.write_file(os.path.join(extra_src, "added", "new.bin"), b"added later")
        extra = tl.tar_create(os.path.join(d, "extra.tar"), extra_src, ["added"])
        with shardfs.Index(idx) as ix:
            self.assertFalse(ix.exists("added/new.bin"))
            tl.run_shardfs("index", "add", idx, extra, check=0)
            with shardfs.Index(idx) as fresh:
                self.assertTrue(fresh.exists("added/new.bin"))
            pid = os.fork()
            if pid == 0:
                os._exit(0 if not ix.exists("added/new.bin") and ix.read("big.bin") ==
                         files["big.bin"] else 5)
            _, status = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(status), 0,
                             "the child saw the version index add made after its parent opened")


if __name__ == "__main__":
    unittest.main()
