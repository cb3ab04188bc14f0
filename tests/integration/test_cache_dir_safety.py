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

The reference is the source files the shard was made from (GNU tar's input).
Local shards only: no server is needed.
"""

import hashlib
import os
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

SUBDIR = "shardfs-chunks-v2"
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


if __name__ == "__main__":
    tl.main()
