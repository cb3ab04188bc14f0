#!/usr/bin/env python3
"""The Python package's write side: shardfs.Index.build and shardfs.pack,
against the command they run in-process.

- Index.build over tar shards (a list, their directory, a glob) gives the
  index `shardfs index build` gives over the same shards: the same files()
  and, for every file, the same read(), equal to the source tree's bytes.
- shardfs.pack over a small loose tree returns the index opened, every file
  of the tree reading back byte-identical; its options map to the command's
  (shuffle=SEED, max_files and part=(K, N) give the very shard bytes of
  `shardfs pack --shuffle SEED --max-files N --part K/N`).
- Errors: a missing source or shard raises shardfs.NotFoundError naming it,
  and leaves no index; an unknown option raises TypeError listing the known
  ones, a bad value a one-line TypeError/ValueError, before anything is
  written; an output folder the command would refuse (an index built over a
  user's shards, a user's file) is refused, with or without force, and left
  byte for byte as it was; force=True over an earlier pack replaces that
  pack's own files only, and a foreign file inside the folder refuses it
  (the old pack and the file stay), one beside it survives.
- The summary reaches the "shardfs" logger, nothing reaches stderr; and a
  package without the extension module shardfs._build imports and reads,
  and raises a clear ImportError for pack.

Runs under the interpreter the package was built for (meson sets PYTHONPATH
to <build>/src/python).
"""

import errno
import logging
import os
import random
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=<build>/src/python)


def make_tree(root, seed=11):
    """A loose tree of samples in a few folders, an empty file, a symbolic
    link: {relative path: bytes} of its regular files."""
    rnd = random.Random(seed)
    files = {}
    for d in ("train/cat", "train/dog", "val"):
        for i in range(6):
            for ext in ("jpg", "cls"):
                n = rnd.randrange(1, 30000) if ext == "jpg" else 2
                files[f"{d}/{i:04d}.{ext}"] = rnd.randbytes(n)
    files["val/empty.txt"] = b""
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tl.write_file(path, data)
    os.symlink("cat/0000.jpg", os.path.join(root, "train", "link.jpg"))
    return files


def snapshot(top):
    """{relative path: (kind, bytes or link target, mtime_ns)} of everything
    under `top`, to tell that nothing changed."""
    out = {}
    for d, dirs, names in os.walk(top):
        for n in sorted(dirs + names):
            p = os.path.join(d, n)
            st = os.lstat(p)
            if os.path.islink(p):
                what = ("link", os.readlink(p))
            elif os.path.isdir(p):
                what = ("dir", None)
            else:
                what = ("file", tl.read_file(p))
            out[os.path.relpath(p, top)] = what + (st.st_mtime_ns,)
    return out


class PythonBuildTest(tl.ScratchTestCase):
    PREFIX = "shardfs-python-build-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        cls.files = make_tree(cls.src)
        cls.shard_dir = os.path.join(cls.tmp, "shards")
        os.makedirs(cls.shard_dir)
        cls.shards = tl.tar_into_shards(os.path.join(cls.src, "train"), cls.shard_dir, 3)

    def assert_same_index(self, want_path, got):
        with shardfs.Index(want_path) as want:
            paths = want.files()
            self.assertGreater(len(paths), 10)
            self.assertEqual(got.files(), paths)
            for p in paths:
                if stat.S_ISLNK(want.lstat(p).st_mode):  # maybe into another part
                    self.assertEqual(got.readlink(p), want.readlink(p), p)
                else:
                    self.assertEqual(got.read(p), want.read(p), p)

    def test_index_build_gives_the_commands_index(self):
        d = self.scratch("build")
        cli = os.path.join(d, "cli.idx")
        tl.build_index(self.shards, cli)
        for name, shards in (("list", self.shards), ("dir", self.shard_dir),
                             ("glob", os.path.join(self.shard_dir, "shard-*.tar"))):
            with self.subTest(name):
                out = os.path.join(d, name + ".idx")
                with shardfs.Index.build(out, shards, jobs=2, memory="64M") as ix:
                    self.assertIsInstance(ix, shardfs.Index)
                    self.assertEqual(ix.path, out)
                    self.assert_same_index(cli, ix)
                    for rel, data in self.files.items():
                        if rel.startswith("train/"):
                            self.assertEqual(ix.read(rel[len("train/"):]), data, rel)

    def test_index_build_options_and_force(self):
        d = self.scratch("build-opts")
        out = os.path.join(d, "idx")
        shardfs.Index.build(out, self.shards[:1], checksum=False).close()
        with self.assertRaises(shardfs.Error) as cm:
            shardfs.Index.build(out, self.shards)
        self.assertEqual(cm.exception.errno, errno.EEXIST)
        self.assertIn(out, str(cm.exception))
        self.assertEqual(cm.exception.filename, out)
        # force replaces an index; part=(1, 3) takes the second shard only.
        cli = os.path.join(d, "cli-part")
        tl.build_index(self.shards, cli, "--part", "1/3")
        with shardfs.Index.build(out, self.shards, force=True, part=(1, 3)) as ix:
            self.assert_same_index(cli, ix)
        with shardfs.Index.build(out, self.shards, force=True, part="1/3") as ix:
            self.assert_same_index(cli, ix)

    def test_pack_reads_back_byte_identical(self):
        out = os.path.join(self.scratch("pack"), "out")
        with shardfs.pack(self.src, out) as ix:
            self.assertEqual(ix.path, os.path.join(out, "index"))
            want = sorted(list(self.files) + ["train/link.jpg"])
            self.assertEqual(sorted(ix.files()), want)
            for rel, data in self.files.items():
                self.assertEqual(ix.read(rel), data, rel)
            self.assertEqual(ix.readlink("train/link.jpg"), "cat/0000.jpg")
        self.assertEqual(tl.shards_of(out), ["train-000000.tar"])

    def test_pack_options_give_the_commands_shards(self):
        for extra, opts in ((["--shuffle", "7", "--max-files", "4"], dict(shuffle=7, max_files=4)),
                            (["--shuffle", "3", "--shard-size", "64K", "--part", "1/2"],
                             dict(shuffle=3, shard_size="64K", part=(1, 2))),
                            (["--compress", "zstd", "--name", "s-%03d.tar", "--exclude", "val"],
                             dict(compress="zstd", name="s-%03d.tar", exclude=["val"]))):
            with self.subTest(extra):
                d = self.scratch("pack-opts")
                cli, py = os.path.join(d, "cli"), os.path.join(d, "py")
                tl.pack(self.src, cli, *extra)
                with shardfs.pack(self.src, py, **opts) as ix:
                    self.assertTrue(ix.path.startswith(py))
                    part = "part-1" if "part" in opts else ""
                    cli_dir, py_dir = os.path.join(cli, part), os.path.join(py, part)
                    self.assertEqual(ix.path, os.path.join(py_dir, "index"))
                    names = sorted(n for n in os.listdir(cli_dir) if n != "index")
                    self.assertGreater(len(names), 1 if "compress" not in opts else 0)
                    if "compress" in opts:
                        self.assertEqual(names, ["s-000.tar.zst"])
                        self.assertFalse(ix.exists("val"))
                    self.assertEqual(sorted(n for n in os.listdir(py_dir) if n != "index"), names)
                    for n in names:
                        self.assertEqual(tl.read_file(os.path.join(py_dir, n)),
                                         tl.read_file(os.path.join(cli_dir, n)), n)
                    self.assert_same_index(os.path.join(cli_dir, "index"), ix)
                # The options did something: without the seed, other shards.
                plain = dict((k, v) for k, v in opts.items() if k != "shuffle")
                if "shuffle" in opts:
                    other = os.path.join(d, "plain")
                    shardfs.pack(self.src, other, **plain).close()
                    other_dir = os.path.join(other, part)
                    self.assertNotEqual(
                        [tl.read_file(os.path.join(other_dir, n)) for n in names
                         if os.path.exists(os.path.join(other_dir, n))],
                        [tl.read_file(os.path.join(py_dir, n)) for n in names])

    def test_missing_sources_are_named_and_leave_no_index(self):
        d = self.scratch("missing")
        missing = os.path.join(d, "no-such-tree")
        out = os.path.join(d, "out")
        with self.assertRaises(shardfs.NotFoundError) as cm:
            shardfs.pack(missing, out)
        self.assertIsInstance(cm.exception, FileNotFoundError)
        self.assertEqual(cm.exception.filename, missing)
        self.assertIn(missing, str(cm.exception))
        self.assertFalse(os.path.exists(os.path.join(out, "index")))
        shard = os.path.join(d, "no-such.tar")
        with self.assertRaises(shardfs.NotFoundError) as cm:
            shardfs.Index.build(out, [self.shards[0], shard])
        self.assertEqual(cm.exception.filename, shard)
        self.assertIn(shard, str(cm.exception))
        self.assertFalse(os.path.exists(out))

    def test_a_bad_shard_is_named(self):
        d = self.scratch("bad-shard")
        bad = os.path.join(d, "bad.tar")
        tl.write_file(bad, tl.read_file(self.shards[0])[:700])  # cut inside a member
        out = os.path.join(d, "idx")
        with self.assertRaises(shardfs.Error) as cm:
            shardfs.Index.build(out, [bad])
        self.assertIn(bad, str(cm.exception))
        self.assertEqual(cm.exception.filename, bad)
        self.assertFalse(os.path.exists(out))

    def test_unknown_and_bad_options(self):
        d = self.scratch("options")
        out = os.path.join(d, "out")
        with self.assertRaises(TypeError) as cm:
            shardfs.pack(self.src, out, shard_sise="1G")
        msg = str(cm.exception)
        self.assertIn("'shard_sise'", msg)
        for known in ("shard_size", "shuffle", "force", "compress", "part", "jobs"):
            self.assertIn(known, msg)
        with self.assertRaises(TypeError) as cm:
            shardfs.Index.build(out, self.shards, jobz=2)
        for known in ("'jobz'", "jobs", "memory", "recursive", "strip_recursive_tar_extension"):
            self.assertIn(known, str(cm.exception))
        bad_pack = [(TypeError, dict(jobs="2")), (ValueError, dict(jobs=0)),
                    (ValueError, dict(shard_size=0)), (ValueError, dict(shard_size="12X")),
                    (TypeError, dict(shard_size=1.5)), (ValueError, dict(shuffle=-1)),
                    (TypeError, dict(shuffle=True)), (ValueError, dict(compress="lz4")),
                    (ValueError, dict(compress_level=3)), (ValueError, dict(part=(2, 2))),
                    (ValueError, dict(part="2/x")), (TypeError, dict(force="yes")),
                    (ValueError, dict(name="shard.tar")), (TypeError, dict(exclude=[1]))]
        for cls, opts in bad_pack:
            with self.subTest(opts), self.assertRaises(cls) as cm:
                shardfs.pack(self.src, out, **opts)
            self.assertEqual(len(str(cm.exception).splitlines()), 1, cm.exception)
            self.assertIn(next(iter(opts)), str(cm.exception))
        bad_build = [(ValueError, dict(recursive_depth=2)), (ValueError, dict(memory="lots")),
                     (ValueError, dict(strip_recursive_tar_extension=True)),
                     (TypeError, dict(checksum=None)), (ValueError, dict(max_zip_ratio=0))]
        for cls, opts in bad_build:
            with self.subTest(opts), self.assertRaises(cls) as cm:
                shardfs.Index.build(out, self.shards, **opts)
            self.assertEqual(len(str(cm.exception).splitlines()), 1, cm.exception)
            self.assertIn(next(iter(opts)), str(cm.exception))
        with self.assertRaises(ValueError):
            shardfs.Index.build(out, [])
        with self.assertRaises(TypeError):
            shardfs.Index.build(out, 5)
        self.assertEqual(os.listdir(d), [])

    def test_a_folder_no_pack_wrote_is_refused_and_left_alone(self):
        d = self.scratch("foreign")
        # A user's shards and the index `index build` made over them.
        shutil.copy(self.shards[0], os.path.join(d, "train-000000.tar"))
        tl.build_index([os.path.join(d, "train-000000.tar")], os.path.join(d, "index"))
        tl.write_file(os.path.join(d, "notes.txt"), b"mine")
        before = snapshot(d)
        for force in (False, True):
            with self.subTest(force=force), self.assertRaises(shardfs.Error) as cm:
                shardfs.pack(self.src, d, force=force)
            self.assertIn(d, str(cm.exception))
            self.assertEqual(snapshot(d), before)
        # The command says the same.
        p = tl.pack(self.src, d, "--force", check=1)
        self.assertIn(cm.exception.strerror.split(";")[0], p.stderr.decode())
        # An index over a folder of the user's files, forced or not.
        for force in (False, True):
            with self.subTest(build_force=force), self.assertRaises(shardfs.Error):
                shardfs.Index.build(d, self.shards, force=force)
            self.assertEqual(snapshot(d), before)

    def test_force_replaces_only_the_earlier_packs_files(self):
        parent = self.scratch("force")
        out = os.path.join(parent, "out")
        shardfs.pack(self.src, out, max_files=2).close()
        old = tl.shards_of(out)
        self.assertGreater(len(old), 4)
        beside = os.path.join(parent, "beside.txt")
        tl.write_file(beside, b"not the pack's")
        with self.assertRaises(shardfs.Error) as cm:
            shardfs.pack(self.src, out)  # no force: refused
        self.assertEqual(cm.exception.errno, errno.EEXIST)
        # A foreign file inside the folder: refused, everything left.
        foreign = os.path.join(out, "notes.txt")
        tl.write_file(foreign, b"mine")
        before = snapshot(out)
        with self.assertRaises(shardfs.Error) as cm:
            shardfs.pack(self.src, out, force=True)
        self.assertIn("notes.txt", str(cm.exception))
        self.assertEqual(snapshot(out), before)
        os.unlink(foreign)
        # Without it: the earlier pack is replaced whole, the file beside it stays.
        with shardfs.pack(os.path.join(self.src, "val"), out, force=True) as ix:
            self.assertEqual(sorted(ix.files()),
                             sorted(r[len("val/"):] for r in self.files if r.startswith("val/")))
        self.assertEqual(tl.shards_of(out), ["train-000000.tar"])
        self.assertEqual(sorted(os.listdir(out)), ["index", "train-000000.tar"])
        self.assertEqual(tl.read_file(beside), b"not the pack's")
        self.assertEqual(sorted(os.listdir(parent)), ["beside.txt", "out"])

    def test_messages_go_to_the_logger_not_stderr(self):
        d = self.scratch("log")
        records = tl.LogRecords()
        log = logging.getLogger("shardfs")
        log.addHandler(records)
        self.addCleanup(log.removeHandler, records)
        log.setLevel(logging.INFO)
        self.addCleanup(log.setLevel, logging.NOTSET)
        shardfs.pack(self.src, os.path.join(d, "out")).close()
        shardfs.Index.build(os.path.join(d, "idx"), self.shards).close()
        said = [r.getMessage() for r in records.records if r.levelno == logging.INFO]
        self.assertTrue(any(m.startswith(f"packed {len(self.files)} files") for m in said), said)
        self.assertTrue(any(m.startswith("indexed 3 shards") for m in said), said)
        # A process whose "shardfs" logger writes to stdout: its stderr stays
        # empty (no progress line, no message of the core written there).
        child = ("import logging, shardfs, sys\n"
                 "h = logging.StreamHandler(sys.stdout)\n"
                 "h.setFormatter(logging.Formatter('LOGGED %(levelname)s %(message)s'))\n"
                 "logging.getLogger('shardfs').addHandler(h)\n"
                 "logging.getLogger('shardfs').setLevel(logging.INFO)\n"
                 "shardfs.pack(sys.argv[1], sys.argv[2], jobs=2).close()\n"
                 "shardfs.Index.build(sys.argv[3], [sys.argv[2] + '/train-000000.tar']).close()\n"
                 "try:\n"
                 "    shardfs.pack(sys.argv[1], sys.argv[2])\n"
                 "except shardfs.Error as e:\n"
                 "    print('RAISED', e.errno)\n")
        p = subprocess.run([sys.executable, "-c", child, self.src, os.path.join(d, "child"),
                            os.path.join(d, "child-idx")], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[-1], f"RAISED {errno.EEXIST}")
        self.assertTrue(any(x.startswith("LOGGED INFO packed") for x in lines), p.stdout)
        self.assertTrue(any(x.startswith("LOGGED INFO indexed 1 shards") for x in lines), p.stdout)
        self.assertEqual(p.stderr, "")

    def test_without_the_write_extension_reading_works_and_pack_says_why(self):
        d = self.scratch("no-build")
        pkg = os.path.join(d, "shardfs")
        here = os.path.dirname(shardfs.__file__)
        shutil.copytree(here, pkg, symlinks=False,
                        ignore=shutil.ignore_patterns("_build*", "__pycache__", "*.p"))
        self.assertFalse(any(n.startswith("_build") for n in os.listdir(pkg)))
        idx = os.path.join(d, "idx")
        tl.build_index(self.shards, idx)
        child = ("import sys, shardfs\n"
                 "with shardfs.Index(sys.argv[1]) as ix:\n"
                 "    print(len(ix.files()))\n"
                 "print('shardfs._build' in sys.modules)\n"
                 "try:\n"
                 "    shardfs.pack(sys.argv[1], sys.argv[1] + '.out')\n"
                 "except ImportError as e:\n"
                 "    print('IMPORTERROR', e)\n")
        env = dict(os.environ, PYTHONPATH=d)
        p = subprocess.run([sys.executable, "-c", child, idx], capture_output=True, text=True,
                           env=env, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[:2], [str(len(shardfs.Index(idx).files())), "False"])
        self.assertTrue(lines[2].startswith("IMPORTERROR"), p.stdout)
        self.assertIn("shardfs._build", lines[2])
        self.assertFalse(os.path.exists(idx + ".out"))
        # In the full package, reading does not load it either.
        p = subprocess.run([sys.executable, "-c", child.split("try:")[0], idx],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.stdout.splitlines()[1], "False", p.stderr)


if __name__ == "__main__":
    tl.main()
