#!/usr/bin/env python3
"""The Python package's errors and messages, as a user meets them.

- A shard whose member's bytes were changed in place (same size) raises
  shardfs.CorruptShardError: an OSError with errno EIO, whose message names
  the index and the file, and whose filename is the file.
- A remote shard the server no longer has (nginx answers 404) raises
  shardfs.FetchError (errno EIO), naming the index and the file.
- Bad arguments raise one line of TypeError or ValueError naming the
  argument; opening a pack folder, a tar shard or a path inside an index
  says what to open instead.
- The core's message about the corrupt member reaches a handler of the
  "shardfs" logger, with the shard, the path and the reason as attributes,
  once; a process reading it writes nothing of shardfs to its stderr, and a
  forked worker reading it again does not repeat its parent's record.

Runs under the interpreter the package was built for (meson sets PYTHONPATH
to <build>/src/python).
"""

import errno
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
import remote_servers as rs  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=<build>/src/python)

# Large enough for its middle to lie outside the shard's fingerprint (its
# first and last 64 KiB).
BAD = "train/b/big.bin"


def make_tree(root):
    rnd = random.Random(5)
    files = {}
    for d in ("a", "b"):
        for i in range(4):
            files[f"train/{d}/{i:03d}.bin"] = rnd.randbytes(rnd.randrange(4000, 20000))
    files[BAD] = rnd.randbytes(300_000)
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tl.write_file(path, data)
    return files


# Reads the corrupt member in a fresh process whose "shardfs" logger has a
# handler that writes to stdout: stderr must stay empty of shardfs lines. A
# forked worker then reads it too: it opens the index again, and its core
# says the message again, but the worker does not log what its parent did.
CHILD = r"""
import logging, os, sys
import shardfs
h = logging.StreamHandler(sys.stdout)
h.setFormatter(logging.Formatter("LOGGED %(levelname)s shard=%(shard)s path=%(path)s %(message)s"))
log = logging.getLogger("shardfs")
log.addHandler(h)
log.propagate = False
with shardfs.Index(sys.argv[1]) as ix:
    for _ in range(3):
        try:
            ix.read(sys.argv[2])
        except shardfs.CorruptShardError as e:
            print("RAISED", type(e).__name__, e.errno)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            ix.read(sys.argv[2])
        except shardfs.CorruptShardError:
            print("WORKER RAISED")
        sys.stdout.flush()
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
"""


class PythonErrorsTest(tl.ScratchTestCase):
    PREFIX = "shardfs-python-errors-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        cls.files = make_tree(cls.src)

    def corrupt_index(self, in_head=False):
        """A fresh shard and its index, then 8 bytes changed in place (the
        size kept): (index, shard). By default in the middle of member BAD,
        where the shard's fingerprint (its first and last 64 KiB) is as
        indexed and the member's checksum catches it; with in_head, in the
        first member, where the shard's fingerprint does."""
        d = self.scratch("corrupt")
        shard = tl.tar_create(os.path.join(d, "s.tar"), self.src, ["train"])
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx)
        blob = tl.read_file(shard)
        member = "train/a/000.bin" if in_head else BAD
        at = blob.find(self.files[member]) + (100 if in_head else 100_000)
        self.assertGreater(at, 1000)
        if not in_head:
            self.assertTrue(64 << 10 < at < len(blob) - (64 << 10) - 8)
        with open(shard, "r+b") as f:
            f.seek(at)
            f.write(bytes(b ^ 0xFF for b in blob[at:at + 8]))
        self.assertEqual(os.path.getsize(shard), len(blob))
        return idx, shard

    def assert_names(self, e, idx, rel):
        self.assertEqual(e.errno, errno.EIO)
        self.assertEqual(e.filename, rel)
        self.assertIn(rel, str(e))
        self.assertIn(idx, str(e))

    def test_a_corrupt_member_raises_corrupt_shard_error_and_logs_once(self):
        idx, _ = self.corrupt_index()
        records = tl.LogRecords()
        log = logging.getLogger("shardfs")
        log.addHandler(records)
        self.addCleanup(log.removeHandler, records)
        with shardfs.Index(idx) as ix:
            for _ in range(2):
                with self.assertRaises(shardfs.CorruptShardError) as cm:
                    ix.read(BAD)
                self.assertIsInstance(cm.exception, shardfs.Error)
                self.assertIsInstance(cm.exception, OSError)
                self.assert_names(cm.exception, idx, BAD)
            with self.assertRaises(shardfs.CorruptShardError):
                ix.open(BAD).read()
            self.assertEqual(ix.read("train/a/001.bin"), self.files["train/a/001.bin"])
        about = [r for r in records.records if getattr(r, "path", None) == BAD]
        self.assertEqual(len(about), 1, [r.getMessage() for r in records.records])
        r = about[0]
        self.assertEqual(r.levelno, logging.ERROR)
        self.assertEqual(r.name, "shardfs")
        self.assertIn("s.tar", r.shard)
        self.assertIn("checksum", r.reason)
        self.assertIn(BAD, r.getMessage())

    def test_a_shard_unlike_its_fingerprint_raises_corrupt_shard_error(self):
        idx, shard = self.corrupt_index(in_head=True)
        records = tl.LogRecords()
        log = logging.getLogger("shardfs")
        log.addHandler(records)
        self.addCleanup(log.removeHandler, records)
        with shardfs.Index(idx) as ix:
            with self.assertRaises(shardfs.CorruptShardError) as cm:
                ix.read(BAD)
            self.assert_names(cm.exception, idx, BAD)
        about = [r for r in records.records if r.levelno == logging.ERROR]
        self.assertEqual(len(about), 1, [r.getMessage() for r in records.records])
        self.assertIn(shard, about[0].shard)
        self.assertIn("fingerprint", about[0].reason)

    def test_nothing_reaches_stderr(self):
        idx, _ = self.corrupt_index()
        p = subprocess.run([sys.executable, "-c", CHILD, idx, BAD], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.count("RAISED CorruptShardError 5"), 3, p.stdout)
        self.assertIn("WORKER RAISED", p.stdout)
        logged = [line for line in p.stdout.splitlines() if line.startswith("LOGGED")]
        self.assertEqual(len(logged), 1, p.stdout)
        self.assertIn("LOGGED ERROR shard=", logged[0])
        self.assertIn(f"path={BAD}", logged[0])
        self.assertNotIn("shardfs", p.stderr)

    def test_a_fetch_that_gives_up_raises_fetch_error(self):
        rs.require_tool("nginx")
        served = self.scratch("served")
        os.mkdir(os.path.join(served, "shards"))
        shards = tl.tar_into_shards(self.src, os.path.join(served, "shards"), 1)
        lst = os.path.join(served, "shards.list")
        tl.write_file(lst, "".join("shards/%s\n" % os.path.basename(s) for s in shards).encode())
        idx = os.path.join(self.scratch("idx"), "remote.idx")
        with rs.Nginx(served) as web:
            tl.run_shardfs("index", "build", "--quiet", "--out", idx, "--from-list", lst,
                           "--url-prefix", web.url, check=0)
            for s in shards:
                os.unlink(s)  # The server answers 404 from now on.
            records = tl.LogRecords()
            log = logging.getLogger("shardfs")
            log.addHandler(records)
            self.addCleanup(log.removeHandler, records)
            log.propagate = False  # Python's last-resort handler stays quiet.
            self.addCleanup(setattr, log, "propagate", True)
            with shardfs.Index(idx, cache_dir=self.scratch("cache")) as ix:
                rel = "train/a/000.bin"
                with self.assertRaises(shardfs.FetchError) as cm:
                    ix.read(rel)
                self.assertNotIsInstance(cm.exception, shardfs.CorruptShardError)
                self.assert_names(cm.exception, idx, rel)
                self.assertIn("404", str(cm.exception))
        failed = [r for r in records.records if r.levelno >= logging.WARNING]
        self.assertTrue(failed, "no record of the failed fetch")
        self.assertTrue(all("shard-000.tar" in r.shard and "404" in r.reason for r in failed),
                        [(r.shard, r.reason) for r in failed])

    def test_bad_arguments_are_one_line(self):
        d = self.scratch("args")
        shard = tl.tar_create(os.path.join(d, "s.tar"), self.src, ["train"])
        idx = os.path.join(d, "idx")
        tl.build_index([shard], idx)
        cases = [
            (dict(rank=-1, world=2), ValueError, "rank"),
            (dict(rank=2, world=2), ValueError, "world"),
            (dict(rank=0), ValueError, "world"),
            (dict(rank="0", world=2), TypeError, "rank"),
            (dict(verify="sometimes"), ValueError, "verify"),
            (dict(storage="cloud"), ValueError, "storage"),
            (dict(cache_size=-5), ValueError, "cache_size"),
            (dict(max_open_shards=0), ValueError, "max_open_shards"),
            (dict(seed=1.5), TypeError, "seed"),
        ]
        for kwargs, cls, word in cases:
            with self.subTest(kwargs=kwargs):
                with self.assertRaises(cls) as cm:
                    shardfs.Index(idx, **kwargs)
                msg = str(cm.exception)
                self.assertNotIn("\n", msg)
                self.assertIn(word, msg)
                self.assertIn("expected", msg)
        with self.assertRaises(TypeError) as cm:
            shardfs.Index(42)  # type: ignore[arg-type]
        self.assertNotIn("\n", str(cm.exception))

    def test_hints_for_what_is_not_an_index(self):
        pack = self.scratch("pack")
        shard = tl.tar_create(os.path.join(pack, "shard-000.tar"), self.src, ["train"])
        idx = os.path.join(pack, "index")
        tl.build_index([shard], idx)
        with self.assertRaises(shardfs.Error) as cm:
            shardfs.Index(pack)
        self.assertIn(f"did you mean {idx}?", str(cm.exception))
        with self.assertRaises(shardfs.Error) as cm:
            shardfs.Index(shard)
        self.assertIn("a shard, not an index", str(cm.exception))
        self.assertIn("shardfs index build", str(cm.exception))
        inside = os.path.join(idx, "train")
        with self.assertRaises(OSError) as cm:
            shardfs.Index(inside)
        self.assertIsInstance(cm.exception, shardfs.Error)
        self.assertIn(f"the index is {idx}", str(cm.exception))
        self.assertIn("'train'", str(cm.exception))
        # An index opens as before, and a missing file is still the built-in class.
        with shardfs.Index(idx) as ix:
            with self.assertRaises(FileNotFoundError) as cm:
                ix.read("train/none")
            self.assertIsInstance(cm.exception, shardfs.NotFoundError)
            self.assertIn(idx, str(cm.exception))
            with self.assertRaises(IsADirectoryError):
                ix.read("train")


if __name__ == "__main__":
    unittest.main(verbosity=2)
