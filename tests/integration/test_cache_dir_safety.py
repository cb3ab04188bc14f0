#!/usr/bin/env python3
"""`-o cache_dir`: what a mount promises about its chunk cache directory.

- A shard rewritten at the same size with a changed member in the middle
  (first and last 64 KiB, hence the fingerprint, unchanged) is read as it is
  now after a remount, whether it was re-indexed or not: chunks cached from
  the old bytes are never served again.
- A cache_dir another user owns (pre-created in a shared sticky directory,
  with a forged chunk planted), or a symbolic link, is refused: the mount
  exits 1 with a message naming the directory and the reason.
- Files in cache_dir that shardfs did not write survive a mount.
- The directories shardfs makes are 0700, its files 0600, whatever the umask.
- Without cache_dir, on network storage, a default cache root another user
  made first (/var/tmp/shardfs-UID as their 0777 directory, or as their
  symbolic link into the victim's own files) is passed over as a cache_dir
  would be refused: nothing is written there, the mount warns once naming
  the root and the reason, and reads right from memory.

The reference is the source files the shard was made from (GNU tar's input).
Local shards only: no server is needed.
"""

import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

SUBDIR = "shardfs-chunks-v3"
MTIME = tl.BASE_TIME_S
# ustar: no pax records (posix adds the atime and ctime tar saw, which differ
# between two runs and would change the shard's first bytes).
USTAR = ("--format=ustar",)
# Members in tar order: head, mid, tail. head.bin and tail.bin keep the shard's
# first and last 64 KiB fixed; mid.bin is what changes.
SIZES = {"head.bin": 100 * 1024, "mid.bin": 128 * 1024, "tail.bin": 100 * 1024}


def write_member(src, name, data):
    path = os.path.join(src, name)
    with open(path, "wb") as f:
        f.write(data)
    os.utime(path, (MTIME, MTIME))  # The same header bytes for every version.


def read_tree(root):
    """{name: SHA-256} of the members as files under `root` (a mount, or the
    source directory tar archived); digests keep a failure's diff short."""
    out = {}
    for name in SIZES:
        with open(os.path.join(root, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def chunk_files(cache):
    """The chunk files in the cache's subdirectory. Every stored chunk gets a
    new name (its generation number), so an unchanged set after a mount
    means every read was answered from chunks already there."""
    return {n for n in os.listdir(os.path.join(cache, SUBDIR)) if n.endswith(".chunk")}


def read_tree_as(uid, root):
    """read_tree(root) in a child that runs as `uid` (a FUSE mount without
    allow_other answers its own user only, root included)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.write(w, json.dumps(read_tree(root)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise AssertionError("reading %s as uid %d failed" % (root, uid))
    return json.loads(out)


def squat_default_root(plant):
    """Makes the default cache root of an unused uid, /var/tmp/shardfs-UID,
    with `plant(path, uid)` (which must create it, failing if it exists) and
    gives it to uid 65534, as that user would have made it first in the
    shared sticky directory. Returns (uid, path); the caller removes path."""
    for uid in range(4242, 4342):
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        path = "/var/tmp/shardfs-%d" % uid
        try:
            plant(path, uid)
        except FileExistsError:
            continue
        os.lchown(path, 65534, 65534)
        return uid, path
    raise AssertionError("no unused uid in 4242..4341 without a /var/tmp/shardfs-UID")


def as_nobody(*argv):
    """Runs argv as user nobody (group nogroup, no supplementary groups)."""
    cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if p.returncode != 0:
        raise AssertionError("%r exited %d: %s" % (cmd, p.returncode, p.stderr.decode()))


class CacheDirSafetyTest(tl.ScratchTestCase):
    PREFIX = "shardfs-cache-dir-"

    def make_shard(self):
        """A ~330 KiB shard of three members, its index, and its source."""
        base = self.scratch("shard")
        src = os.path.join(base, "src")
        os.mkdir(src)
        for name, size in SIZES.items():
            write_member(src, name, os.urandom(size))
        shard = os.path.join(base, "s.tar")
        tl.tar_create(shard, src, sorted(SIZES), USTAR)
        idx = os.path.join(base, "s.idx")
        tl.build_index([shard], idx)
        return base, src, shard, idx

    def rewrite_mid(self, src, shard):
        """Rewrites mid.bin (same size and mtime, new bytes) and the shard in
        place; checks that the shard kept its size and both 64 KiB ends."""
        with open(shard, "rb") as f:
            old = f.read()
        write_member(src, "mid.bin", os.urandom(SIZES["mid.bin"]))
        fresh = shard + ".new"
        tl.tar_create(fresh, src, sorted(SIZES), USTAR)
        with open(fresh, "rb") as f:
            new = f.read()
        os.unlink(fresh)
        self.assertGreater(len(old), 256 * 1024)
        self.assertEqual(len(new), len(old))
        self.assertEqual(new[:64 * 1024], old[:64 * 1024])
        self.assertEqual(new[-64 * 1024:], old[-64 * 1024:])
        self.assertNotEqual(new, old)
        with open(shard, "r+b") as f:  # In place: the same inode.
            f.write(new)

    def source(self, src):
        return read_tree(src)

    def expect_refused(self, idx, options, *wanted):
        """Mounting must fail (exit 1) with a message containing `wanted`."""
        mnt = self.scratch("mnt")
        m = tl.Mount(idx, mnt, options, check_exit=False)
        try:
            with m:
                pass
        except tl.MountError as e:
            message = str(e)
        else:
            self.fail("mounted with -o %s; log:\n%s" % (options, m.final_log()))
        self.assertEqual(m.proc.returncode, 1, message)
        for w in wanted:
            self.assertIn(w, message)

    # -- (a) stale chunks after a rewritten shard -----------------------------

    def test_rewritten_shard_is_read_as_it_is_now(self):
        base, src, shard, idx = self.make_shard()
        cache = os.path.join(base, "cache")
        opts = "chunk_size=64K,cache_size=16M,cache_dir=%s" % cache
        mnt = self.scratch("mnt")
        with tl.Mount(idx, mnt, opts):
            self.assertEqual(read_tree(mnt), self.source(src))
        cached = chunk_files(cache)
        self.assertGreaterEqual(len(cached), 5)
        # Unchanged: read from the chunks already there (the cache is in play).
        with tl.Mount(idx, mnt, opts):
            self.assertEqual(read_tree(mnt), self.source(src))
        self.assertEqual(chunk_files(cache), cached)

        # Rewritten in place and re-indexed.
        self.rewrite_mid(src, shard)
        tl.build_index([shard], idx, "--force")
        with tl.Mount(idx, mnt, opts):
            got = read_tree(mnt)
        self.assertEqual(got, self.source(src), "stale chunks served after a re-index")
        cached = chunk_files(cache)
        with tl.Mount(idx, mnt, opts):
            self.assertEqual(read_tree(mnt), self.source(src))
        self.assertEqual(chunk_files(cache), cached)

        # Rewritten again, not re-indexed (the index still describes it: the
        # members did not move).
        self.rewrite_mid(src, shard)
        with tl.Mount(idx, mnt, opts):
            got = read_tree(mnt)
        self.assertEqual(got, self.source(src), "stale chunks served after a rewrite")

    # -- (b), (c) refused directories ------------------------------------------

    def test_cache_dir_of_another_user_refused(self):
        base, src, shard, idx = self.make_shard()
        if os.geteuid() != 0:
            # Only root can act as another user; /tmp is root's, and shared.
            self.expect_refused(idx, "cache_dir=/tmp", "cache_dir /tmp: owned by uid 0 (root)")
            return
        # nobody must reach the shared directory.
        os.chmod(self.tmp, 0o711)
        os.chmod(base, 0o711)
        shared = os.path.join(base, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        cache = os.path.join(shared, "cache")
        as_nobody("mkdir", "-m", "0755", cache)
        as_nobody("mkdir", "-m", "0755", os.path.join(cache, SUBDIR))
        forged = b"SHFSCHNK" + bytes(56) + b"forged bytes"
        for d in (cache, os.path.join(cache, SUBDIR)):
            as_nobody(sys.executable, "-c",
                      "import sys; open(sys.argv[1], 'wb').write(bytes.fromhex(sys.argv[2]))",
                      os.path.join(d, "0123456789abcdef-0-1.chunk"), forged.hex())
        before = sorted(os.listdir(cache))
        self.expect_refused(idx, "chunk_size=64K,cache_dir=%s" % cache,
                            "cache_dir %s: owned by uid 65534 (nobody)" % cache,
                            "not by this mount's user")
        self.assertEqual(sorted(os.listdir(cache)), before)
        self.assertEqual(os.stat(cache).st_uid, 65534)

    def test_symlinked_cache_dir_refused(self):
        base, src, shard, idx = self.make_shard()
        real = os.path.join(base, "real")
        os.mkdir(real, 0o700)
        link = os.path.join(base, "link")
        os.symlink(real, link)
        self.expect_refused(idx, "cache_dir=%s" % link,
                            "cache_dir %s: a symbolic link, refused" % link)
        self.assertEqual(os.listdir(real), [])

    # -- (d) files of others, (e) modes ---------------------------------------

    def test_user_files_survive_and_modes(self):
        base, src, shard, idx = self.make_shard()
        mine = os.path.join(base, "mine")
        os.mkdir(mine, 0o700)
        files = {
            "tmp-foo": b"a temp file of the user's",
            "tmp-1": b"looks like an old shardfs temp file",
            "x.chunk": os.urandom(5000),
            "00000000000000aa-0-1.chunk": os.urandom(5000),
            "README": b"the user's notes",
        }
        for name, data in files.items():
            with open(os.path.join(mine, name), "wb") as f:
                f.write(data)
        mnt = self.scratch("mnt")
        for _ in range(2):
            with tl.Mount(idx, mnt, "chunk_size=64K,cache_size=16M,cache_dir=%s" % mine):
                self.assertEqual(read_tree(mnt), self.source(src))
        left = set(os.listdir(mine)) - {SUBDIR}
        self.assertEqual(left, set(files))
        for name, data in files.items():
            with open(os.path.join(mine, name), "rb") as f:
                self.assertEqual(f.read(), data, name)

        # A cache_dir shardfs makes, under a umask that would allow anything.
        made = os.path.join(base, "made")
        old = os.umask(0)
        try:
            with tl.Mount(idx, mnt, "chunk_size=64K,cache_size=16M,cache_dir=%s" % made):
                self.assertEqual(read_tree(mnt), self.source(src))
        finally:
            os.umask(old)
        self.assertEqual(stat.S_IMODE(os.lstat(made).st_mode), 0o700)
        self.assertEqual(os.listdir(made), [SUBDIR])
        sub = os.path.join(made, SUBDIR)
        self.assertEqual(stat.S_IMODE(os.lstat(sub).st_mode), 0o700)
        names = os.listdir(sub)
        self.assertTrue([n for n in names if n.endswith(".chunk")], names)
        for n in names:
            st = os.lstat(os.path.join(sub, n))
            self.assertTrue(stat.S_ISREG(st.st_mode), n)
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o600, n)

    # -- (f) a default cache root another user made first ----------------------

    def mount_as(self, uid, idx, mnt, home):
        """Mounts `idx` at `mnt` as `uid` on network storage without
        cache_dir, with $XDG_CACHE_HOME and $HOME set to `home`, reads it as
        that user and unmounts. Returns ({name: digest}, the mount's log).
        /dev/fuse is root's alone on CI machines (crw-------): the daemon
        keeps CAP_SYS_ADMIN and CAP_DAC_OVERRIDE to open and mount it, and is
        uid `uid` otherwise (its effective uid, which the cache root is
        checked against; neither capability passes an owner check)."""
        caps = "+sys_admin,+dac_override"
        argv = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups",
                "--inh-caps=" + caps, "--ambient-caps=" + caps, tl.SHARDFS, "mount", "-f",
                "-o", "storage=network,chunk_size=64K", idx, mnt]
        env = dict(os.environ, XDG_CACHE_HOME=home, HOME=home)
        log = os.path.join(os.path.dirname(mnt), "mount.log")
        with open(log, "wb") as f:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=f, env=env)
        try:
            # In the mount table: root may not stat another user's FUSE mount.
            tl.wait_until(lambda: tl.is_mounted(mnt) or p.poll() is not None, 20)
            self.assertTrue(tl.is_mounted(mnt), tl.read_file(log))
            got = read_tree_as(uid, mnt)
        finally:
            problem = tl.unmount(mnt)
            try:
                code = p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()  # Only the daemon started here.
                code = p.wait(timeout=15)
        text = tl.read_file(log).decode(errors="replace")
        self.assertIsNone(problem, text)
        self.assertEqual(code, 0, text)
        return got, text

    def check_squatted_root(self, plant, reason, *details):
        """A mount as the uid whose default root `plant` squatted: nothing
        is written there, one warning names the root, `reason` and
        `details`, and the files read right (from memory: /var/tmp's root is
        the last)."""
        if os.geteuid() != 0:
            self.skipTest("needs root: acts as two other users")
        base, src, shard, idx = self.make_shard()
        # The victim reaches the index, the shard and the mount.
        os.chmod(self.tmp, 0o711)
        os.chmod(base, 0o755)
        mnt = os.path.join(self.scratch("victim"), "mnt")
        os.mkdir(mnt)
        os.chmod(os.path.dirname(mnt), 0o711)
        # $XDG_CACHE_HOME and $HOME unusable: a regular file.
        not_a_dir = os.path.join(base, "not-a-directory")
        tl.write_file(not_a_dir, b"")
        uid, root = squat_default_root(plant)
        try:
            before = os.lstat(root)
            got, log = self.mount_as(uid, idx, mnt, not_a_dir)
            self.assertEqual(got, self.source(src))
            after = os.lstat(root)
            self.assertEqual((after.st_ino, after.st_uid, after.st_mode),
                             (before.st_ino, before.st_uid, before.st_mode))
            if stat.S_ISDIR(after.st_mode):
                self.assertEqual(os.listdir(root), [], log)
        finally:
            if os.path.islink(root):
                os.unlink(root)
            else:
                shutil.rmtree(root)
        lines = log.splitlines()
        chunks = [line for line in lines if "node-local chunk cache:" in line]
        self.assertEqual(len(chunks), 1, log)
        for want in ("%s: %s" % (root, reason),) + details:
            self.assertIn(want, chunks[0])
        self.assertIn("caching chunks in memory instead", chunks[0])
        # The index's local copy, which looks for a root too, says so once.
        others = [line for line in lines if root in line and line not in chunks]
        self.assertLessEqual(len(others), 1, log)
        self.assertTrue(all("read there" in line for line in others), log)

    def test_default_root_made_by_another_user_passed_over(self):
        def plant(path, uid):
            os.mkdir(path)
            os.chmod(path, 0o777)
        self.check_squatted_root(plant, "owned by uid 65534", "mode 0777")

    def test_default_root_symlinked_by_another_user_passed_over(self):
        # The link points into the victim's own files, where the victim may
        # write: followed, its chunks and index copies would land there.
        home = self.scratch("victim-home")
        target = os.path.join(home, "cache")
        os.mkdir(target, 0o700)

        def plant(path, uid):
            os.symlink(target, path)
            for d in (home, target):
                os.chown(d, uid, uid)
        self.check_squatted_root(plant, "a symbolic link, refused")
        self.assertEqual(os.listdir(target), [])


if __name__ == "__main__":
    tl.main()
