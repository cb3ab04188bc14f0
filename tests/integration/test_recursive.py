#!/usr/bin/env python3
"""index build --recursive: tars inside tars (issue 24), against GNU tar.

The oracle is a two-step GNU tar extraction: `tar -xf outer.tar`, then, in
archive order, each member whose content is a tar (ustar magic and a valid
checksum) is removed and extracted with `tar -xf inner.tar -C DIR`, DIR being
its name (less ".tar" with --strip-recursive-tar-extension), again inside,
down to the depth bound. DIR takes the member's owner and mtime, and its
mode with search permission wherever it grants read (tools/nested_scan.h).
The index (content read from the outer shard at the indexed offsets), the
FUSE mount and torchvision's ImageFolder are compared with that extraction,
using test_tar_semantics.py's writers and comparison.
"""
import bz2
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers as rs  # noqa: E402
import shardfs_testlib as tl  # noqa: E402
import test_tar_semantics as ts  # noqa: E402
from test_tar_semantics import archive, d, f, link, sym, T0  # noqa: E402


def is_tar(data):
    """The oracle's own reading of what counts as a nested tar."""
    if len(data) < 512 or data[257:263] not in (b"ustar\0", b"ustar "):
        return False
    field = data[148:156].replace(b"\0", b" ").strip()
    try:
        stored = int(field, 8)
    except ValueError:
        return False
    h = data[:148] + b" " * 8 + data[156:512]
    return stored in (sum(h), sum(b - 256 if b > 127 else b for b in h))


def tar_names(data):
    """The member names of a tar in archive order, once each, as extracted
    (no leading "./" or "/"); b"" for a member naming the root ("./")."""
    p = subprocess.run(["tar", "-tf", "-"], input=data, stdout=subprocess.PIPE, check=True)
    names = []
    for n in p.stdout.split(b"\n")[:-1]:
        n = n.strip(b"/")
        while n.startswith(b"./"):
            n = n[2:].lstrip(b"/")
        n = b"" if n == b"." else n
        if n not in names:
            names.append(n)
    return names


def two_step_extract(outer, dest, strip=False, depth=4):
    """The oracle (see the module comment). Returns GNU tar's stderr."""
    errs = [ts.tar_extract([outer], dest)]
    mtimes = {}

    def record(root):
        for top, dirs, _ in os.walk(root):
            for n in dirs:
                p = os.path.join(top, n)
                if not os.path.islink(p):
                    mtimes[p] = os.lstat(p).st_mtime_ns
        mtimes[root] = os.lstat(root).st_mtime_ns

    def expand(root, data, level):
        for name in tar_names(data):
            if not name:
                continue
            p = os.path.join(root, os.fsdecode(name))
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as fh:
                inner = fh.read()
            if not is_tar(inner) or level >= depth:
                continue
            st = os.lstat(p)
            os.unlink(p)
            target = p[:-4] if strip and p.lower().endswith(".tar") and len(
                os.path.basename(p)) > 4 else p
            os.makedirs(target, exist_ok=True)
            r = subprocess.run(["tar", "-xf", "-", "-C", target], input=inner,
                               stderr=subprocess.PIPE)
            errs.append(r.stderr.decode(errors="replace"))
            record(target)
            expand(target, inner, level + 1)
            if b"" in tar_names(inner):
                continue  # The inner "./" member described the directory.
            mode = st.st_mode & 0o777
            os.chmod(target, mode | ((mode & 0o444) >> 2))
            os.chown(target, st.st_uid, st.st_gid)
            mtimes[target] = st.st_mtime_ns

    record(dest)
    with open(outer, "rb") as fh:
        expand(dest, fh.read(), 0)
    for p, ns in mtimes.items():
        if os.path.isdir(p) and not os.path.islink(p):
            os.utime(p, ns=(ns, ns))
    return "".join(errs)


def gnu_tar_of(files, mtime=T0):
    """A GNU tar (`tar -cf`) of {name: bytes}, from a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="shardfs-rec-src-") as src:
        for name, data in files.items():
            p = os.path.join(src, name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as fh:
                fh.write(data)
            os.utime(p, (mtime, mtime))
        p = subprocess.run(["tar", "-cf", "-", "--owner=0", "--group=0", "-C", src,
                            *sorted(files)], stdout=subprocess.PIPE, check=True)
        return p.stdout


IMAGEFOLDER = r"""
import json, sys
from torchvision.datasets import ImageFolder
ds = ImageFolder(sys.argv[1], loader=lambda p: p)
root = sys.argv[1].rstrip("/") + "/"
print(json.dumps({"classes": ds.classes,
                  "samples": [[p[len(root):], c] for p, c in ds.samples]}))
"""


class RecursiveTest(tl.ScratchTestCase):
    PREFIX = "shardfs-recursive-"

    compare = ts.TarSemanticsTest.compare

    def write(self, base, name, data):
        p = os.path.join(base, name)
        with open(p, "wb") as fh:
            fh.write(data)
        return p

    def imagenet(self, base, classes=6, per_class=7, seed=24):
        """An ILSVRC2012_img_train.tar-shaped shard: a flat tar of class tars,
        each a flat tar of JPEG-named files of assorted sizes."""
        rnd = random.Random(seed)
        members = {}
        for c in range(classes):
            wnid = "n%08d" % (1440764 + 1000 * c)
            files = {"%s_%d.JPEG" % (wnid, i): rnd.randbytes(rnd.choice([0, 1, 511, 512, 513,
                                                                        3000, 70000]))
                     for i in range(per_class)}
            members[wnid + ".tar"] = gnu_tar_of(files, T0 + c)
        return self.write(base, "ILSVRC2012_img_train.tar", gnu_tar_of(members, T0 + 99))

    def check(self, outer, *extra, strip=False, depth=4, skip_mtime=()):
        """Builds with --recursive (and `extra`), extracts with the oracle and
        compares: the index (content from the shard at its offsets), a build
        forced to spill, the FUSE mount. Returns (idx, extraction, build)."""
        base = self.scratch("c")
        x = os.path.join(base, "x")
        os.mkdir(x)
        two_step_extract(outer, x, strip=strip, depth=depth)
        want = tl.walk_reference(x)
        del want[b""]
        opts = ["--recursive", *extra] + (["--strip-recursive-tar-extension"] if strip else [])
        idx = os.path.join(base, "idx")
        build = tl.build_index([outer], idx, *opts)
        skip = {os.fsencode(s) for s in skip_mtime}
        self.compare(want, ts.indexed(idx), skip)
        # Every entry is a byte range of the outer shard.
        for e in tl.index_entries(idx).values():
            if e["type"] == "file":
                self.assertEqual(e["shard"], os.path.abspath(outer))
                self.assertLessEqual(e["offset"] + e["size"], os.path.getsize(outer))
        # The bounded build (index build --memory) gives the same index.
        spilled = os.path.join(base, "idx-spilled")
        tl.build_index([outer], spilled, *opts, "--memory", "1")
        self.assertEqual(tl.ls_json(spilled), tl.ls_json(idx))
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            got = tl.walk_reference(mnt)
            del got[b""]
            self.compare(want, got, skip)
        # The kernel's mount of the index (mount --kernel) too: nested members
        # are block-aligned ranges of the outer shard like any other.
        kmnt = os.path.join(base, "kmnt")
        os.mkdir(kmnt)
        with tl.KernelMount(idx, kmnt, cache_dir=os.path.join(base, "images")):
            got = tl.walk_reference(kmnt)
            del got[b""]
            self.compare(want, got, skip)
        return idx, x, build

    def test_imagenet_shaped_stripped(self):
        base = self.scratch("in")
        outer = self.imagenet(base)
        idx, x, _ = self.check(outer, strip=True)
        self.assertEqual(sorted(os.listdir(x))[0], "n01440764")
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            root_ns = os.stat(mnt).st_mtime_ns
            # Reads at random offsets and lengths, every byte checked.
            rnd = random.Random(5)
            files = [os.path.join(dp, n) for dp, _, ns in os.walk(x) for n in ns]
            for _ in range(300):
                p = rnd.choice(files)
                with open(p, "rb") as fh:
                    data = fh.read()
                off = rnd.randrange(len(data) + 1)
                n = rnd.randrange(len(data) - off + 2)
                fd = os.open(os.path.join(mnt, os.path.relpath(p, x)), os.O_RDONLY)
                try:
                    self.assertEqual(os.pread(fd, n, off), data[off:off + n], p)
                finally:
                    os.close(fd)
            # torchvision's ImageFolder, unchanged, lists the same samples.
            lists = []
            for root in (x, mnt):
                r = subprocess.run(["/usr/bin/python3", "-c", IMAGEFOLDER, root],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
                lists.append(json.loads(r.stdout))
            self.assertEqual(lists[0], lists[1])
            self.assertEqual(len(lists[1]["classes"]), 6)
            self.assertEqual(len(lists[1]["samples"]), 42)
        # verify: the index against the two-step extraction, byte for byte
        # (the root is implied: the extraction's takes the index's mtime).
        os.utime(x, ns=(root_ns, root_ns))
        v = tl.run_shardfs("verify", "--full", "--quiet", idx, x)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # A view of some classes and its shard list: nested members belong
        # to their outer shard.
        tl.run_shardfs("view", "create", idx, "few", "--include", "n01440764/*",
                       "--include", "n01441764/*", check=0)
        ex = tl.run_shardfs("view", "export", idx, "few", "--format", "shards", check=0)
        self.assertIn(os.fsencode(os.path.abspath(outer)), ex.stdout)

    def test_imagenet_shaped_not_stripped(self):
        base = self.scratch("in")
        outer = self.imagenet(base, classes=3, per_class=4, seed=3)
        idx, x, build = self.check(outer)
        self.assertIn("n01440764.tar", os.listdir(x))
        self.assertTrue(os.path.isdir(os.path.join(x, "n01440764.tar")))
        # Without --recursive, the class tars stay files, as before.
        plain = os.path.join(self.scratch("plain"), "idx")
        tl.build_index([outer], plain)
        self.assertEqual(tl.index_entries(plain)[b"n01440764.tar"]["type"], "file")

    def test_nested_three_deep_and_the_depth_bound(self):
        base = self.scratch("deep")
        inner = gnu_tar_of({"deep.txt": b"deepest\n" * 100})
        middle = gnu_tar_of({"m.txt": b"middle", "c.tar": inner}, T0 + 5)
        top = gnu_tar_of({"t.txt": b"top", "b.tar": middle}, T0 + 6)
        outer = self.write(base, "outer.tar", gnu_tar_of({"a.tar": top, "o.txt": b"o"}, T0 + 7))
        idx, _, _ = self.check(outer)
        self.assertIn(b"a.tar/b.tar/c.tar/deep.txt", tl.index_entries(idx))
        # --recursive-depth 2: c.tar, three levels down, stays a file, with a warning.
        b2 = self.scratch("d2")
        x = os.path.join(b2, "x")
        os.mkdir(x)
        two_step_extract(outer, x, depth=2)
        idx2 = os.path.join(b2, "idx")
        p = tl.run_shardfs("index", "build", "--out", idx2, "--recursive", "--recursive-depth",
                           "2", outer, check=0)
        self.assertRegex(p.stderr, rb"member 'a.tar/b.tar/c.tar' at byte \d+: a tar nested "
                                   rb"deeper than --recursive-depth 2; left as a file")
        want = tl.walk_reference(x)
        del want[b""]
        self.compare(want, ts.indexed(idx2))
        self.assertEqual(tl.index_entries(idx2)[b"a.tar/b.tar/c.tar"]["type"], "file")
        # The options need --recursive.
        p = tl.run_shardfs("index", "build", "--out", os.path.join(b2, "no"),
                           "--recursive-depth", "2", outer, check=2)
        self.assertIn(b"--recursive-depth needs --recursive", p.stderr)
        tl.run_shardfs("index", "build", "--out", os.path.join(b2, "no"), "--recursive",
                       "--recursive-depth", "0", outer, check=2)

    def test_inner_names_and_links_resolve_within_the_inner_tar(self):
        base = self.scratch("names")
        inner = archive(d("sub", mode=0o750, mtime=T0 - 10), f("/abs.txt", "absolute"),
                        f("sub/a", "A", mode=0o600), link("sub/h", "sub/a"),
                        link("/h2", "/sub/a"), sym("s", "sub/a"), sym("up", "../../etc/passwd"))
        outer = self.write(base, "outer.tar", archive(
            f("o.txt", "outer"), f("in.tar", inner, mode=0o640, uid=7, gid=8, mtime=T0 + 3),
            link("again.tar", "in.tar"), f("after", "z")))
        # GNU tar 1.34 leaves "sub" with the time of extraction here (its
        # directory times are not restored after this mix of an absolute
        # name and hard links); the header's mtime is what is compared.
        idx, x, build = self.check(outer, skip_mtime=("in.tar/sub", "again.tar/sub"))
        got = tl.index_entries(idx)
        self.assertEqual(got[b"in.tar/sub"]["mtime_ns"], (T0 - 10) * 10**9)
        self.assertEqual(got[b"in.tar/sub/h"]["inode"], got[b"in.tar/sub/a"]["inode"])
        self.assertEqual(got[b"in.tar/h2"]["inode"], got[b"in.tar/sub/a"]["inode"])
        self.assertEqual(got[b"in.tar/s"]["target"], b"sub/a")
        self.assertEqual(got[b"in.tar/up"]["target"], b"../../etc/passwd")
        self.assertEqual(got[b"in.tar"]["mode"] & 0o777, 0o750)
        self.assertEqual((got[b"in.tar"]["uid"], got[b"in.tar"]["gid"]), (7, 8))
        # A hard link to the nested tar is that tar again (the same bytes).
        self.assertEqual(got[b"again.tar/abs.txt"]["offset"], got[b"in.tar/abs.txt"]["offset"])
        # Names and hard link targets with ".." are left out with a message,
        # as in any shard (GNU tar strips the ".." prefix instead; shardfs
        # refuses such names everywhere): nothing resolves outside the
        # inner tar's directory.
        inner = archive(f("ok", "1"), f("x/../../escape", "no"), link("out", "../o.txt"))
        outer = self.write(base, "dots.tar", archive(f("o.txt", "outer"), f("in.tar", inner)))
        idx = os.path.join(base, "dots-idx")
        p = tl.run_shardfs("index", "build", "--out", idx, "--recursive", outer, check=0)
        err = p.stderr.decode()
        self.assertIn("member 'in.tar/x/../../escape'", err)
        self.assertIn("member 'in.tar/out'", err)
        self.assertEqual(sorted(tl.index_entries(idx)), [b"in.tar", b"in.tar/ok", b"o.txt"])

    def test_an_inner_root_member_describes_the_directory(self):
        # `tar -cf x.tar -C dir .` writes "./" first: like tar -C DIR, it sets
        # the directory's mode, owner and mtime.
        base = self.scratch("root")
        inner = archive(d("./", mode=0o700, uid=3, mtime=T0 - 77), f("./a", "A"))
        outer = self.write(base, "outer.tar", archive(f("x.tar", inner, mode=0o644)))
        idx, _, _ = self.check(outer, strip=True)
        got = tl.index_entries(idx)
        self.assertEqual((got[b"x"]["mode"] & 0o777, got[b"x"]["uid"]), (0o700, 3))
        self.assertEqual(got[b"x"]["mtime_ns"], (T0 - 77) * 10**9)

    def test_a_name_clash_made_by_stripping(self):
        base = self.scratch("clash")
        inner = gnu_tar_of({"y": b"from the tar"}, T0 + 1)
        # a/ first, then a.tar: the directories merge; the later (a.tar's)
        # attributes win. b (a file) first, then b.tar: the file is replaced.
        # c.tar first, then a file c: refused as tar refuses a file over a
        # directory with entries.
        outer = self.write(base, "outer.tar", archive(
            d("a", mode=0o700, mtime=T0 - 5), f("a/x", "x"), f("a.tar", inner, mode=0o644),
            f("b", "file"), f("b.tar", inner, mode=0o600, mtime=T0 + 9),
            f("c.tar", inner), f("c", "late file")))
        idx = os.path.join(base, "idx")
        p = tl.build_index([outer], idx, "--recursive", "--strip-recursive-tar-extension")
        got = tl.index_entries(idx)
        self.assertEqual(sorted(got), [b"a", b"a/x", b"a/y", b"b", b"b/y", b"c", b"c/y"])
        self.assertEqual(got[b"a"]["mode"] & 0o777, 0o755)
        self.assertEqual(got[b"b"]["type"], "dir")
        self.assertEqual(got[b"b"]["mode"] & 0o777, 0o700)
        self.assertEqual(got[b"b"]["mtime_ns"], (T0 + 9) * 10**9)
        self.assertEqual(got[b"c"]["type"], "dir")
        self.assertIn(b"cannot replace directory 'c', which has entries", p.stderr)
        spilled = os.path.join(base, "spilled")
        tl.build_index([outer], spilled, "--recursive", "--strip-recursive-tar-extension",
                       "--memory", "1")
        self.assertEqual(tl.ls_json(spilled), tl.ls_json(idx))

    def test_refusals(self):
        base = self.scratch("refuse")
        inner = gnu_tar_of({"f": b"data" * 300})
        gz = subprocess.run(["gzip", "-c"], input=inner, stdout=subprocess.PIPE,
                            check=True).stdout
        zbuf = io.BytesIO()
        with zipfile.ZipFile(zbuf, "w") as z:
            z.writestr("f", b"zipped")
        cases = {
            "gz": (archive(f("ok.txt", "1"), f("data.tgz", gz)), "a compressed tar"),
            # By content: a bzip2 stream that decodes to a tar, whatever its name.
            "bz2": (archive(f("blob", bz2.compress(inner))), "a compressed tar"),
            "zip": (archive(f("d/pics.zip", zbuf.getvalue())), "a zip"),
        }
        for name, (data, what) in cases.items():
            with self.subTest(name):
                outer = self.write(base, name + ".tar", data)
                out = os.path.join(base, name + "-idx")
                p = tl.run_shardfs("index", "build", "--out", out, "--recursive", outer,
                                   check=1)
                self.assertRegex(p.stderr.decode(),
                                 r"shard %s: member '[^']+' at byte \d+: %s inside a tar is "
                                 r"not supported yet" % (outer, what))
                self.assertFalse(os.path.exists(out))
                # Without --recursive it stays a file, as before.
                tl.build_index([outer], out)
        # A gzip that is not a tar, and a zip-format file not named .zip, are files.
        outer = self.write(base, "files.tar", archive(
            f("a.json.gz", subprocess.run(["gzip", "-c"], input=b"{}" * 500,
                                          stdout=subprocess.PIPE).stdout),
            f("w.npz", zbuf.getvalue())))
        out = os.path.join(base, "files-idx")
        tl.build_index([outer], out, "--recursive")
        self.assertEqual({e["type"] for e in tl.index_entries(out).values()}, {"file"})
        # The entry bound.
        outer = self.write(base, "many.tar", archive(
            f("a.tar", gnu_tar_of({"f%d" % i: b"x" for i in range(20)}))))
        out = os.path.join(base, "many-idx")
        p = tl.run_shardfs("index", "build", "--out", out, "--recursive",
                           "--recursive-max-entries", "10", outer, check=1)
        self.assertIn(b"more than 10 entries (--recursive-max-entries)", p.stderr)
        self.assertIn(os.fsencode(outer), p.stderr)
        self.assertFalse(os.path.exists(out))
        tl.build_index([outer], out, "--recursive", "--recursive-max-entries", "20")
        # A damaged inner tar: refused, naming the shard and the member.
        bad = bytearray(gnu_tar_of({"f1": b"1" * 600, "f2": b"2"}))
        bad[1536 + 100:1536 + 108] = b"garbage!"
        outer = self.write(base, "bad.tar", archive(f("in.tar", bytes(bad))))
        p = tl.run_shardfs("index", "build", "--out", os.path.join(base, "bad-idx"),
                           "--recursive", outer, check=1)
        self.assertRegex(p.stderr.decode(), r"shard %s: member 'in.tar' at byte 0 \(a nested "
                                            r"tar" % outer)

    def test_ranks_take_whole_outer_shards(self):
        # A nested member belongs to its outer shard: a rank's share (whole
        # shards, index/rank_partition.h) holds whole class tars.
        base = self.scratch("ranks")
        shards = []
        for k in range(2):
            part = os.path.join(base, "p%d" % k)
            os.mkdir(part)
            files = {"n%d%d.tar" % (k, c): gnu_tar_of({"s%d.JPEG" % i: b"%d%d%d" % (k, c, i)
                                                       for i in range(3)}) for c in range(2)}
            shards.append(self.write(part, "train-%d.tar" % k, gnu_tar_of(files)))
        idx = os.path.join(base, "idx")
        tl.build_index(shards, idx, "--recursive", "--strip-recursive-tar-extension")
        seen = []
        for rank in range(2):
            out = os.path.join(base, "rank%d" % rank)
            tl.run_shardfs("view", "export", idx, "default", "--format", "index", "--out", out,
                           "--rank", rank, "--world", 2, check=0)
            entries = tl.index_entries(out)
            files = sorted(k for k, e in entries.items() if e["type"] == "file")
            self.assertEqual(len(files), 6, files)
            self.assertEqual(len({entries[k]["shard"] for k in files}), 1)
            seen += files
        self.assertEqual(sorted(seen), sorted(
            b"n%d%d/s%d.JPEG" % (k, c, i) for k in range(2) for c in range(2) for i in range(3)))

    def test_a_remote_outer_shard(self):
        # Over HTTP: the scan reads the shard once; a mount reads nested
        # members as byte ranges through the chunk cache.
        base = self.scratch("remote")
        served = os.path.join(base, "served")
        os.mkdir(served)
        outer = self.imagenet(served, classes=3, per_class=5, seed=9)
        x = os.path.join(base, "x")
        os.mkdir(x)
        two_step_extract(outer, x, strip=True)
        want = tl.walk_reference(x)
        del want[b""]
        with rs.Nginx(served) as web:
            idx = os.path.join(base, "idx")
            url = web.url + "/" + os.path.basename(outer)
            tl.build_index([url], idx, "--recursive", "--strip-recursive-tar-extension")
            entries = tl.index_entries(idx)
            self.assertEqual(entries[b"n01440764/n01440764_0.JPEG"]["shard"], url)
            mnt = os.path.join(base, "mnt")
            os.mkdir(mnt)
            with tl.Mount(idx, mnt, "chunk_size=64K,cache_size=8M"):
                got = tl.walk_reference(mnt)
        del got[b""]
        self.compare(want, got)

    def test_index_add(self):
        base = self.scratch("add")
        one = self.write(base, "one.tar", gnu_tar_of(
            {"n1.tar": gnu_tar_of({"a.JPEG": b"a"}), "n2.tar": gnu_tar_of({"b.JPEG": b"b"})}))
        two = self.write(base, "two.tar", gnu_tar_of({"n3.tar": gnu_tar_of({"c.JPEG": b"c"})}))
        idx = os.path.join(base, "idx")
        tl.build_index([one], idx, "--recursive", "--strip-recursive-tar-extension")
        tl.run_shardfs("index", "add", "--quiet", "--recursive",
                       "--strip-recursive-tar-extension", idx, two, check=0)
        got = tl.index_entries(idx)
        self.assertEqual(sorted(k for k, e in got.items() if e["type"] == "file"),
                         [b"n1/a.JPEG", b"n2/b.JPEG", b"n3/c.JPEG"])
        self.assertEqual(got[b"n3/c.JPEG"]["shard"], os.path.abspath(two))
        both = os.path.join(base, "both")
        tl.build_index([one, two], both, "--recursive", "--strip-recursive-tar-extension")
        self.assertEqual(tl.ls_json(both), tl.ls_json(idx))


if __name__ == "__main__":
    tl.main()
