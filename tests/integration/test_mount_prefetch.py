#!/usr/bin/env python3
"""What the mount does ahead of a program so that the kernel answers it alone:
the dentry prefill (a directory listed in the background once names in it are
looked up one by one) and push-ahead (files that follow a sequentially read
file in its shard stored into the kernel's page cache).

Both are observed through the daemon's debug log, which has a line per
request the kernel sent: after the prefill, lookups of the other names in that
directory send none; after a push, reading the pushed files sends no READ. The
same runs with the feature off show the requests, so the checks can fail. The
bytes read are compared with the source in every case."""

import contextlib
import ctypes
import glob
import hashlib
import mmap
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

FILES_PER_DIR = 200
PAGE = 4096


def sha(data):
    return hashlib.sha256(data).hexdigest()


def own_requests(log, opcode):
    """Requests sent by this test's own thread: not the prefill lister's
    (its lookups of sibling directories it lists ahead)."""
    return len(re.findall(r"opcode: %s \(.*pid: %d$" % (opcode, os.getpid()), log, re.MULTILINE))


class MountPrefetchTest(tl.ScratchTestCase):
    PREFIX = "shardfs-prefetch-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        cls.src = os.path.join(cls.tmp, "src")
        rnd = random.Random(7)
        cls.want = {}
        for d in ("cls0", "cls1"):
            os.makedirs(os.path.join(cls.src, d))
            for i in range(FILES_PER_DIR):
                rel = "%s/f%03d.bin" % (d, i)
                data = rnd.randbytes(rnd.randint(1000, 20000))
                with open(os.path.join(cls.src, rel), "wb") as f:
                    f.write(data)
                cls.want[rel] = sha(data)
        cls.out = os.path.join(cls.tmp, "packed")
        tl.run_shardfs("pack", cls.src, "--out", cls.out, "--quiet", check=0)
        cls.idx = os.path.join(cls.out, "index")
        cls.mnt = os.path.join(cls.tmp, "mnt")
        os.mkdir(cls.mnt)
        rels = sorted(cls.want)
        p = tl.run_shardfs("stat", "--json", cls.idx, *rels, check=0)
        cls.index_entries = dict(zip(rels, tl.json_lines(p.stdout)))

    def names(self, d):
        return sorted(n for n in self.want if n.startswith(d + "/"))

    def mount(self, options):
        return tl.Mount(self.idx, self.mnt, options="debug" + ("," + options if options else ""))

    def requests(self, log, opcode):
        return len(re.findall(r"opcode: %s \(" % opcode, log))

    def own_requests(self, log, opcode):
        return own_requests(log, opcode)

    def push_lines(self, log):
        """The daemon's push and prefill lines: what a failed push check shows."""
        return "\n".join(l for l in log.splitlines()
                         if "push" in l or "attrs:" in l or "prefill" in l or "opcode: LOOKUP" in l
                         or "opcode: READDIR" in l or "OPENDIR" in l)[-6000:]

    def check_bytes(self, rel):
        with open(os.path.join(self.mnt, rel), "rb") as f:
            self.assertEqual(sha(f.read()), self.want[rel], rel)

    def test_prefill_lists_a_directory_after_two_lookups(self):
        # Its LOOKUP counts hold only while the kernel keeps the dentries the
        # listing gave: a run during which another test dropped the dentry
        # cache (tests run two at a time; some drop caches) is taken again
        # with a fresh mount, up to WARM_TRIES times.
        for attempt in range(tl.WARM_TRIES):
            watch = tl.PageLossWatch()
            try:
                with watch, self.mount(None) as m:
                    self.prefill_scenario(m)
                return
            except AssertionError:
                dropped = any(k in (watch.lost or {}) for k in tl.DROP_COUNTERS)
                if not dropped or attempt + 1 == tl.WARM_TRIES:
                    raise

    def prefill_scenario(self, m):
        names = self.names("cls0")
        ino = os.stat(os.path.join(self.mnt, "cls0")).st_ino
        for rel in names[:2]:
            os.lstat(os.path.join(self.mnt, rel))
        marker = "prefill: listed directory inode %d" % ino
        self.assertTrue(tl.wait_until(lambda: marker in m.stderr()),
                        "no prefill of cls0:\n" + m.stderr()[-3000:])
        before = len(m.stderr())
        for rel in names:
            st = os.lstat(os.path.join(self.mnt, rel))
            self.assertEqual(st.st_size, os.lstat(os.path.join(self.src, rel)).st_size)
        after = m.stderr()[before:]
        self.assertEqual(self.own_requests(after, "LOOKUP"), 0, after[-3000:])
        # A name that does not exist is remembered too (negative entry).
        for _ in range(3):
            self.assertFalse(os.path.lexists(os.path.join(self.mnt, "cls0", "nope")))
        self.assertEqual(self.own_requests(m.stderr()[before:], "LOOKUP"), 1)
        for rel in names[:20]:
            self.check_bytes(rel)
        # The next sibling directory was listed ahead: no lookup at all.
        ino1 = os.stat(os.path.join(self.mnt, "cls1")).st_ino
        ahead = "prefill: listed directory inode %d (ahead)" % ino1
        self.assertTrue(tl.wait_until(lambda: ahead in m.stderr()),
                        "cls1 not listed ahead:\n" + m.stderr()[-3000:])
        before = len(m.stderr())
        for rel in self.names("cls1"):
            os.lstat(os.path.join(self.mnt, rel))
        self.assertEqual(self.requests(m.stderr()[before:], "LOOKUP"), 0)

    def test_without_prefill_every_name_is_a_lookup(self):
        with self.mount("prefill_dirs=0") as m:
            before = len(m.stderr())
            for rel in self.names("cls0"):
                os.lstat(os.path.join(self.mnt, rel))
            log = m.stderr()[before:]
            self.assertGreaterEqual(self.requests(log, "LOOKUP"), FILES_PER_DIR)
            self.assertNotIn("prefill:", m.stderr())

    def test_prefill_stops_at_its_entry_limit(self):
        # A limit of 1 entry: the first listing spends it, and from then on
        # every name of another directory is a lookup of its own.
        with self.mount("prefill_entries=1") as m:
            ino = os.stat(os.path.join(self.mnt, "cls0")).st_ino
            for rel in self.names("cls0")[:2]:
                os.lstat(os.path.join(self.mnt, rel))
            marker = "prefill: listed directory inode %d" % ino
            self.assertTrue(tl.wait_until(lambda: marker in m.stderr()),
                            "no prefill of cls0:\n" + m.stderr()[-3000:])
            self.assertTrue(tl.wait_until(lambda: "the limit (-o prefill_entries=1)" in m.stderr()),
                            m.stderr()[-3000:])
            before = len(m.stderr())
            names = self.names("cls1")
            for rel in names:
                st = os.lstat(os.path.join(self.mnt, rel))
                self.assertEqual(st.st_size, os.lstat(os.path.join(self.src, rel)).st_size)
            log = m.stderr()[before:]
            self.assertGreaterEqual(self.requests(log, "LOOKUP"), len(names))
            self.assertNotIn("prefill: listed directory", log)

    def read_in_order(self, options, watch=None):
        """Lists cls1, reads its first two files; returns (mount log after the
        push, files pushed, READ requests while reading the pushed files).
        The random-read push is off: cls1 starts far into the shard, so the
        first read is not part of a sequential walk. The daemon's whole log,
        its unmount line included, is left in self.final_log. `watch` (a
        tl.PageLossWatch) watches the page cache from the first read to the
        last pushed file's."""
        m = self.mount("push_random=0" + ("," + options if options else ""))
        with m:
            names = self.names("cls1")
            os.listdir(os.path.join(self.mnt, "cls1"))  # The kernel knows the inodes.
            with watch or contextlib.nullcontext():
                for rel in names[:2]:
                    self.check_bytes(rel)
                pushed = 0
                if options != "push_ahead=0":
                    pat = re.compile(r"push-ahead after inode \d+: (\d+) of \d+ files")
                    self.assertTrue(tl.wait_until(lambda: pat.search(m.stderr())),
                                    "no push-ahead:\n" + m.stderr()[-3000:])
                    pushed = max(int(x) for x in pat.findall(m.stderr()))
                    self.assertGreaterEqual(pushed, 100, self.push_lines(m.stderr()))
                before = len(m.stderr())
                upto = max(pushed, 50)
                for rel in names[2:2 + upto]:
                    self.check_bytes(rel)
            log = m.stderr()[before:]
            for rel in names:
                self.check_bytes(rel)
        self.final_log = m.final_log()
        return log, pushed, self.requests(log, "READ")

    def pushed_reads(self, options=None):
        """read_in_order(options), taken again while the page cache lost
        pages (tl.warm_pass): (log, files pushed, READs, the READs the pages
        lost account for)."""
        (log, pushed, reads), lost = tl.warm_pass(lambda w: self.read_in_order(options, w),
                                                  tries=3)
        return log, pushed, reads, tl.reads_lost_pages_allow(lost, pushed)

    def pushed_from_fd(self):
        """(files pushed, of them from the shard descriptor), from the line
        the daemon logs at unmount."""
        found = re.search(r"push: (\d+) jobs run, .* (\d+) files \(\d+ bytes\) pushed, (\d+) "
                          r"from the shard descriptor", self.final_log)
        self.assertIsNotNone(found, self.final_log[-3000:])
        self.jobs_run = int(found.group(1))
        return int(found.group(2)), int(found.group(3))

    def test_push_ahead_serves_the_following_files_without_reads(self):
        log, pushed, reads, lost = self.pushed_reads()
        # 4 MiB holds all of the directory's ~2 MB.
        self.assertGreaterEqual(pushed, 100, log[-3000:])
        # Almost none: one CI run saw 3 READs for ~196 pushed files (cause
        # not found; the kernel may drop a stored page). Without push-ahead
        # every file is a READ (test_without_push_ahead_every_file_is_a_read).
        self.assertLessEqual(reads, pushed // 20 + lost, log[-3000:])

    def test_pushes_are_spliced_from_the_shard_descriptor(self):
        """Issue 27: a push hands libfuse the shard's descriptor and offset
        (FUSE_BUF_IS_FD), not a copy; the bytes read back are the source's
        (check_bytes). Without splice, and for files verify=first has not
        checked yet, the bytes go through the daemon's memory."""
        _, pushed, _ = self.read_in_order(None)
        files, from_fd = self.pushed_from_fd()
        self.assertGreaterEqual(pushed, 100)
        # Every file but each job's first (from memory: see RunJob).
        self.assertGreaterEqual(from_fd, files - self.jobs_run, self.final_log[-3000:])
        self.assertGreater(from_fd, 0)
        _, pushed, reads = self.read_in_order("splice=0")
        files, from_fd = self.pushed_from_fd()
        self.assertGreaterEqual(files, 100, self.final_log[-3000:])
        self.assertEqual(from_fd, 0, self.final_log[-3000:])
        self.read_in_order("verify=first")
        files, from_fd = self.pushed_from_fd()
        self.assertGreaterEqual(files, 100, self.final_log[-3000:])
        self.assertEqual(from_fd, 0, self.final_log[-3000:])

    def test_without_push_ahead_every_file_is_a_read(self):
        log, pushed, reads = self.read_in_order("push_ahead=0")
        self.assertGreaterEqual(reads, 50, log[-3000:])
        self.assertNotIn("push-ahead", log)

    def test_verify_first_pushes_checked_bytes(self):
        log, pushed, reads, lost = self.pushed_reads("verify=first")
        self.assertGreaterEqual(pushed, 100, log[-3000:])
        self.assertLessEqual(reads, pushed // 20 + lost, log[-3000:])

    def test_random_reads_push_the_files_after_them_once(self):
        pat = re.compile(r"push-ahead after inode (\d+): (\d+) of (\d+) files")

        def pushes(log, ino):
            return [(int(n), int(t)) for i, n, t in pat.findall(log) if int(i) == ino]

        names = self.names("cls0")
        with contextlib.ExitStack() as mounts:

            def push_and_read(watch):
                """On a mount of its own: (the mount, inodes by name, files
                pushed after a read in the middle of the shard, READs of them)."""
                mounts.close()  # The try before's.
                m = mounts.enter_context(self.mount("push_ahead=0"))
                self.assertIn("push_random=auto: shards", m.stderr())
                self.assertIn("push_random=4194304", m.stderr())  # Tiny shards.
                os.listdir(os.path.join(self.mnt, "cls0"))
                ino = {rel: os.stat(os.path.join(self.mnt, rel)).st_ino for rel in names}
                with watch:
                    # A read in the middle of the shard: not sequential, whole file.
                    self.check_bytes(names[100])
                    self.assertTrue(tl.wait_until(lambda: pushes(m.stderr(), ino[names[100]])),
                                    m.stderr()[-3000:])
                    n, _ = pushes(m.stderr(), ino[names[100]])[0]
                    before = len(m.stderr())
                    for rel in names[101:101 + n]:
                        self.check_bytes(rel)
                return m, ino, n, self.requests(m.stderr()[before:], "READ")

            # Taken again while the page cache lost pages (tl.warm_pass).
            (m, ino, n, reads), lost = tl.warm_pass(push_and_read, tries=3)
            self.assertGreaterEqual(n, 50)  # The rest of cls0 (cls1 is not listed).
            self.assertLessEqual(reads, n // 20 + tl.reads_lost_pages_allow(lost, n), lost)
            # Earlier in the shard: the push ends where the pushed run starts,
            # and leaves out names[100]: it was read, so its pages are the
            # kernel's already (a push into them could wait on a reader).
            self.check_bytes(names[95])
            self.assertTrue(tl.wait_until(lambda: pushes(m.stderr(), ino[names[95]])))
            self.assertEqual(pushes(m.stderr(), ino[names[95]])[0], (4, 4))

    def test_random_push_off(self):
        with self.mount("push_ahead=0,push_random=0") as m:
            names = self.names("cls0")
            os.listdir(os.path.join(self.mnt, "cls0"))
            self.check_bytes(names[100])
            before = len(m.stderr())
            for rel in names[101:151]:
                self.check_bytes(rel)
            self.assertGreaterEqual(self.requests(m.stderr()[before:], "READ"), 50)
            self.assertNotIn("push-ahead", m.stderr())

    def resident_pages(self, rel):
        """How many of the shard's pages wholly inside `rel`'s data are in
        the page cache (mincore), how many there are, and where its data
        ends in the shard."""
        info = self.index_entries[rel]
        self.assertEqual(info["path"], rel.encode())
        end = info["offset"] + info["size"]
        first = (info["offset"] + PAGE - 1) // PAGE * PAGE
        last = end // PAGE * PAGE
        if last <= first:
            return 0, 0, end  # No page wholly inside this file.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        fd = os.open(info["shard"], os.O_RDONLY)
        try:
            addr = libc.mmap(None, last - first, mmap.PROT_READ, mmap.MAP_SHARED, fd, first)
            self.assertNotEqual(addr, ctypes.c_void_p(-1).value)
            vec = ctypes.create_string_buffer((last - first) // PAGE)
            self.assertEqual(libc.mincore(addr, last - first, vec), 0)
            libc.munmap(addr, last - first)
        finally:
            os.close(fd)
        return sum(b & 1 for b in vec.raw), (last - first) // PAGE, end

    def drop_behind_run(self, options):
        """Reads every file in tree order (~4 MB of shard); returns the
        resident shard pages of the files in the shard's first 1.5 MiB."""
        for shard in glob.glob(os.path.join(self.out, "*.tar")):
            with open(shard, "rb") as f:  # Every page of the shards cached.
                while f.read(1 << 20):
                    pass
        with self.mount("push_random=0," + options):
            for rel in sorted(self.want):
                self.check_bytes(rel)
            pages = [self.resident_pages(rel) for rel in self.names("cls0")]
        return [(g, t) for g, t, end in pages if end < 3 << 19]

    def test_drop_behind_keeps_one_copy(self):
        runs = self.drop_behind_run("drop_behind=1")
        total = sum(t for _, t in runs)
        self.assertGreaterEqual(total, 100)
        left = sum(g for g, _ in runs)
        self.assertEqual(left, 0, "shard pages left cached: %d of %d" % (left, total))
        # Control: without it the pages stay, so the zero above is not an
        # artefact of how residency is measured. Quiet runs keep 219 of 221;
        # under load the kernel reclaims some on its own (183 of 221 seen),
        # so the bar is half.
        runs = self.drop_behind_run("drop_behind=0")
        kept, total = sum(g for g, _ in runs), sum(t for _, t in runs)
        self.assertGreaterEqual(kept, total // 2, "control kept %d of %d pages" % (kept, total))


class PrefillPastLimitTest(tl.ScratchTestCase):
    """Past its entry limit the prefill lists a directory only once a program
    has missed PAST_LIMIT names in it (a walk, an epoch), and then its next
    siblings ahead; never one it only samples (src/mount/dir_prefill.h)."""

    PREFIX = "shardfs-prefill-limit-"
    PAST_LIMIT = 256  # PrefillPolicy::kMissesPastLimit
    WALKED = 400

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tl.require_fuse()
        src = os.path.join(cls.tmp, "src")
        cls.counts = {"a0": 4, "a1": 40, "a2": 40, "a3": cls.WALKED, "a4": 40}
        for d, n in cls.counts.items():
            os.makedirs(os.path.join(src, d))
            for i in range(n):
                with open(os.path.join(src, d, "f%04d" % i), "wb") as f:
                    f.write(b"%s %d\n" % (d.encode(), i))
        out = os.path.join(cls.tmp, "packed")
        tl.run_shardfs("pack", src, "--out", out, "--quiet", check=0)
        cls.idx = os.path.join(out, "index")
        cls.mnt = os.path.join(cls.tmp, "mnt")
        os.mkdir(cls.mnt)

    def lookups(self, log):
        return own_requests(log, "LOOKUP")

    def test_past_the_limit_only_a_walked_directory_is_listed(self):
        with tl.Mount(self.idx, self.mnt, options="debug,prefill_entries=1") as m:
            inode = {d: os.stat(os.path.join(self.mnt, d)).st_ino for d in self.counts}
            # The first listing (a0, 4 entries) spends the limit of 1.
            for i in range(2):
                os.lstat(os.path.join(self.mnt, "a0", "f%04d" % i))
            self.assertTrue(tl.wait_until(lambda: "the limit (-o prefill_entries=1)" in m.stderr()),
                            m.stderr()[-3000:])
            before = len(m.stderr())
            # Sampled directories: every name a lookup, none listed.
            for d in ("a1", "a2"):
                for i in range(0, self.counts[d], 2):
                    os.lstat(os.path.join(self.mnt, d, "f%04d" % i))
            sampled = m.stderr()[before:]
            self.assertEqual(self.lookups(sampled), self.counts["a1"])
            self.assertNotIn("prefill: listed directory", sampled)
            # A walked directory: listed on the PAST_LIMIT-th miss, after
            # which its remaining names are the kernel's.
            before = len(m.stderr())
            for i in range(self.PAST_LIMIT):
                os.lstat(os.path.join(self.mnt, "a3", "f%04d" % i))
            listed = "prefill: listed directory inode %d" % inode["a3"]
            self.assertTrue(tl.wait_until(lambda: listed in m.stderr()[before:]),
                            "a3 not listed past the limit:\n" + m.stderr()[-3000:])
            walk = m.stderr()[before:]
            self.assertEqual(self.lookups(walk), self.PAST_LIMIT)
            before = len(m.stderr())
            for i in range(self.PAST_LIMIT, self.WALKED):
                st = os.lstat(os.path.join(self.mnt, "a3", "f%04d" % i))
                self.assertEqual(st.st_size, len(b"a3 %d\n" % i))
            rest = m.stderr()[before:]
            self.assertEqual(self.lookups(rest), 0, rest[-3000:])
            # The walk goes on: a3's next sibling was listed ahead, and its
            # names are the kernel's too.
            ahead = "prefill: listed directory inode %d (ahead)" % inode["a4"]
            self.assertTrue(tl.wait_until(lambda: ahead in m.stderr()), m.stderr()[-3000:])
            before = len(m.stderr())
            for i in range(self.counts["a4"]):
                os.lstat(os.path.join(self.mnt, "a4", "f%04d" % i))
            self.assertEqual(self.lookups(m.stderr()[before:]), 0)

if __name__ == "__main__":
    tl.main()
