#!/usr/bin/env python3
"""`shardfs pack` and `shardfs verify` on a hostile tree.

The reference is always the source tree (os.lstat/os.readlink/sha256), or
what GNU tar, bsdtar and Python's tarfile extract from the shards; never the
code's own output. Tests run as root here, so "unreadable" is made real by
running pack without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (setpriv).
"""

import collections
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

GIB = 1 << 30
BEFORE_EPOCH_FRACTION = b"before_epoch_fraction"


def pack(src, out, *extra, check=0, prefix=()):
    """Runs `shardfs pack SRC --out OUT --quiet EXTRA...`, optionally behind
    a `prefix` command (setpriv)."""
    tl.require_shardfs()
    argv = list(prefix) + [tl.SHARDFS, "pack", src, "--out", out, "--quiet"] + list(extra)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if check is not None and p.returncode != check:
        raise AssertionError("pack %r exited %d, expected %d\nstderr: %s" % (
            extra, p.returncode, check, p.stderr.decode(errors="replace")[-4000:]))
    return p


def shards_of(out):
    return sorted(n for n in os.listdir(out) if n.endswith(".tar"))


def ls_json(idx, drop=("shard",)):
    """ls -R --json of an index, minus keys that name where the shards are."""
    p = tl.run_shardfs("ls", "-R", "--json", idx, check=0)
    out = []
    for obj in tl.json_lines(p.stdout):
        for k in drop:
            obj.pop(k, None)
        out.append(obj)
    return out


def concat(paths, dest):
    with open(dest, "wb") as o:
        for p in paths:
            with open(p, "rb") as f:
                shutil.copyfileobj(f, o, 1 << 20)
    return dest


def without_dac_caps():
    """A command prefix that drops root's power to read any file, so that a
    chmod 000 file is really unreadable. Empty when not root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        raise RuntimeError("running as root and setpriv (util-linux) is missing: cannot make "
                           "a file unreadable")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]


def link_groups(ref):
    """The partition of file paths into hard link groups (sets of >= 2)."""
    by_ino = collections.defaultdict(set)
    for p, e in ref.items():
        if e.type == "file":
            by_ino[e.ino].add(p)
    return sorted(sorted(g) for g in by_ino.values() if len(g) > 1)


def add_pack_extras(root):
    """Cases beyond the shared hostile tree that only a tar writer meets: a
    long path and a long symlink target that are not UTF-8 (pax
    hdrcharset=BINARY), a long hard link name, a uid over ustar's limit, and
    the ustar prefix/name split at its limits."""
    r = os.fsencode(root)
    x = os.path.join(r, b"pack_extras")
    os.mkdir(x)
    deep = os.path.join(x, b"\xff" * 80, b"\xfe\xfd" * 40)
    os.makedirs(deep)
    tl._write(os.path.join(deep, b"\xe9" * 120 + b".bin"), b"latin-1 long\n")
    os.symlink(b"\xff/" * 70 + b"end", os.path.join(x, b"bytes_long_target"))
    tl._write(os.path.join(x, b"linked"), b"linked twice\n")
    os.link(os.path.join(x, b"linked"), os.path.join(x, b"L" * 150))
    tl._write(os.path.join(x, b"big_uid"), b"uid\n")
    os.chown(os.path.join(x, b"big_uid"), 4_000_000, 3_000_000)
    split = os.path.join(x, b"p" * 143)  # prefix 155 + name 100: fits ustar exactly
    os.mkdir(split)
    tl._write(os.path.join(split, b"q" * 100), b"split\n")
    tl._write(os.path.join(x, b"whole_second"), b"whole\n")
    os.utime(os.path.join(x, b"whole_second"), ns=(1_500_000_000 * 10**9,) * 2)
    # pax "mtime=-86400.250000000": a quarter second before 1969-12-31 00:00.
    tl._write(os.path.join(x, BEFORE_EPOCH_FRACTION), b"1969\n")
    os.utime(os.path.join(x, BEFORE_EPOCH_FRACTION), ns=(-86_400_250_000_000,) * 2)


class PackTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        tl.require_shardfs()
        cls.tmp = tempfile.mkdtemp(prefix="shardfs-pack-")
        cls.src = os.path.join(cls.tmp, "src")
        os.mkdir(cls.src)
        tl.make_hostile_tree(cls.src)
        add_pack_extras(cls.src)
        cls.ref = tl.walk_reference(cls.src)
        cls.out = os.path.join(cls.tmp, "out")
        cls.idx = os.path.join(cls.out, "index")
        cls.packed = pack(cls.src, cls.out, "--shard-size", "256K", "-j", "3")
        cls.shards = [os.path.join(cls.out, n) for n in shards_of(cls.out)]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def scratch(self, name):
        return tempfile.mkdtemp(prefix=name + "-", dir=self.tmp)

    # -- The packed tree is the source tree -----------------------------------

    def test_layout(self):
        self.assertGreater(len(self.shards), 3, "256K shards of a ~6 MiB tree")
        self.assertEqual(sorted(os.listdir(self.out)),
                         ["index"] + ["train-%06d.tar" % i for i in range(len(self.shards))])

    def test_index_lists_exactly_the_source(self):
        entries = {e["path"]: e for e in ls_json(self.idx)}
        want = {p: e for p, e in self.ref.items() if p}
        self.assertEqual(set(entries), set(want))
        for p, e in want.items():
            got = entries[p]
            self.assertEqual(got["type"], e.type, p)
            self.assertEqual(got["mode"], e.mode, p)
            self.assertEqual(got["mtime_ns"], e.mtime_ns, p)
            self.assertEqual((got["uid"], got["gid"]), (e.uid, e.gid), p)
            if e.type != "dir":
                self.assertEqual(got["size"], e.size, p)
            if e.type == "symlink":
                self.assertEqual(got["target"], e.target, p)
            if e.type == "file":
                self.assertEqual(got["nlink"], e.nlink, p)
                self.assertIsNotNone(got["xxh3"], p)
        # Hard links are one inode in the index.
        by_inode = collections.defaultdict(set)
        for p, e in entries.items():
            if e["type"] == "file":
                by_inode[e["inode"]].add(p)
        self.assertEqual(sorted(sorted(g) for g in by_inode.values() if len(g) > 1),
                         link_groups(self.ref))

    def test_offsets_point_at_the_source_bytes(self):
        for e in ls_json(self.idx, drop=()):
            if e["type"] != "file":
                continue
            with open(e["shard"], "rb") as f:
                f.seek(e["offset"])
                data = f.read(e["size"])
            with open(os.path.join(os.fsencode(self.src), e["path"]), "rb") as f:
                self.assertEqual(data, f.read(), e["path"])

    def test_verify_index_identical(self):
        for extra in ((), ("--full",), ("-j", "1")):
            p = tl.run_shardfs("verify", *extra, self.idx, self.src)
            self.assertEqual(p.returncode, 0, "%r: %s %s" % (extra, p.stdout, p.stderr))
            self.assertEqual(p.stdout, b"")
            self.assertIn(b"identical", p.stderr)

    def test_mount_matches_source_and_verify_mounted(self):
        mnt = self.scratch("mnt")
        with tl.Mount(self.idx, mnt):
            got = tl.walk_reference(mnt)
            p = tl.run_shardfs("verify", "--mounted", mnt, self.src)
            p_full = tl.run_shardfs("verify", "--mounted", mnt, self.src, "--full", "-j", "2")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p_full.returncode, 0, p_full.stdout + p_full.stderr)
        self.assertEqual(set(got), set(self.ref))
        for path, want in self.ref.items():
            g = got[path]
            self.assertEqual((g.type, g.mode, g.mtime_ns, g.uid, g.gid, g.target, g.sha256),
                             (want.type, want.mode, want.mtime_ns, want.uid, want.gid,
                              want.target, want.sha256), path)
            if want.type != "dir":
                self.assertEqual((g.size, g.nlink), (want.size, want.nlink), path)
        self.assertEqual(link_groups(got), link_groups(self.ref))

    def check_extracted(self, dest, mtime_tol_ns, label, root_mtime=True, skip_mtime=()):
        got = tl.walk_reference(dest)
        self.assertEqual(set(got), set(self.ref), label)
        for path, want in self.ref.items():
            g = got[path]
            what = "%s: %r" % (label, path)
            self.assertEqual(g.type, want.type, what)
            self.assertEqual((g.mode, g.uid, g.gid, g.target, g.sha256),
                             (want.mode, want.uid, want.gid, want.target, want.sha256), what)
            if want.type != "dir":
                self.assertEqual(g.size, want.size, what)
            if want.type != "symlink" and (path or root_mtime) and path not in skip_mtime:
                self.assertLessEqual(abs(g.mtime_ns - want.mtime_ns), mtime_tol_ns, what)
        self.assertEqual(link_groups(got), link_groups(self.ref), label)

    def test_gnu_tar_extracts_the_source(self):
        # One tar run over all shards (-i reads past each shard's end blocks),
        # so directory times are set once, after their contents.
        dest = self.scratch("gnutar")
        combined = concat(self.shards, os.path.join(self.tmp, "gnu-combined.tar"))
        p = subprocess.run(["tar", "--numeric-owner", "-xpif", combined, "-C", dest],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.unlink(combined)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_extracted(dest, 0, "GNU tar")

    def test_bsdtar_extracts_the_source(self):
        if shutil.which("bsdtar") is None:
            raise RuntimeError("bsdtar (libarchive-tools, scripts/install-deps.sh) is missing")
        dest = self.scratch("bsdtar")
        combined = concat(self.shards, os.path.join(self.tmp, "bsd-combined.tar"))
        p = subprocess.run(["bsdtar", "--numeric-owner", "-xpf", combined, "--ignore-zeros",
                            "-C", dest], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.unlink(combined)
        self.assertEqual(p.returncode, 0, p.stderr)
        # bsdtar does not set the times of "./", the directory it extracts
        # into, and libarchive 3.6 reads "mtime=-86400.25" as -86399.75
        # (fixed upstream in 2025); GNU tar and tarfile read it right.
        bad = os.path.join(b"pack_extras", BEFORE_EPOCH_FRACTION)
        got_ns = os.lstat(os.path.join(os.fsencode(dest), bad)).st_mtime_ns
        self.assertIn(got_ns, (-86_400_250_000_000, -86_399_750_000_000))
        self.check_extracted(dest, 0, "bsdtar", root_mtime=False, skip_mtime=(bad,))

    def test_python_tarfile_extracts_the_source(self):
        dest = self.scratch("tarfile")
        combined = concat(self.shards, os.path.join(self.tmp, "py-combined.tar"))
        kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        with tarfile.open(combined, ignore_zeros=True) as tf:
            tf.extractall(dest, numeric_owner=True, **kw)
        os.unlink(combined)
        # tarfile keeps mtimes as floats: ~0.2 us of rounding at today's times.
        self.check_extracted(dest, 1000, "tarfile")

    def test_pax_headers_only_when_needed(self):
        with tarfile.open(self.shards[0]) as tf:
            first = tf.getmembers()[0]
        self.assertEqual(first.name, ".")
        seen = {}
        for s in self.shards:
            with tarfile.open(s) as tf:
                for m in tf.getmembers():
                    seen[os.fsencode(m.name)] = m
        plain = seen[b"pack_extras/whole_second"]
        self.assertEqual(plain.pax_headers, {}, "a whole-second mtime needs no pax header")
        self.assertEqual(seen[b"pack_extras/big_uid"].pax_headers.get("uid"), "4000000")
        self.assertEqual(seen[b"pack_extras/big_uid"].pax_headers.get("gid"), "3000000")
        split = b"pack_extras/" + b"p" * 143 + b"/" + b"q" * 100
        self.assertNotIn("path", seen[split].pax_headers, "fits ustar's prefix + name")
        for m in seen.values():
            self.assertEqual((m.uname, m.gname), ("", ""))

    def test_index_build_over_the_shards_is_equivalent(self):
        idx2 = os.path.join(self.scratch("rebuilt"), "index")
        tl.build_index(self.shards, idx2)
        self.assertEqual(ls_json(idx2), ls_json(self.idx))

    def test_deterministic(self):
        # Another run, another thread count: the same bytes.
        out2 = os.path.join(self.scratch("again"), "out")
        pack(self.src, out2, "--shard-size", "256K", "-j", "7")
        self.assertEqual(shards_of(out2), shards_of(self.out))
        for n in shards_of(self.out):
            p = subprocess.run(["cmp", os.path.join(self.out, n), os.path.join(out2, n)],
                               stdout=subprocess.PIPE)
            self.assertEqual(p.returncode, 0, "%s differs: %s" % (n, p.stdout))
        self.assertEqual(ls_json(os.path.join(out2, "index")), ls_json(self.idx))

    # -- Samples and shard limits --------------------------------------------

    def check_samples(self, out, max_members=None, max_bytes=None):
        """Each sample (dir + name up to the first dot) lies in one shard, its
        members consecutive; shards keep the limits unless they hold a single
        sample. Read with tarfile, independent of the index."""
        where = {}
        for i, n in enumerate(shards_of(out)):
            path = os.path.join(out, n)
            with tarfile.open(path) as tf:
                members = tf.getmembers()
            keys = []
            for m in members:
                if m.isdir():
                    keys.append(None)
                    continue
                d, b = os.path.split(m.name)
                keys.append((d, b.split(".", 1)[0]))
            samples = [k for k in keys if k is not None]
            for k in set(samples):
                self.assertNotIn(k, where, "sample %r split over shards %s and %d" % (
                    k, where.get(k), i))
                where[k] = i
                pos = [j for j, kk in enumerate(keys) if kk == k]
                self.assertEqual(pos, list(range(pos[0], pos[-1] + 1)),
                                 "sample %r not consecutive in %s" % (k, n))
            one_sample = len(set(samples)) <= 1
            if max_members is not None and not one_sample:
                self.assertLessEqual(len(members), max_members, n)
            if max_bytes is not None and not one_sample:
                self.assertLessEqual(os.path.getsize(path), max_bytes, n)
        return where

    def make_samples(self):
        src = os.path.join(self.scratch("samples"), "src")
        os.makedirs(os.path.join(src, "train"))
        os.makedirs(os.path.join(src, "val", "sub"))
        for i in range(40):
            exts = ["jpg", "json", "cls", "seg.png"][: 1 + i % 4]
            if i % 13 == 0:
                exts += ["a", "b", "c", "d", "e"]  # more files than --max-files
            for e in exts:
                size = 600 + 97 * i if e == "jpg" else 10
                tl._write(os.path.join(src, "train", "s%03d.%s" % (i, e)), os.urandom(size))
        for i in range(5):
            tl._write(os.path.join(src, "val", "v%d.txt" % i), b"v")
            tl._write(os.path.join(src, "val", "sub", "v%d.txt" % i), b"w")
        tl._write(os.path.join(src, "val", "noext"), b"n")
        tl._write(os.path.join(src, "val", "big.bin"), os.urandom(40000))  # over --shard-size
        return src

    def test_samples_never_split_max_files(self):
        src = self.make_samples()
        out = os.path.join(self.scratch("maxfiles"), "out")
        pack(src, out, "--max-files", "4")
        where = self.check_samples(out, max_members=4)
        self.assertGreater(len(set(where.values())), 10)
        self.assertEqual(tl.run_shardfs("verify", os.path.join(out, "index"), src).returncode, 0)

    def test_samples_never_split_shard_size(self):
        src = self.make_samples()
        out = os.path.join(self.scratch("shardsize"), "out")
        pack(src, out, "--shard-size", "16K", "--name", "part_%03d.tar")
        self.assertTrue(all(n.startswith("part_") for n in shards_of(out)))
        where = self.check_samples(out, max_bytes=16 * 1024)
        # Over the limit: single samples only (checked above), among them the
        # 40000-byte one.
        big = [i for i, n in enumerate(shards_of(out))
               if os.path.getsize(os.path.join(out, n)) > 16 * 1024]
        self.assertIn(where[("val", "big")], big)
        self.assertLess(len(big), len(shards_of(out)) // 3)

    # -- Re-running and interruption -----------------------------------------

    def make_many(self, dirs=5, per_dir=200):
        src = os.path.join(self.scratch("many"), "src")
        for d in range(dirs):
            os.makedirs(os.path.join(src, "d%02d" % d))
            for i in range(per_dir):
                tl._write(os.path.join(src, "d%02d" % d, "s%04d.jpg" % i), os.urandom(6000))
                tl._write(os.path.join(src, "d%02d" % d, "s%04d.cls" % i), b"%d" % (i % 7))
        return src

    def test_interrupted_pack_leaves_no_index_and_rerun_matches(self):
        src = self.make_many()
        clean = os.path.join(self.scratch("clean"), "out")
        pack(src, clean, "--shard-size", "32K")
        clean_shards = shards_of(clean)
        self.assertGreater(len(clean_shards), 200)  # Each one fsynced: the pack takes a while.

        out = os.path.join(self.scratch("killed"), "out")
        proc = subprocess.Popen([tl.SHARDFS, "pack", src, "--out", out, "--quiet",
                                 "--shard-size", "32K"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            done = tl.wait_until(lambda: os.path.isdir(out) and len(shards_of(out)) >= 10,
                                 timeout=60, interval=0.001)
            proc.send_signal(signal.SIGKILL)  # Only the pack we started.
        finally:
            proc.kill()
            proc.wait()
        self.assertTrue(done, "pack never wrote 10 shards")
        self.assertFalse(os.path.exists(os.path.join(out, "index")),
                         "killed after %d shards of %d, yet an index exists" % (
                             len(shards_of(out)), len(clean_shards)))
        left = shards_of(out)
        self.assertLess(len(left), len(clean_shards), "the killed pack finished")
        self.assertEqual(left, clean_shards[:len(left)], "finished shards are a prefix")
        for n in left:  # Finished shards are complete: renamed only when whole.
            self.assertEqual(subprocess.run(["cmp", os.path.join(out, n),
                                             os.path.join(clean, n)]).returncode, 0, n)
        names = set(os.listdir(out))
        self.assertTrue(all(n.endswith(".tar") or n.endswith(".tar.tmp") for n in names), names)
        self.assertLessEqual(len([n for n in names if n.endswith(".tmp")]), 1)
        # Partial output cannot be mistaken for a dataset.
        self.assertEqual(tl.run_shardfs("verify", os.path.join(out, "index"), src).returncode, 1)

        # A re-run refuses to delete the leftovers (it did not write them),
        # naming one and changing nothing ...
        before = sorted(os.listdir(out))
        p = pack(src, out, "--shard-size", "32K", check=1)
        self.assertIn(b"train-000000.tar: already exists and was not written by this pack",
                      p.stderr)
        self.assertEqual(sorted(os.listdir(out)), before)
        # ... and with --force starts clean and produces the clean pack.
        pack(src, out, "--shard-size", "32K", "--force")
        self.assertEqual(sorted(os.listdir(out)), sorted(["index"] + clean_shards))
        for n in clean_shards:
            self.assertEqual(subprocess.run(["cmp", os.path.join(out, n),
                                             os.path.join(clean, n)]).returncode, 0, n)
        self.assertEqual(ls_json(os.path.join(out, "index")),
                         ls_json(os.path.join(clean, "index")))

        # A finished pack is not overwritten without --force ...
        p = pack(src, out, "--shard-size", "32K", check=1)
        self.assertIn(b"already exists", p.stderr)
        # ... and --force with bigger shards leaves none of the old ones.
        pack(src, out, "--shard-size", "1M", "--force")
        new = shards_of(out)
        self.assertLess(len(new), len(clean_shards) // 10)
        self.assertEqual(sorted(os.listdir(out)), sorted(["index"] + new))
        self.assertEqual(tl.run_shardfs("verify", os.path.join(out, "index"), src).returncode, 0)

    def test_output_inside_source_is_refused(self):
        src = self.make_samples()
        p = pack(src, os.path.join(src, "train", "out"), check=1)
        self.assertIn(b"inside", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(src, "train", "out")))

    # -- Entries that cannot be packed ----------------------------------------

    def test_special_files(self):
        src = os.path.join(self.scratch("special"), "src")
        os.makedirs(os.path.join(src, "d"))
        tl._write(os.path.join(src, "a.txt"), b"a")
        os.mkfifo(os.path.join(src, "fifo"))
        s = socket.socket(socket.AF_UNIX)
        s.bind(os.path.join(src, "d", "sock"))
        s.close()
        out = os.path.join(self.scratch("special-out"), "out")
        p = pack(src, out, check=1)
        err = p.stderr.decode()
        self.assertIn("fifo: fifo cannot be packed", err)
        self.assertIn("d/sock: socket cannot be packed", err)
        self.assertFalse(os.path.exists(os.path.join(out, "index")))
        self.assertFalse(os.path.exists(out) and os.listdir(out), "nothing written")

        p = pack(src, out, "--skip-special", check=0)
        err = p.stderr.decode()
        self.assertIn("skipped: fifo: fifo", err)
        self.assertIn("skipped: d/sock: socket", err)
        self.assertEqual([e["path"] for e in ls_json(os.path.join(out, "index"))],
                         [b"a.txt", b"d"])
        v = tl.run_shardfs("verify", os.path.join(out, "index"), src)
        self.assertEqual(v.returncode, 1)
        self.assertEqual(sorted(v.stdout.splitlines()), [b"missing: d/sock", b"missing: fifo"])

    def test_unreadable_files(self):
        # Root reads anything; setpriv drops the capabilities that allow it,
        # so chmod 000 means unreadable, for the pack only.
        src = os.path.join(self.scratch("unreadable"), "src")
        os.makedirs(os.path.join(src, "d"))
        os.makedirs(os.path.join(src, "closed"))
        tl._write(os.path.join(src, "a.txt"), b"a")
        tl._write(os.path.join(src, "closed", "inside"), b"i")
        tl._write(os.path.join(src, "d", "secret"), b"s", mode=0)
        tl._write(os.path.join(src, "zz"), b"z" * 5000, mode=0)
        os.link(os.path.join(src, "zz"), os.path.join(src, "zz_link"))
        os.chmod(os.path.join(src, "closed"), 0)
        out = os.path.join(self.scratch("unreadable-out"), "out")
        nocaps = without_dac_caps()
        p = pack(src, out, check=1, prefix=nocaps)
        err = p.stderr.decode()
        for path in ("d/secret", "zz"):
            self.assertIn("%s: open: Permission denied" % path, err)
        self.assertIn("closed: open directory: Permission denied", err)
        self.assertFalse(os.path.exists(os.path.join(out, "index")))
        self.assertEqual(shards_of(out) if os.path.isdir(out) else [], [])

        p = pack(src, out, "--skip-unreadable", check=0, prefix=nocaps)
        err = p.stderr.decode()
        self.assertIn("skipped: d/secret: open: Permission denied", err)
        self.assertIn("skipped: zz_link: hard link to zz, which was left out", err)
        self.assertEqual([e["path"] for e in ls_json(os.path.join(out, "index"))],
                         [b"a.txt", b"d"])
        v = tl.run_shardfs("verify", os.path.join(out, "index"), src)
        self.assertEqual(sorted(v.stdout.splitlines()),
                         [b"missing: closed", b"missing: closed/inside", b"missing: d/secret",
                          b"missing: zz", b"missing: zz_link"])

    def test_file_growing_during_pack_fails_naming_it(self):
        src = os.path.join(self.scratch("growing"), "src")
        os.makedirs(os.path.join(src, "a"))
        for i in range(300):
            tl._write(os.path.join(src, "a", "f%03d" % i), os.urandom(4096))
        grow = os.path.join(src, "grow.bin")
        tl._write(grow, os.urandom(16 << 20))  # Streamed: takes a while to copy.
        stop = threading.Event()
        started = threading.Event()

        def appender():
            with open(grow, "ab", buffering=0) as f:
                while not stop.is_set():
                    f.write(b"+")
                    started.set()

        t = threading.Thread(target=appender)
        t.start()
        try:
            started.wait(10)
            out = os.path.join(self.scratch("growing-out"), "out")
            p = pack(src, out, check=1)
        finally:
            stop.set()
            t.join()
        err = p.stderr.decode()
        self.assertRegex(err, r"grow\.bin: changed while being packed \(size \d+ -> \d+")
        self.assertFalse(os.path.exists(os.path.join(out, "index")))
        self.assertEqual(shards_of(out) if os.path.isdir(out) else [], [])

    # -- verify finds differences --------------------------------------------

    def test_verify_reports_each_difference(self):
        src = os.path.join(self.scratch("verify"), "src")
        os.makedirs(os.path.join(src, "d"))
        for n in ("same", "content", "mode", "mtime", "size", "gone"):
            tl._write(os.path.join(src, "d", n), b"0123456789" * 100)
        os.symlink("same", os.path.join(src, "d", "link"))
        tl._write(os.path.join(src, "pair_a"), b"pair")
        os.link(os.path.join(src, "pair_a"), os.path.join(src, "pair_b"))
        out = os.path.join(self.scratch("verify-out"), "out")
        pack(src, out)
        idx = os.path.join(out, "index")
        self.assertEqual(tl.run_shardfs("verify", idx, src).returncode, 0)

        d = os.path.join(src, "d")
        dir_times = [(p, os.stat(p).st_mtime_ns) for p in (src, d)]
        st = os.stat(os.path.join(d, "content"))
        with open(os.path.join(d, "content"), "r+b") as f:
            f.seek(123)
            f.write(b"X")
        os.utime(os.path.join(d, "content"), ns=(st.st_atime_ns, st.st_mtime_ns))
        os.chmod(os.path.join(d, "mode"), 0o600)
        os.utime(os.path.join(d, "mtime"), ns=(1, 2_000_000_001))
        st = os.stat(os.path.join(d, "size"))
        with open(os.path.join(d, "size"), "ab") as f:
            f.write(b"more")
        os.utime(os.path.join(d, "size"), ns=(st.st_atime_ns, st.st_mtime_ns))
        os.unlink(os.path.join(d, "gone"))
        tl._write(os.path.join(d, "new"), b"new")
        os.unlink(os.path.join(d, "link"))
        os.symlink("elsewhere", os.path.join(d, "link"))
        os.unlink(os.path.join(src, "pair_b"))
        tl._write(os.path.join(src, "pair_b"), b"pair")
        for p, ns in dir_times:
            os.utime(p, ns=(ns, ns))

        p = tl.run_shardfs("verify", idx, src)
        self.assertEqual(p.returncode, 1)
        lines = p.stdout.decode().splitlines()
        want = [
            "content differs: d/content: xxh3 ",
            "mode differs: d/mode: 0600 vs 0644",
            "mtime differs: d/mtime: 2.000000001 vs ",
            "size differs: d/size: 1004 vs 1000",
            "extra: d/gone",
            "missing: d/new",
            "target differs: d/link: elsewhere vs same",
            "nlink differs: pair_a: 1 vs 2",
            "nlink differs: pair_b: 1 vs 2",
        ]
        for w in want:
            self.assertTrue(any(line.startswith(w) for line in lines), "%r not in %s" % (w, lines))
        self.assertFalse(any("d/same" in line for line in lines), lines)

        # --full compares bytes and says where.
        p = tl.run_shardfs("verify", "--full", idx, src)
        self.assertIn(b"content differs: d/content: at byte 123", p.stdout)

        # Through the mount, the same differences.
        mnt = self.scratch("verify-mnt")
        with tl.Mount(idx, mnt):
            p = tl.run_shardfs("verify", "--mounted", mnt, src)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"content differs: d/content: at byte 123", p.stdout)
        self.assertIn(b"size differs: d/size: 1004 vs 1000", p.stdout)

        # A damaged shard: the fingerprint says so; --full finds the bytes.
        shard = os.path.join(out, shards_of(out)[0])
        offset = next(e["offset"] for e in ls_json(idx, drop=()) if e["path"] == b"d/same")
        with open(shard, "r+b") as f:
            f.seek(offset + 5)
            f.write(b"!")
        p = tl.run_shardfs("verify", idx, src)
        self.assertIn(b"shard differs: ", p.stdout)
        p = tl.run_shardfs("verify", "--full", idx, src)
        self.assertIn(b"content differs: d/same: at byte 5", p.stdout)

    # -- Options ---------------------------------------------------------------

    def test_exclude_from_list_and_follow_symlinks(self):
        src = os.path.join(self.scratch("opts"), "src")
        os.makedirs(os.path.join(src, "keep", "cache"))
        os.makedirs(os.path.join(src, "other"))
        tl._write(os.path.join(src, "keep", "a.jpg"), b"a")
        tl._write(os.path.join(src, "keep", "a.tmp"), b"t")
        tl._write(os.path.join(src, "keep", "cache", "c"), b"c")
        tl._write(os.path.join(src, "other", "o"), b"o")
        os.symlink("../other/o", os.path.join(src, "keep", "to_file"))
        os.symlink("../other", os.path.join(src, "keep", "to_dir"))
        os.symlink("/etc", os.path.join(src, "keep", "outside"))
        os.symlink("..", os.path.join(src, "keep", "loop"))

        out = os.path.join(self.scratch("opts-out"), "out")
        pack(src, out, "--exclude", "*.tmp", "--exclude", "keep/cache")
        paths = [e["path"] for e in ls_json(os.path.join(out, "index"))]
        self.assertNotIn(b"keep/a.tmp", paths)
        self.assertNotIn(b"keep/cache", paths)
        self.assertIn(b"keep/a.jpg", paths)

        lst = os.path.join(self.tmp, "list.txt")
        with open(lst, "w") as f:
            f.write("keep/a.jpg\nother\nother/o\n")
        pack(src, out, "--from-list", lst, "--force")
        self.assertEqual([e["path"] for e in ls_json(os.path.join(out, "index"))],
                         [b"keep", b"other", b"keep/a.jpg", b"other/o"])
        with open(lst, "w") as f:
            f.write("keep/a.jpg\nnot/there\n")
        p = pack(src, out, "--from-list", lst, "--force", check=1)
        self.assertIn(b"not/there: not found", p.stderr)

        p = pack(src, out, "--follow-symlinks", "--force")
        self.assertIn(b"keep/outside: symlink kept", p.stderr)
        self.assertIn(b"keep/loop: symlink kept: following it would loop", p.stderr)
        e = {x["path"]: x for x in ls_json(os.path.join(out, "index"))}
        self.assertEqual(e[b"keep/to_file"]["type"], "file")
        self.assertEqual(e[b"keep/to_file"]["inode"], e[b"other/o"]["inode"], "one file")
        self.assertEqual(e[b"keep/to_dir"]["type"], "dir")
        self.assertEqual(e[b"keep/to_dir/o"]["type"], "file")
        self.assertEqual(e[b"keep/outside"]["type"], "symlink")
        self.assertEqual(e[b"keep/loop"]["type"], "symlink")

    def test_usage_errors(self):
        for args in (["pack", self.src], ["pack", "--out", "x"], ["pack", self.src, "--out", "x",
                     "--name", "no-number.tar"], ["pack", self.src, "--out", "x", "--name",
                     "a%d%d.tar"], ["verify", self.idx], ["verify", "--mounted", "m"]):
            p = tl.run_shardfs(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)


class PackBigFileTest(unittest.TestCase):
    """A file over 8 GiB (ustar's size field stops at 8 GiB - 1): the pax
    'size' record. The file is sparse: pack reads its holes as zeros without
    reading them (SEEK_DATA/SEEK_HOLE) and leaves them holes in the shard, so
    this takes about a second, not the minutes 8.5 GiB of real data would."""

    SIZE = 8 * GIB + 512 * (1 << 20) + 123
    ISLANDS = [(0, b"HEAD"), (4 * GIB, b"MIDDLE" * 1000), (8 * GIB + 300 * (1 << 20), b"PAST8G"),
               (SIZE - 5, b"TAIL!")]

    def setUp(self):
        tl.require_shardfs()
        self.tmp = tempfile.mkdtemp(prefix="shardfs-pack-big-")
        self.src = os.path.join(self.tmp, "src")
        os.mkdir(self.src)
        self.big = os.path.join(self.src, "huge.bin")
        with open(self.big, "wb") as f:
            f.truncate(self.SIZE)
            for off, data in self.ISLANDS:
                f.seek(off)
                f.write(data)
        tl._write(os.path.join(self.src, "small.txt"), b"small")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_pack_over_8_gib(self):
        out = os.path.join(self.tmp, "out")
        t0 = time.monotonic()
        pack(self.src, out)
        idx = os.path.join(out, "index")
        e = {x["path"]: x for x in ls_json(idx, drop=())}
        self.assertEqual(e[b"huge.bin"]["size"], self.SIZE)
        shard = e[b"huge.bin"]["shard"]
        self.assertLess(os.stat(shard).st_blocks * 512, 64 << 20, "holes stayed holes")
        # Data offsets past 8 GiB are right: read them straight from the shard.
        with open(shard, "rb") as f:
            for off, data in self.ISLANDS:
                f.seek(e[b"huge.bin"]["offset"] + off)
                self.assertEqual(f.read(len(data)), data, off)
        self.assertEqual(tl.run_shardfs("verify", idx, self.src).returncode, 0)

        with tarfile.open(shard) as tf:
            m = tf.getmember("huge.bin")
            self.assertEqual(m.size, self.SIZE)
            self.assertEqual(m.pax_headers.get("size"), str(self.SIZE))
            f = tf.extractfile(m)
            for off, data in self.ISLANDS:
                f.seek(off)
                self.assertEqual(f.read(len(data)), data, off)
        p = subprocess.run(["tar", "-tvf", shard], stdout=subprocess.PIPE, check=True)
        self.assertIn(b" %d " % self.SIZE, p.stdout)

        # index build (libarchive) finds the same size and offset.
        idx2 = os.path.join(self.tmp, "rebuilt")
        tl.build_index(sorted(os.path.join(out, n) for n in shards_of(out)), idx2,
                       "--no-checksum")
        self.assertEqual(ls_json(idx2, drop=("shard", "xxh3")), ls_json(idx, drop=("shard", "xxh3")))

        mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            path = os.path.join(mnt, "huge.bin")
            self.assertEqual(os.stat(path).st_size, self.SIZE)
            with open(path, "rb") as f:
                for off, data in self.ISLANDS:
                    f.seek(off)
                    self.assertEqual(f.read(len(data)), data, off)
        self.assertLess(time.monotonic() - t0, 60)


if __name__ == "__main__":
    tl.main()
