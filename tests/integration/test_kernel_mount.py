#!/usr/bin/env python3
"""`shardfs mount --kernel`: the view served by the kernel's EROFS
driver from an image shardfs writes (src/erofs/image.h), the shards as
extra devices.

The oracles: GNU tar's extraction (as root, owners kept) for generated trees
of every kind of entry and for the tar corpus; the FUSE mount of the same
index for views and ranks. Then 1,000 shards through the new mount API, the
fallbacks (not root, a remote shard, verify=always, a changed shard), a shard
replaced while mounted, the image cache and the mount(8) helper.

The generated trees are this test's fuzzer of the image writer: seeded random
trees (names of every length and many bytes, directories spanning many
blocks, files of every size around the block boundaries, sparse files, hard
links, symlinks whose targets straddle the inline limit, owners, modes,
mtimes before 1970), each compared entry by entry, the kernel as the judge of
the format.

These tests need root and a kernel with EROFS (6.12+): they fail, never skip,
without them."""
import io
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402
import remote_servers as rs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus")
sys.path.insert(0, CORPUS)
import check_tar_corpus as corpus  # noqa: E402

NAME_BYTES = (b"abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 -_.,+=@~#%&()[]{}'"
              + "äöüßéñ中文日本語".encode())


def rand_name(rnd, taken):
    while True:
        n = rnd.choice([1, 2, 5, 12, 40, 100, 200, 255])
        raw = bytes(rnd.choice(NAME_BYTES) for _ in range(n * 2))
        name = raw.decode("utf-8", errors="ignore").encode()[:n]
        name = name.decode("utf-8", errors="ignore").encode()
        if name and name not in (b".", b"..") and name not in taken:
            taken.add(name)
            return name


def make_tree(root, seed):
    """A random tree under `root` (bytes paths). Returns nothing; the tree on
    disk is the reference."""
    rnd = random.Random(seed)
    root = os.fsencode(root)
    dirs = [root]
    files = []
    for _ in range(rnd.randrange(4, 10)):
        parent = rnd.choice(dirs)
        d = os.path.join(parent, rand_name(rnd, set(os.listdir(parent))))
        os.mkdir(d)
        dirs.append(d)
    # One directory with enough names for many 512-byte directory blocks.
    big = os.path.join(root, b"big")
    os.mkdir(big)
    for i in range(rnd.randrange(150, 400)):
        p = os.path.join(big, b"entry-%05d-%s" % (i, b"x" * rnd.randrange(0, 60)))
        with open(p, "wb") as f:
            f.write(b"%d" % i)
        files.append(p)
    sizes = [0, 1, 511, 512, 513, 4095, 4096, 4097, 65536, 131073, 300001]
    for _ in range(rnd.randrange(20, 40)):
        parent = rnd.choice(dirs)
        p = os.path.join(parent, rand_name(rnd, set(os.listdir(parent))))
        with open(p, "wb") as f:
            f.write(rnd.randbytes(rnd.choice(sizes + [rnd.randrange(0, 200000)])))
        files.append(p)
    # Sparse files: holes at 4 KiB granularity, where GNU tar finds them.
    for k in range(2):
        parent = rnd.choice(dirs)
        p = os.path.join(parent, b"sparse-%d" % k)
        with open(p, "wb") as f:
            size = rnd.randrange(1 << 20, 4 << 20)
            f.truncate(size)
            for _ in range(rnd.randrange(0, 4)):
                f.seek(rnd.randrange(0, size // 4096) * 4096)
                f.write(rnd.randbytes(rnd.randrange(1, 20000)))
        files.append(p)
    for _ in range(rnd.randrange(3, 8)):
        src = rnd.choice(files)
        parent = rnd.choice(dirs)
        os.link(src, os.path.join(parent, rand_name(rnd, set(os.listdir(parent)))))
    for n in (1, 100, 447, 448, 449, 511, 512, 1000, 4000):
        parent = rnd.choice(dirs)
        target = bytes(rnd.choice(b"abc/._-") for _ in range(n))
        os.symlink(target, os.path.join(parent, rand_name(rnd, set(os.listdir(parent)))))
    # A hard link to a symlink: one inode, two names, as GNU tar extracts it.
    links = [os.path.join(p, n) for p in dirs for n in os.listdir(p)
             if os.path.islink(os.path.join(p, n))]
    os.link(rnd.choice(sorted(links)), os.path.join(root, b"link-to-a-symlink"),
            follow_symlinks=False)
    for d in dirs[1:] + files:
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode):
            os.chmod(d, rnd.choice([0o755, 0o700, 0o750, 0o1777, 0o2755]))
        else:
            os.chmod(d, rnd.choice([0o644, 0o600, 0o400, 0o755, 0o4755, 0o2711, 0o666]))
        os.lchown(d, rnd.choice([0, 1, 1000, 65534, 70000, 2**31 + 5]),
                  rnd.choice([0, 2, 1000, 65534, 99999]))
    for d in reversed(sorted(dirs[1:] + files)):
        t = rnd.choice([0, -86400 * 400 - 7, 1_600_000_000, 2_000_000_000, 4_200_000_000])
        t_ns = t * 10**9 + rnd.randrange(0, 10**9)
        if rnd.random() < 0.5:  # Shared by many: compact inodes take the image's time.
            t_ns = rnd.choice([1_600_000_000 * 10**9 + 123, -5 * 10**9 - 1])
        os.utime(d, ns=(t_ns, t_ns), follow_symlinks=False)


def tar_dir(src, shard, *extra):
    p = subprocess.run(["tar", "--format=posix", "--sparse", "--numeric-owner", "--sort=name",
                        "-cf", shard, *extra, "-C", src, "."], capture_output=True)
    if p.returncode != 0:
        raise AssertionError("tar: %s" % p.stderr.decode(errors="replace"))


def untar(shards, dest):
    os.makedirs(dest, exist_ok=True)
    for s in shards:
        p = subprocess.run(["tar", "--numeric-owner", "-xpf", s, "-C", dest], capture_output=True)
        if p.returncode != 0:
            raise AssertionError("tar -x %s: %s" % (s, p.stderr.decode(errors="replace")))


class KernelMountTest(tl.ScratchTestCase):
    PREFIX = "shardfs-kernel-"

    def setUp(self):
        self.assertEqual(os.geteuid(), 0, "the kernel mount tests run as root")
        with open("/proc/filesystems") as f:
            self.assertIn("\terofs\n", f.read(), "this kernel has no EROFS")

    def kmount(self, idx, mnt, **kw):
        kw.setdefault("cache_dir", os.path.join(self.tmp, "images"))
        return tl.KernelMount(idx, mnt, **kw)

    def assert_same(self, want, got, quantum_ns=1, what=""):
        """Entry by entry: names, types, modes, owners, mtimes, sizes,
        content, symlink targets, link counts, and which names share an
        inode."""
        want = dict(want)
        got = dict(got)
        want.pop(b"", None)
        got.pop(b"", None)
        missing = sorted(set(want) - set(got))[:5]
        extra = sorted(set(got) - set(want))[:5]
        self.assertEqual((missing, extra), ([], []), "%s: names differ" % what)
        for p, w in want.items():
            tl.compare_entry(self, "%s %r" % (what, p), w, got[p], quantum_ns=quantum_ns)
        classes = {}
        for p, w in want.items():
            classes.setdefault(w.ino, set()).add(got[p].ino)
        for ino, seen in classes.items():
            self.assertEqual(len(seen), 1, "%s: names of one inode split" % what)
        self.assertEqual(len({g.ino for g in got.values()}), len(classes),
                         "%s: inodes merged" % what)

    def test_generated_trees_equal_gnu_tar_extraction(self):
        for seed in range(6):
            base = self.scratch("gen%d" % seed)
            src = os.path.join(base, "src")
            os.mkdir(src)
            make_tree(src, seed)
            shard = os.path.join(base, "s.tar")
            tar_dir(src, shard)
            x = os.path.join(base, "x")
            untar([shard], x)
            idx = os.path.join(base, "idx")
            tl.build_index([shard], idx, check=0)
            mnt = os.path.join(base, "mnt")
            os.mkdir(mnt)
            with self.kmount(idx, mnt) as m:
                self.assertEqual(m.fstype, "erofs", m.stderr)
                got = tl.walk_reference(mnt)
            self.assert_same(tl.walk_reference(x), got, what="seed %d" % seed)

    def test_tar_corpus_equals_gnu_tar_extraction(self):
        archives = []
        for dirpath, _, names in os.walk(corpus.corpus_dir()):
            archives += [os.path.join(dirpath, n) for n in names if n.endswith((".tar", ".pax"))]
        self.assertTrue(archives, "no tar corpus")
        mounted = 0
        for archive in sorted(archives):
            base = self.scratch("corpus-%d" % mounted)
            idx = os.path.join(base, "idx")
            build = tl.run_shardfs("index", "build", "-q", "--out", idx, archive)
            if build.returncode != 0:
                continue  # Refused by index build: tests/corpus/OUTCOMES.md says which.
            x = os.path.join(base, "x")
            os.mkdir(x)
            tar_ok = subprocess.run(["tar", "-xf", archive, "-C", x], capture_output=True)
            mnt = os.path.join(base, "mnt")
            os.mkdir(mnt)
            with self.kmount(idx, mnt) as m:
                self.assertEqual(m.fstype, "erofs", "%s: %s" % (archive, m.stderr))
                ours = corpus.extracted_tree(mnt)
            theirs = corpus.extracted_tree(x)
            for path, entry in theirs.items():
                self.assertEqual(ours.get(path), entry, "%s: %r" % (archive, path))
            if tar_ok.returncode == 0:
                self.assertEqual(sorted(ours), sorted(theirs), archive)
            mounted += 1
        self.assertGreater(mounted, 10, "corpus archives mounted")

    def three_shard_index(self, name, files=60):
        base = self.scratch(name)
        src = os.path.join(base, "src")
        rnd = random.Random(3)
        for c in range(6):
            os.makedirs(os.path.join(src, "class%d" % c, "sub"))
        for i in range(files):
            p = os.path.join(src, "class%d" % (i % 6), "sub" if i % 4 == 0 else "",
                             "s%04d.bin" % i)
            with open(p, "wb") as f:
                f.write(rnd.randbytes(rnd.randrange(0, 30000)))
        shards = tl.tar_into_shards(src, base, 3)
        idx = os.path.join(base, "idx")
        tl.build_index(shards, idx, check=0)
        return base, idx, shards

    def test_views_and_ranks_equal_the_fuse_mount(self):
        base, idx, _ = self.three_shard_index("views")
        renames = os.path.join(base, "renames")
        tl.write_lines(renames, ["class2\trenamed/deeper", "class3/sub\tclass0/moved"])
        tl.view_create(idx, "cut", "--exclude", "class1", "--exclude", "*7.bin",
                       "--rename-map", renames, check=0)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        cases = ["view=cut"] + ["view=cut,rank=%d,world=3" % k for k in range(3)]
        cases += ["rank=%d,world=3" % k for k in range(3)]
        per_rank = {}
        for opts in cases:
            with tl.Mount(idx, mnt, options=opts):
                want = tl.walk_reference(mnt)
            with self.kmount(idx, mnt, options=opts) as m:
                self.assertEqual(m.fstype, "erofs", m.stderr)
                got = tl.walk_reference(mnt)
            self.assertTrue(len(want) > 3, opts)
            self.assert_same(want, got, what=opts)
            if opts.startswith("view=cut,rank"):
                per_rank[opts] = {p for p, e in got.items() if e.type == "file"}
        # The ranks split the view's samples (here a file each): disjoint, as
        # many on each, and together the view but for the trimmed rest.
        with self.kmount(idx, mnt, options="view=cut"):
            whole = {p for p, e in tl.walk_reference(mnt).items() if e.type == "file"}
        n = len(tl.samples_of(whole))
        union = set()
        for opts, files in per_rank.items():
            self.assertFalse(union & files, "a file on two ranks")
            self.assertEqual(len(tl.samples_of(files)), n // 3, opts)
            union |= files
        self.assertTrue(union <= whole)
        self.assertEqual(len(tl.samples_of(whole - union)), n % 3, "trimmed")

    def loops_of(self, under):
        """Loop devices whose backing file is below `under`."""
        found = []
        for name in os.listdir("/sys/block"):
            try:
                with open("/sys/block/%s/loop/backing_file" % name) as f:
                    if f.read().strip().startswith(under):
                        found.append(name)
            except OSError:
                pass
        return found

    def test_loop_devices_before_6_12(self):
        """kernel_devices=loop: what kernels 6.4 to 6.11 get (auto picks it
        there): the image and every shard as read-only loop devices, gone
        once unmounted."""
        base = self.scratch("loop")
        src = os.path.join(base, "src")
        os.mkdir(src)
        make_tree(src, 11)
        shards = tl.tar_into_shards(src, base, 3)
        x = os.path.join(base, "x")
        untar(shards, x)
        idx = os.path.join(base, "idx")
        tl.build_index(shards, idx, check=0)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with self.kmount(idx, mnt, options="kernel_devices=loop") as m:
            self.assertIn("as loop devices", m.stderr)
            self.assertEqual(len(self.loops_of(self.tmp)), 4, "the image and 3 shards")
            got = tl.walk_reference(mnt)
            st = tl.run_shardfs("stats", mnt, check=0).stdout.decode()
            self.assertRegex(st, r"^path: kernel \(EROFS image .*\.erofs")
        self.assert_same(tl.walk_reference(x), got, what="loop")
        self.assertTrue(tl.wait_until(lambda: not self.loops_of(self.tmp), timeout=10),
                        self.loops_of(self.tmp))

    def test_direct_io_keeps_the_shards_out_of_the_page_cache(self):
        base, idx, shards = self.three_shard_index("directio", files=120)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)

        def cached_pages(path):
            out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "PAGES", path],
                                 capture_output=True, check=True).stdout
            return int(out.split()[0])
        for opts, shard_cached in (("kernel_directio", False), (None, True)):
            with self.kmount(idx, mnt, options=opts) as m:
                self.assertEqual(m.fstype, "erofs", m.stderr)
                subprocess.run(["sh", "-c", "sync && echo 1 > /proc/sys/vm/drop_caches"],
                               check=True)
                self.assertEqual(sum(cached_pages(s) for s in shards), 0, "not dropped")
                ref = tl.walk_reference(mnt)
                self.assertGreater(sum(e.size for e in ref.values() if e.type == "file"), 10**6)
                pages = sum(cached_pages(s) for s in shards)
                self.assertEqual(pages > 0, shard_cached, "%s: %d shard pages" % (opts, pages))

    def test_a_thousand_shards(self):
        base = self.scratch("many")
        shards = []
        want = {}
        os.makedirs(os.path.join(base, "shards"))
        for i in range(1000):
            rel = "d%03d/f%04d.txt" % (i // 100, i)
            data = (b"shard %d\n" % i) * (i % 7 + 1)
            # One pax member per shard, written here: a thousand `tar` runs
            # took most of this test's time, and what it checks is the
            # kernel mount of a thousand shards, not their writer.
            shard = os.path.join(base, "shards", "s%04d.tar" % i)
            with tarfile.open(shard, "w", format=tarfile.PAX_FORMAT) as tf:
                ti = tarfile.TarInfo(rel)
                ti.size, ti.mode, ti.mtime = len(data), 0o644, tl.BASE_TIME_S
                tf.addfile(ti, io.BytesIO(data))
            shards.append(shard)
            want[rel] = data
        idx = os.path.join(base, "idx")
        tl.build_index([os.path.join(base, "shards")], idx, check=0)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with self.kmount(idx, mnt) as m:
            self.assertEqual(m.fstype, "erofs", m.stderr)
            self.assertIn("1000 shards", m.stderr)
            for rel, data in want.items():
                with open(os.path.join(mnt, rel), "rb") as f:
                    self.assertEqual(f.read(), data, rel)

    def fallback(self, idx, mnt, reason, preexec=None, options=None, env=None):
        """--kernel refuses with `reason` and mounts nothing; --kernel=auto
        says why in one line and mounts with FUSE."""
        m = self.kmount(idx, mnt, options=options, preexec=preexec, env=env)
        with self.assertRaises(tl.MountError) as cm:
            with m:
                pass
        self.assertRegex(str(cm.exception), reason)
        self.assertIsNone(tl.mount_fstype(mnt))
        with self.kmount(idx, mnt, when="auto", options=options, preexec=preexec, env=env) as m:
            self.assertEqual(m.fstype, "fuse.shardfs", m.stderr)
            lines = [line for line in m.stderr.splitlines() if "not with the kernel" in line]
            self.assertEqual(len(lines), 1, m.stderr)
            self.assertRegex(lines[0], reason)
            self.assertRegex(lines[0], "mounting with FUSE")
            self.assertTrue(os.listdir(mnt))

    def test_fallbacks(self):
        base, idx, shards = self.three_shard_index("fallbacks")
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        self.fallback(idx, mnt, r"verify=first\|always", options="verify=always")
        self.fallback(idx, mnt, r"uid, gid and umask", options="uid=5")
        # As nobody: no CAP_SYS_ADMIN. FUSE mounts as nobody need a
        # mountpoint and an index nobody can reach.
        os.chmod(self.tmp, 0o755)
        for d in (base, os.path.dirname(base)):
            os.chmod(d, 0o755)
        user_mnt = os.path.join(base, "user-mnt")
        os.mkdir(user_mnt)
        os.chown(user_mnt, 65534, 65534)

        def as_nobody():
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        env = dict(os.environ, HOME=base, XDG_RUNTIME_DIR="")
        # The binary where nobody can run it (a checkout may sit in a 0700
        # directory).
        binary = os.path.join(base, "shardfs")
        shutil.copy2(tl.SHARDFS, binary)
        os.chmod(binary, 0o755)
        m = tl.KernelMount(idx, user_mnt, preexec=as_nobody, env=env, shardfs=binary)
        with self.assertRaises(tl.MountError) as cm:
            with m:
                pass
        self.assertRegex(str(cm.exception), r"needs root \(CAP_SYS_ADMIN\)")
        # --kernel=auto says why and mounts with FUSE. Where /dev/fuse is
        # not open to other users (as on the CI machines: crw-------), no
        # FUSE mount can be made as nobody either, and FUSE's own error
        # must follow the line.
        auto = tl.KernelMount(idx, user_mnt, when="auto", preexec=as_nobody, env=env,
                              shardfs=binary)
        reason = r"not with the kernel: .*needs root \(CAP_SYS_ADMIN\); mounting with FUSE"
        if os.stat("/dev/fuse").st_mode & 0o006 == 0o006:
            with auto as m:
                self.assertEqual(m.fstype, "fuse.shardfs", m.stderr)
                self.assertRegex(m.stderr, reason)
                self.assertTrue(os.listdir(user_mnt))
        else:
            with self.assertRaises(tl.MountError) as cm:
                with auto:
                    pass
            self.assertRegex(str(cm.exception), reason + r"\n.*failed to open /dev/fuse")
        # A FIFO where a shard should be: refused at once, never waited on.
        os.rename(shards[2], shards[2] + ".away")
        os.mkfifo(shards[2])
        try:
            self.fallback(idx, mnt, r"shard .*hard-002.tar is not the file indexed.*is a FIFO")
        finally:
            os.unlink(shards[2])
            os.rename(shards[2] + ".away", shards[2])
        # A shard changed since it was indexed: the kernel would read it
        # unchecked.
        st = os.stat(shards[1])
        os.utime(shards[1], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        try:
            self.fallback(idx, mnt, r"shard .*s?hard-001.tar is not the file indexed")
        finally:
            os.utime(shards[1], ns=(st.st_atime_ns, st.st_mtime_ns))

    def test_a_remote_shard_falls_back(self):
        base = self.scratch("remote")
        src = os.path.join(base, "src")
        os.makedirs(os.path.join(src, "d"))
        with open(os.path.join(src, "d", "f"), "wb") as f:
            f.write(b"remote bytes\n")
        shard = tl.tar_create(os.path.join(base, "s.tar"), src, ["d"])
        with rs.RangeServer() as server, open(shard, "rb") as f:
            server.put("/s.tar", f.read())
            idx = os.path.join(base, "idx")
            tl.build_index([server.url + "/s.tar"], idx, check=0)
            mnt = os.path.join(base, "mnt")
            os.mkdir(mnt)
            env = dict(os.environ, SHARDFS_S3_ALLOW_HTTP="1")
            self.fallback(idx, mnt, r"d/f is in a remote shard", env=env)

    def test_shard_replaced_while_mounted(self):
        base, idx, shards = self.three_shard_index("replaced")
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with self.kmount(idx, mnt):
            ref = tl.walk_reference(mnt)
            files = sorted(p for p, e in ref.items() if e.type == "file" and e.size > 100)
            # Replaced by a rename: the mount holds the file it was given and
            # goes on reading the old bytes.
            size = os.path.getsize(shards[0])
            with open(shards[0] + ".new", "wb") as f:
                f.write(b"\xee" * size)
            os.rename(shards[0] + ".new", shards[0])
            subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=True)
            after = tl.walk_reference(mnt)
            for p in files:
                self.assertEqual(after[p].sha256, ref[p].sha256, p)
            # Rewritten in place: read as it is now (no checksum, no EIO), as
            # the man page says.
            with open(shards[1], "r+b") as f:
                f.write(b"\xdd" * os.path.getsize(shards[1]))
            subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=True)
            changed = [p for p in files
                       if tl.sha256_file(os.path.join(mnt, os.fsdecode(p))) != ref[p].sha256]
            self.assertTrue(changed, "no file of the rewritten shard read differently")
            for p in changed:
                with open(os.path.join(mnt, os.fsdecode(p)), "rb") as f:
                    self.assertEqual(set(f.read()), {0xdd}, p)

    def secret_and_decoy(self, name, size=196608):
        """A root-only secret in a directory every user may pass through,
        and `nobody`'s decoy: a tar of the same size and mtime (both public),
        indexed. Returns (base, secret, secret bytes, decoy, index)."""
        os.chmod(self.tmp, 0o755)
        base = self.scratch(name)
        os.chmod(base, 0o755)
        vault = os.path.join(base, "vault")
        os.mkdir(vault, 0o711)
        secret = os.path.join(vault, "secret")
        data = random.Random(7).randbytes(size)
        with open(secret, "wb") as f:
            f.write(data)
        os.chmod(secret, 0o600)
        home = os.path.join(base, "home")
        os.makedirs(os.path.join(home, "src", "d"))
        with open(os.path.join(home, "src", "d", "f"), "wb") as f:
            f.write(b"\0" * (size // 2))
        decoy = tl.tar_create(os.path.join(home, "data.tar"), os.path.join(home, "src"), ["d"])
        with open(decoy, "r+b") as f:  # A tar padded with zero blocks is still the tar.
            f.truncate(size)
        os.utime(decoy, ns=(os.stat(secret).st_atime_ns, os.stat(secret).st_mtime_ns))
        idx = os.path.join(home, "idx")
        tl.build_index([decoy], idx, check=0)
        return base, secret, data, decoy, idx

    def assert_secret_not_published(self, idx, mnt, data, reason, options=None, env=None):
        """The kernel mount of `idx` is refused with `reason`, or, were it
        made, shows none of the secret's bytes."""
        m = self.kmount(idx, mnt, options=options, env=env)
        try:
            with m:
                for dirpath, _, names in os.walk(mnt):
                    for n in names:
                        with open(os.path.join(dirpath, n), "rb") as f:
                            got = f.read()
                        self.assertFalse(got and got in data, "the secret's bytes are published")
                self.fail("the kernel mount was made: " + m.stderr)
        except tl.MountError as e:
            self.assertRegex(str(e), reason)

    def test_an_index_of_another_user_cannot_publish_a_root_only_file(self):
        base, secret, data, decoy, idx = self.secret_and_decoy("secret")
        # The index is nobody's; its shard becomes a symlink to the secret.
        for dirpath, dirnames, names in os.walk(os.path.dirname(idx)):
            for n in [dirpath] + [os.path.join(dirpath, x) for x in dirnames + names]:
                os.lchown(n, 65534, 65534)
        os.unlink(decoy)
        os.symlink(secret, decoy)
        os.lchown(decoy, 65534, 65534)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        # Stored relative to nobody's index, reached through a symlink: the
        # path check refuses it.
        self.assert_secret_not_published(idx, mnt, data, r"data.tar is not the file indexed.*"
                                         r"symbolic link")
        # With the path check lifted, the fingerprint still refuses it: the
        # secret's head and tail are not the decoy's.
        self.assert_secret_not_published(idx, mnt, data,
                                         r"data.tar is not the file indexed.*content differs",
                                         options="unsafe_shard_paths")
        # The FUSE path refuses the same index (its reads give EIO).
        with tl.Mount(idx, mnt):
            with self.assertRaises(OSError):
                with open(os.path.join(mnt, "d", "f"), "rb") as f:
                    f.read()
        # Root's own index of the same kind: the symlink is root's choice,
        # the fingerprint still tells the secret from the decoy.
        for dirpath, dirnames, names in os.walk(os.path.dirname(idx)):
            for n in [dirpath] + [os.path.join(dirpath, x) for x in dirnames + names]:
                os.lchown(n, 0, 0)
        self.assert_secret_not_published(idx, mnt, data,
                                         r"data.tar is not the file indexed.*content differs")

    def test_an_index_by_url_names_no_local_file(self):
        base, secret, data, decoy, idx = self.secret_and_decoy("url")
        # Indexed by absolute path (the shard is not beside the index).
        elsewhere = os.path.join(base, "elsewhere")
        os.mkdir(elsewhere)
        shard = os.path.join(elsewhere, "data.tar")
        shutil.copy2(decoy, shard)
        abs_idx = os.path.join(base, "indexes", "abs-idx")  # Not above the shard.
        os.mkdir(os.path.dirname(abs_idx))
        tl.build_index([shard], abs_idx, check=0)
        bundle = os.path.join(base, "index.tar")
        tl.run_shardfs("index", "bundle", abs_idx, bundle, check=0)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with rs.RangeServer() as server, open(bundle, "rb") as f:
            server.put("/index.tar", f.read())
            url = server.url + "/index.tar"
            # The real shard: refused without the option, which says what it risks.
            self.fallback(url, mnt, r"names a file by absolute path.*unsafe_shard_paths")
            # With it, the shard is checked as any other and served.
            with self.kmount(url, mnt, options="unsafe_shard_paths") as m:
                self.assertEqual(m.fstype, "erofs", m.stderr)
                self.assertEqual(tl.read_file(os.path.join(mnt, "d", "f")), b"\0" * (len(data) // 2))
            # The shard a symlink to the secret: refused either way.
            os.unlink(shard)
            os.symlink(secret, shard)
            self.assert_secret_not_published(url, mnt, data, r"unsafe_shard_paths")
            self.assert_secret_not_published(url, mnt, data, r"content differs",
                                             options="unsafe_shard_paths")
        # A local bundle file is a fetched copy too.
        self.assert_secret_not_published(bundle, mnt, data, r"unsafe_shard_paths")

    def test_a_fifo_for_a_sparse_shard_is_refused_at_once(self):
        # A sparse member whose extents are off the 512-byte blocks: its
        # mixed blocks are read from the shard while the image is written.
        archive = os.path.join(CORPUS, "archives", "libarchive",
                               "test_read_format_gtar_sparse_1_13.tar")
        base = self.scratch("fifo")
        shard = os.path.join(base, "sparse.tar")
        shutil.copy2(archive, shard)
        idx = os.path.join(base, "idx")
        tl.build_index([shard], idx, check=0)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with self.kmount(idx, mnt) as m:
            self.assertEqual(m.fstype, "erofs", m.stderr)
        os.rename(shard, shard + ".away")
        os.mkfifo(shard)
        m = self.kmount(idx, mnt, cache_dir=os.path.join(base, "fresh-images"))
        p = subprocess.run(m.argv(), stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
        self.assertNotEqual(p.returncode, 0)
        self.assertIsNone(tl.mount_fstype(mnt))
        self.assertRegex(p.stderr.decode(), r"sparse.tar is not the file indexed.*is a FIFO")

    def test_an_image_is_not_reused_for_a_shard_that_is_not_its_file(self):
        """An image holds blocks read from its shards (an unaligned sparse
        file's, composed), and is found again by name. A shard whose inode
        changed since (a chmod, a write with the mtime set back, a copy put
        in its place) may pass the index's checks: the image is written
        again, which reads and checks those blocks anew."""
        base = self.scratch("stale")
        # The corpus' old GNU sparse members (an extent off the 512-byte
        # blocks), between a padding member and padding zeros: their bytes
        # lie outside the head and tail the fingerprint hashes.
        archive = os.path.join(CORPUS, "archives", "libarchive",
                               "test_read_format_gtar_sparse_1_13.tar")
        with open(archive, "rb") as f:
            middle = f.read()
        span = 68 * 1024
        pad = tarfile.TarInfo("pad.bin")
        pad.size, pad.mtime = span, tl.BASE_TIME_S
        shard = os.path.join(base, "s.tar")
        with open(shard, "wb") as f:
            f.write(pad.tobuf(format=tarfile.GNU_FORMAT) + b"p" * span + middle + b"\0" * span)
        idx = os.path.join(base, "idx")
        tl.build_index([shard], idx, check=0)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        images = os.path.join(base, "images")
        stale = "is not the file the image was made from"

        def mount_and_compare(what):
            """Mounts, compares the sparse file with GNU tar's extraction;
            returns the mount's messages and whether it wrote the image."""
            x = os.path.join(base, "x-" + what)
            untar([shard], x)
            with self.kmount(idx, mnt, cache_dir=images) as m:
                self.assertEqual(m.fstype, "erofs", m.stderr)
                got = tl.sha256_file(os.path.join(mnt, "sparse"))
            self.assertEqual(got, tl.sha256_file(os.path.join(x, "sparse")), what)
            shutil.rmtree(x)
            return m.stderr, re.search(r"kernel image .*: \d+ inodes", m.stderr) is not None

        def flip_sparse_data():
            """Every data byte of the sparse members, flipped in place; the
            size, the fingerprint's spans and (set back) the mtime kept."""
            st = os.stat(shard)
            with tarfile.open(shard) as t:
                sparse = [m for m in t.getmembers() if m.issparse()]
            self.assertTrue(sparse)
            with open(shard, "r+b") as f:
                for m in sparse:
                    f.seek(m.offset_data)
                    data = f.read(sum(n for _, n in m.sparse))
                    f.seek(m.offset_data)
                    f.write(bytes(b ^ 0xff for b in data))
            os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))

        self.assertTrue(mount_and_compare("first")[1])
        err, written = mount_and_compare("unchanged")
        self.assertFalse(written, "the image was not reused: " + err)
        # A chmod: the same bytes, another ctime.
        os.chmod(shard, 0o600)
        err, written = mount_and_compare("chmod")
        self.assertTrue(written and stale in err, err)
        # Rewritten in place: the image is not reused (it would serve the old
        # composed blocks beside the new bytes), and the new one refuses the
        # bytes the index's checksum does not know.
        flip_sparse_data()
        m = self.kmount(idx, mnt, cache_dir=images)
        p = subprocess.run(m.argv(), stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        self.assertIsNone(tl.mount_fstype(mnt))
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr.decode(), stale + r"(.|\n)*sparse: its bytes in shard .* do not "
                         r"match the index's checksum")
        # Its bytes put back: mounted again, the image written anew.
        flip_sparse_data()
        err, written = mount_and_compare("restored")
        self.assertTrue(written, err)
        # Replaced by a copy: the same bytes and mtime, another inode.
        shutil.copy2(shard, shard + ".copy")
        os.rename(shard + ".copy", shard)
        err, written = mount_and_compare("copied")
        self.assertTrue(written and stale in err, err)
        self.assertFalse(mount_and_compare("copied, unchanged")[1])

    def test_copies_of_an_index_never_share_an_image(self):
        base, idx, shards = self.three_shard_index("copies")
        copies = []
        for n in ("a", "b"):
            c = os.path.join(base, "copy-" + n)
            subprocess.run(["cp", "-a", idx, c], check=True)
            copies.append(c)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        images = os.path.join(base, "images")
        # The same view name, each copy its own rules.
        tl.view_create(copies[0], "v", "--exclude", "class1", check=0)
        tl.view_create(copies[1], "v", "--exclude", "class2", check=0)
        # New shards added to each copy under the same version label.
        extra = []
        for n in ("a", "b"):
            src = os.path.join(base, "extra-" + n)
            os.makedirs(os.path.join(src, "added-" + n))
            with open(os.path.join(src, "added-" + n, "f"), "wb") as f:
                f.write(n.encode() * 1000)
            extra.append(tl.tar_create(os.path.join(base, "extra-%s.tar" % n), src,
                                       ["added-" + n]))
        for c, e in zip(copies, extra):
            tl.run_shardfs("index", "add", c, e, check=0)
        for view in ("v", "default"):
            for c in copies:
                with tl.Mount(c, mnt, "view=" + view):
                    want = tl.walk_reference(mnt)
                with self.kmount(c, mnt, cache_dir=images, options="view=" + view) as m:
                    self.assertEqual(m.fstype, "erofs", m.stderr)
                    got = tl.walk_reference(mnt)
                self.assert_same(want, got, what="%s %s" % (c, view))

    def test_image_cache_stats_umount_and_the_mount_helper(self):
        base, idx, _ = self.three_shard_index("cache")
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        images = os.path.join(base, "images")
        with self.kmount(idx, mnt, cache_dir=images) as m:
            self.assertRegex(m.stderr, r"kernel image .*: \d+ inodes, \d+ bytes")
            st = tl.run_shardfs("stats", mnt, check=0).stdout.decode()
            self.assertRegex(st, r"^path: kernel \(EROFS image .*/shardfs-erofs-v1/[0-9a-f]{32}")
        self.assertIsNone(tl.mount_fstype(mnt))
        cache = os.path.join(images, "shardfs-erofs-v1")
        self.assertEqual(stat.S_IMODE(os.stat(cache).st_mode), 0o700)
        made = [n for n in os.listdir(cache) if n.endswith(".erofs")]
        self.assertEqual(len(made), 1, made)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(cache, made[0])).st_mode), 0o600)
        # Mounted again: the image is reused (not written again).
        with self.kmount(idx, mnt, cache_dir=images) as m:
            self.assertNotRegex(m.stderr, r"kernel image")
            p = tl.run_shardfs("umount", mnt)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIsNone(tl.mount_fstype(mnt))
        # Another view is another image.
        tl.view_create(idx, "half", "--exclude", "class1", check=0)
        with self.kmount(idx, mnt, cache_dir=images, options="view=half"):
            js = json.loads(tl.run_shardfs("stats", "--json", mnt, check=0).stdout)
            self.assertEqual(js["path"], "kernel")
        # A FUSE mount's stats say so too.
        with tl.Mount(idx, mnt):
            text = tl.run_shardfs("stats", mnt, check=0).stdout.decode()
            self.assertTrue(text.startswith("path       fuse\n"), text)
            js = json.loads(tl.run_shardfs("stats", "--json", mnt, check=0).stdout)
            self.assertEqual(js["path"], "fuse")
        self.assertEqual(len([n for n in os.listdir(cache) if n.endswith(".erofs")]), 2)
        # fstab / mount(8): -t fuse.shardfs -o kernel.
        helper = os.path.join(os.environ.get("SHARDFS_SOURCE_ROOT", ""), "tools", "cli",
                              "mount.fuse.shardfs")
        env = dict(os.environ, SHARDFS=tl.SHARDFS)
        p = subprocess.run([helper, idx, mnt, "-o", "ro,noauto,kernel,cache_dir=" + images],
                           env=env, capture_output=True, timeout=60)
        try:
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(tl.mount_fstype(mnt), "erofs")
        finally:
            self.assertIsNone(tl.kernel_unmount(mnt))


if __name__ == "__main__":
    tl.main()
