#!/usr/bin/env python3
"""`shardfs pack` refusing what it must not do: an interrupted pack leaves no
index and is not silently overwritten, output inside the source, special and
unreadable files, a file changing while it is packed.

Tests run as root here, so "unreadable" is made real by running pack without
CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (setpriv).
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402


def without_dac_caps():
    """A command prefix that drops root's power to read any file, so that a
    chmod 000 file is really unreadable. Empty when not root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        raise RuntimeError("running as root and setpriv (util-linux) is missing: cannot make "
                           "a file unreadable")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]


# What a pack writes beside its shards until its index is published.
RECORD = ".shardfs-pack-in-progress"


class PackSafetyTest(tl.ScratchTestCase):
    PREFIX = "shardfs-pack-safety-"

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
        tl.pack(src, clean, "--shard-size", "32K")
        clean_shards = tl.shards_of(clean)
        self.assertGreater(len(clean_shards), 200)  # Each one fsynced: the pack takes a while.

        out = os.path.join(self.scratch("killed"), "out")
        proc = subprocess.Popen([tl.SHARDFS, "pack", src, "--out", out, "--quiet",
                                 "--shard-size", "32K"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            done = tl.wait_until(lambda: os.path.isdir(out) and len(tl.shards_of(out)) >= 10,
                                 timeout=60, interval=0.001)
            proc.send_signal(signal.SIGKILL)  # Only the pack we started.
        finally:
            proc.kill()
            proc.wait()
        self.assertTrue(done, "pack never wrote 10 shards")
        self.assertFalse(os.path.exists(os.path.join(out, "index")),
                         "killed after %d shards of %d, yet an index exists" % (
                             len(tl.shards_of(out)), len(clean_shards)))
        left = tl.shards_of(out)
        self.assertLess(len(left), len(clean_shards), "the killed pack finished")
        self.assertEqual(left, clean_shards[:len(left)], "finished shards are a prefix")
        for n in left:  # Finished shards are complete: renamed only when whole.
            self.assertEqual(subprocess.run(["cmp", os.path.join(out, n),
                                             os.path.join(clean, n)]).returncode, 0, n)
        names = set(os.listdir(out)) - {RECORD}
        self.assertTrue(all(n.endswith(".tar") or n.endswith(".tar.tmp") for n in names), names)
        self.assertLessEqual(len([n for n in names if n.endswith(".tmp")]), 1)
        # The pack's record of what it was writing, made before its first shard.
        with open(os.path.join(out, RECORD)) as f:
            self.assertEqual(f.read().splitlines(), clean_shards)
        # Partial output cannot be mistaken for a dataset.
        self.assertEqual(tl.run_shardfs("verify", os.path.join(out, "index"), src).returncode, 1)

        # A re-run refuses to delete the leftovers (it did not write them),
        # naming one and changing nothing ...
        before = sorted(os.listdir(out))
        p = tl.pack(src, out, "--shard-size", "32K", check=1)
        self.assertIn(b"train-000000.tar: already exists and was not written by this pack",
                      p.stderr)
        self.assertEqual(sorted(os.listdir(out)), before)
        # ... nor with --force a file named like a shard that the record does
        # not list (the user's) ...
        tl._write(os.path.join(out, "train-900000.tar"), b"mine")
        p = tl.pack(src, out, "--shard-size", "32K", "--force", check=1)
        self.assertIn(b"train-900000.tar: not written by shardfs pack", p.stderr)
        self.assertEqual(sorted(os.listdir(out)), sorted(before + ["train-900000.tar"]))
        os.unlink(os.path.join(out, "train-900000.tar"))
        # ... and with --force starts clean and produces the clean pack.
        tl.pack(src, out, "--shard-size", "32K", "--force")
        self.assertEqual(sorted(os.listdir(out)), sorted(["index"] + clean_shards))
        for n in clean_shards:
            self.assertEqual(subprocess.run(["cmp", os.path.join(out, n),
                                             os.path.join(clean, n)]).returncode, 0, n)
        self.assertEqual(tl.ls_json(os.path.join(out, "index")),
                         tl.ls_json(os.path.join(clean, "index")))

        # A finished pack is not overwritten without --force ...
        p = tl.pack(src, out, "--shard-size", "32K", check=1)
        self.assertIn(b"already exists", p.stderr)
        # ... and --force with bigger shards leaves none of the old ones.
        tl.pack(src, out, "--shard-size", "1M", "--force")
        new = tl.shards_of(out)
        self.assertLess(len(new), len(clean_shards) // 10)
        self.assertEqual(sorted(os.listdir(out)), sorted(["index"] + new))
        self.assertEqual(tl.run_shardfs("verify", os.path.join(out, "index"), src).returncode, 0)

    def test_output_inside_source_is_refused(self):
        src = tl.make_pack_samples(self.scratch("samples"))
        p = tl.pack(src, os.path.join(src, "train", "out"), check=1)
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
        p = tl.pack(src, out, check=1)
        err = p.stderr.decode()
        self.assertIn("fifo: fifo cannot be packed", err)
        self.assertIn("d/sock: socket cannot be packed", err)
        self.assertFalse(os.path.exists(os.path.join(out, "index")))
        self.assertFalse(os.path.exists(out) and os.listdir(out), "nothing written")

        p = tl.pack(src, out, "--skip-special", check=0)
        err = p.stderr.decode()
        self.assertIn("skipped: fifo: fifo", err)
        self.assertIn("skipped: d/sock: socket", err)
        self.assertEqual([e["path"] for e in tl.ls_json(os.path.join(out, "index"))],
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
        p = tl.pack(src, out, check=1, prefix=nocaps)
        err = p.stderr.decode()
        for path in ("d/secret", "zz"):
            self.assertIn("%s: open: Permission denied" % path, err)
        self.assertIn("closed: open directory: Permission denied", err)
        self.assertFalse(os.path.exists(os.path.join(out, "index")))
        self.assertEqual(tl.shards_of(out) if os.path.isdir(out) else [], [])

        p = tl.pack(src, out, "--skip-unreadable", check=0, prefix=nocaps)
        err = p.stderr.decode()
        self.assertIn("skipped: d/secret: open: Permission denied", err)
        self.assertIn("skipped: zz_link: hard link to zz, which was left out", err)
        self.assertEqual([e["path"] for e in tl.ls_json(os.path.join(out, "index"))],
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
            p = tl.pack(src, out, check=1)
        finally:
            stop.set()
            t.join()
        err = p.stderr.decode()
        self.assertRegex(err, r"grow\.bin: changed while being packed \(size \d+ -> \d+")
        self.assertFalse(os.path.exists(os.path.join(out, "index")))
        self.assertEqual(tl.shards_of(out) if os.path.isdir(out) else [], [])


if __name__ == "__main__":
    tl.main()
