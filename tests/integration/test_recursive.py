#!/usr/bin/env python3
"""index build --recursive: tars inside tars, against GNU tar.

The oracle is a two-step GNU tar extraction: `tar -xf outer.tar`, then, in
archive order, each member whose content is a tar (ustar magic and a valid
checksum) is removed and extracted with `tar -xf inner.tar -C DIR`, DIR being
its name (less ".tar" with --strip-recursive-tar-extension), again inside,
down to the depth bound. DIR takes the member's owner and mtime, and its
mode with search permission wherever it grants read (src/archive/nested_scan.h).
The index (content read from the outer shard at the indexed offsets), the
FUSE mount and torchvision's ImageFolder are compared with that extraction,
using test_tar_semantics.py's writers and comparison.

Zips nest the same way: a member whose content is a zip (an end of central
directory record ending it) is extracted by `unzip -o -q inner.zip -d DIR`
(DIR less ".zip" with --strip-recursive-zip-extension), and an outer zip by
`unzip` before its stored tars are expanded. A deflated member of a nested
zip is checked in the index by inflating its compressed bytes at the indexed
offset of the outer shard.

Compressed tars (.tar.gz, .tar.zst, .tar.xz, .tar.bz2: a member whose content
decodes to a tar) nest as slice shards (index/schema.h): the oracle decodes
them with Python's gzip, bz2 and lzma modules or `zstd -d`, and extracts the
tar with `tar -xf - -C DIR`, DIR less a compressed tar suffix with
--strip-recursive-tar-extension.
"""
import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
import zlib

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


def is_zip(data):
    """The oracle's reading of a nested zip: a local header (or, empty, the
    end record) first, and an end record whose comment ends the data."""
    if data[:4] not in (b"PK\3\4", b"PK\5\6"):
        return False
    at = data.rfind(b"PK\5\6", max(0, len(data) - 22 - 65535))
    while at >= 0:
        if len(data) >= at + 22 and int.from_bytes(data[at + 20:at + 22], "little") == \
                len(data) - at - 22:
            return True
        at = data.rfind(b"PK\5\6", max(0, len(data) - 22 - 65535), at)
    return False


def zip_names(data):
    """The member names of a zip in central directory order, as extracted."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = []
        for n in z.namelist():
            n = os.fsencode(n).strip(b"/")
            if n not in names:
                names.append(n)
        return names


def unzip_into(data, dest):
    """`unzip -o -q` of zip bytes into dest; returns its stderr."""
    with tempfile.NamedTemporaryFile(suffix=".zip") as z:
        z.write(data)
        z.flush()
        r = subprocess.run(["unzip", "-o", "-q", z.name, "-d", dest], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if r.returncode not in (0, 1):
            raise AssertionError("unzip: " + r.stderr.decode(errors="replace"))
        return r.stderr.decode(errors="replace")


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


# What --strip-recursive-tar-extension strips from a compressed tar's name
# (the first that matches).
CTAR_SUFFIXES = (".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tzst", ".tar.xz", ".txz",
                 ".tar.bz2", ".tbz2", ".tbz", ".tar")


def decompress(data):
    """The decoded bytes of a gzip, bzip2, xz or zstd stream; None for
    anything else, or a stream that does not decode."""
    try:
        if data[:2] == b"\x1f\x8b":
            return gzip.decompress(data)
        if data[:3] == b"BZh":
            return bz2.decompress(data)
        if data[:6] == b"\xfd7zXZ\0":
            return lzma.decompress(data)
        # zstd, or a skippable frame first (pzstd's).
        if data[:4] == b"\x28\xb5\x2f\xfd" or (data[:1] and data[0] & 0xf0 == 0x50 and
                                               data[1:4] == b"\x2a\x4d\x18"):
            return subprocess.run(["zstd", "-dcq"], input=data, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, check=True).stdout
    except (OSError, EOFError, lzma.LZMAError, subprocess.CalledProcessError):
        return None
    return None


def two_step_extract(outer, dest, strip=False, depth=4, strip_zip=False, compressed=False):
    """The oracle (see the module comment). Returns GNU tar's stderr.
    `compressed`: compressed tars are expanded too."""
    with open(outer, "rb") as fh:
        outer_zip = is_zip(fh.read())
    errs = [unzip_into(tl.read_file(outer), dest) if outer_zip else ts.tar_extract([outer], dest)]
    mtimes = {}

    def record(root):
        for top, dirs, _ in os.walk(root):
            for n in dirs:
                p = os.path.join(top, n)
                if not os.path.islink(p):
                    mtimes[p] = os.lstat(p).st_mtime_ns
        mtimes[root] = os.lstat(root).st_mtime_ns

    def expand(root, data, level):
        for name in (zip_names(data) if is_zip(data) else tar_names(data)):
            if not name:
                continue
            p = os.path.join(root, os.fsdecode(name))
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as fh:
                inner = fh.read()
            kind = "tar" if is_tar(inner) else "zip" if is_zip(inner) else None
            plain = decompress(inner) if kind is None and compressed else None
            if plain is not None and is_tar(plain):
                kind = "ctar"
            if kind is None or level >= depth:
                continue
            st = os.lstat(p)
            os.unlink(p)
            ext, stripping = (".tar", strip) if kind == "tar" else (".zip", strip_zip)
            target = p[:-4] if stripping and p.lower().endswith(ext) and len(
                os.path.basename(p)) > 4 else p
            if kind == "ctar":
                target = p
                for suffix in CTAR_SUFFIXES if strip else ():
                    if p.lower().endswith(suffix) and len(os.path.basename(p)) > len(suffix):
                        target = p[:-len(suffix)]
                        break
            os.makedirs(target, exist_ok=True)
            if kind == "zip":
                errs.append(unzip_into(inner, target))
            elif kind == "ctar":
                # Decoded by the codec's own tool or module (GNU tar's magic
                # test misses pzstd's leading skippable frame), then tar -x.
                r = subprocess.run(["tar", "-xf", "-", "-C", target], input=plain,
                                   stderr=subprocess.PIPE)
                errs.append(r.stderr.decode(errors="replace"))
                inner = plain
            else:
                r = subprocess.run(["tar", "-xf", "-", "-C", target], input=inner,
                                   stderr=subprocess.PIPE)
                errs.append(r.stderr.decode(errors="replace"))
            record(target)
            expand(target, inner, level + 1)
            if kind in ("tar", "ctar") and b"" in tar_names(inner):
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


def damage(path, offsets):
    """Flips the bits of the bytes of `path` at `offsets` (0x5A), in place."""
    with open(path, "r+b") as fh:
        for i in offsets:
            fh.seek(i)
            b = fh.read(1)[0]
            fh.seek(i)
            fh.write(bytes([b ^ 0x5A]))


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


def indexed(idx):
    """ts.indexed, with a deflated member's content inflated from its
    compressed bytes at the indexed offset (and its CRC-32 checked)."""
    out = ts.indexed(idx)
    for path, e in tl.index_entries(idx).items():
        if e.get("method") != "deflate":
            continue
        with open(e["shard"], "rb") as fh:
            fh.seek(e["compressed_offset"])
            data = zlib.decompress(fh.read(e["compressed_size"]), -15)
        assert len(data) == e["size"], path
        assert "%08x" % zlib.crc32(data) == e["crc32"], path
        out[path] = out[path]._replace(sha256=hashlib.sha256(data).hexdigest())
    return out


# One interpreter lists every root given (importing torch takes seconds).
IMAGEFOLDER = r"""
import json, sys
from torchvision.datasets import ImageFolder
out = []
for arg in sys.argv[1:]:
    ds = ImageFolder(arg, loader=lambda p: p)
    root = arg.rstrip("/") + "/"
    out.append({"classes": ds.classes,
                "samples": [[p[len(root):], c] for p, c in ds.samples]})
print(json.dumps(out))
"""


def image_folder_lists(*roots):
    """[{classes, samples}] per root, as torchvision's ImageFolder lists them
    (Debian's /usr/bin/python3, in one process)."""
    r = subprocess.run(["/usr/bin/python3", "-c", IMAGEFOLDER, *roots],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if r.returncode != 0:
        raise AssertionError("ImageFolder: " + r.stderr.decode(errors="replace"))
    return json.loads(r.stdout)


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

    def check(self, outer, *extra, strip=False, depth=4, skip_mtime=(), strip_zip=False):
        """Builds with --recursive (and `extra`), extracts with the oracle and
        compares: the index (content from the shard at its offsets), a build
        forced to spill, the FUSE mount. Returns (idx, extraction, build)."""
        base = self.scratch("c")
        x = os.path.join(base, "x")
        os.mkdir(x)
        two_step_extract(outer, x, strip=strip, depth=depth, strip_zip=strip_zip)
        want = tl.walk_reference(x)
        del want[b""]
        opts = ["--recursive", *extra] + (["--strip-recursive-tar-extension"] if strip else [])
        opts += ["--strip-recursive-zip-extension"] if strip_zip else []
        idx = os.path.join(base, "idx")
        build = tl.build_index([outer], idx, *opts)
        skip = {os.fsencode(s) for s in skip_mtime}
        self.compare(want, indexed(idx), skip)
        # Every entry is a byte range of the outer shard (a deflated member:
        # its compressed bytes are).
        deflated = 0
        for e in tl.index_entries(idx).values():
            if e["type"] == "file":
                self.assertEqual(e["shard"], os.path.abspath(outer))
                if e.get("method") == "deflate":
                    deflated += 1
                    self.assertLessEqual(e["compressed_offset"] + e["compressed_size"],
                                         os.path.getsize(outer))
                else:
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
        # are block-aligned ranges of the outer shard like any other. A zip's
        # members are not: it refuses them, naming one.
        kmnt = os.path.join(base, "kmnt")
        os.mkdir(kmnt)
        if deflated or is_zip(tl.read_file(outer)) or strip_zip:
            p = tl.run_shardfs("mount", "--kernel", "-o",
                               "cache_dir=" + os.path.join(base, "images"), idx, kmnt, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertRegex(p.stderr, rb"not supported by the kernel mount|not at a 512-byte block")
            self.assertFalse(tl.is_mounted(kmnt))
            return idx, x, build
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
            lists = image_folder_lists(x, mnt)
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
        # Compressed tars are slices now (RecursiveCompressedTarTest): by
        # content, a bzip2 stream that decodes to a tar, whatever its name.
        cases = {
            "gz": (archive(f("ok.txt", "1"), f("data.tgz", gz)), "data.tgz"),
            "bz2": (archive(f("blob", bz2.compress(inner))), "blob"),
        }
        for name, (data, member) in cases.items():
            with self.subTest(name):
                outer = self.write(base, name + ".tar", data)
                out = os.path.join(base, name + "-idx")
                tl.build_index([outer], out, "--recursive")
                got = tl.index_entries(out)
                self.assertEqual(got[os.fsencode(member)]["type"], "dir")
                self.assertEqual(got[os.fsencode(member + "/f")]["size"], 1200)
                # Without --recursive it stays a file, as before.
                tl.build_index([outer], out, "--force")
                self.assertEqual(tl.index_entries(out)[os.fsencode(member)]["type"], "file")
        # A gzip that is not a tar is a file; so is a format built on zip
        # (an .npz: numpy opens it whole), while a .zip is a directory.
        outer = self.write(base, "files.tar", archive(
            f("a.json.gz", subprocess.run(["gzip", "-c"], input=b"{}" * 500,
                                          stdout=subprocess.PIPE).stdout),
            f("w.npz", zbuf.getvalue()), f("w.zip", zbuf.getvalue())))
        out = os.path.join(base, "files-idx")
        tl.build_index([outer], out, "--recursive")
        got = tl.index_entries(out)
        self.assertEqual(got[b"a.json.gz"]["type"], "file")
        self.assertEqual(got[b"w.npz"]["type"], "file")
        self.assertNotIn(b"w.npz/f", got)
        self.assertEqual(got[b"w.zip"]["type"], "dir")
        self.assertEqual(got[b"w.zip/f"]["type"], "file")
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

    def test_ranks_split_the_outer_shards_by_samples(self):
        # A nested member lies in its outer shard, at its offset there: two
        # outer shards of 6 samples each give two ranks of 6 samples one
        # outer shard each (index/rank_partition.h), whole class tars.
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


class RecursiveZipTest(tl.ScratchTestCase):
    """Zips inside tars and tars inside zips."""
    PREFIX = "shardfs-recursive-zip-"

    compare = ts.TarSemanticsTest.compare
    write = RecursiveTest.write
    check = RecursiveTest.check

    def info_zip(self, base, name, files, *args, mtime=T0):
        """An Info-ZIP `zip -r` (with `args`) of {name: bytes}, from a folder."""
        src = tempfile.mkdtemp(prefix="zsrc-", dir=base)
        for n, data in files.items():
            p = os.path.join(src, n)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as fh:
                fh.write(data)
            os.utime(p, (mtime, mtime))
        out = os.path.join(base, name)
        subprocess.run(["zip", "-q", "-r", *args, out, *sorted(files)], cwd=src, check=True)
        return out

    def imagenet_zips(self, base, classes=6, per_class=7, seed=24):
        """ImageNet's shape with class zips by Info-ZIP `zip`: a flat tar of
        class zips, even classes deflated (the files compress by half), odd
        ones stored (zip -0)."""
        rnd = random.Random(seed)
        members = {}
        for c in range(classes):
            wnid = "n%08d" % (1440764 + 1000 * c)
            files = {}
            for i in range(per_class):
                n = rnd.choice([0, 1, 511, 3000, 70000, 200000])
                files["%s_%d.JPEG" % (wnid, i)] = rnd.randbytes(n // 2) + b"jpeg " * (n // 10)
            z = self.info_zip(base, wnid + ".zip", files, "-0" if c % 2 else "-6", mtime=T0 + c)
            members[wnid + ".zip"] = tl.read_file(z)
            os.unlink(z)
        return self.write(base, "train.tar", gnu_tar_of(members, T0 + 99))

    def read_concurrently(self, mnt, x, files, readers=16, reads=150):
        """`readers` threads each read `reads` random ranges of `files`
        (relative paths) through the mount; every byte is checked against x."""
        want = {p: tl.read_file(os.path.join(x, p)) for p in files}
        errors, counts = [], [0] * readers

        def reader(k):
            rnd = random.Random(k)
            try:
                for _ in range(reads):
                    if errors:
                        break
                    p = rnd.choice(files)
                    data = want[p]
                    off = rnd.randrange(len(data) + 10)
                    n = rnd.choice([1, 100, 4096, 65536, 300_000])
                    fd = os.open(os.path.join(mnt, p), os.O_RDONLY)
                    try:
                        got = os.pread(fd, n, off)
                    finally:
                        os.close(fd)
                    if got != data[off:off + n]:
                        errors.append("%s at %d+%d" % (p, off, n))
                    counts[k] += 1
            except OSError as e:
                errors.append("%s: %s" % (p, e))

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(readers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertFalse(any(t.is_alive() for t in threads), "a reader hangs")
        self.assertEqual(errors, [])
        self.assertGreater(sum(counts), 100)

    def refused(self, outer, *words, extra=()):
        """index build --recursive of `outer` exits 1 naming it and `words`;
        nothing is published. Returns stderr."""
        out = os.path.join(self.scratch("refused"), "idx")
        p = tl.run_shardfs("index", "build", "--out", out, "--recursive", *extra, outer, check=1)
        err = p.stderr.decode(errors="replace")
        self.assertIn(outer, err)
        for w in words:
            self.assertIn(w, err)
        self.assertFalse(os.path.exists(out), err)
        return err

    def test_imagenet_shaped_tar_of_zips(self):
        base = self.scratch("inz")
        outer = self.imagenet_zips(base)
        idx, x, _ = self.check(outer, strip_zip=True)
        self.assertEqual(sorted(os.listdir(x))[0], "n01440764")
        entries = tl.index_entries(idx)
        deflated = [k for k, e in entries.items() if e.get("method") == "deflate"]
        stored = [k for k, e in entries.items() if e["type"] == "file" and k not in deflated]
        self.assertGreater(len(deflated), 5)
        self.assertGreater(len(stored), 5)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            root_ns = os.stat(mnt).st_mtime_ns
            files = [os.fsdecode(k) for k in deflated + stored if entries[k]["size"] > 0]
            self.read_concurrently(mnt, x, files)
            # torchvision's ImageFolder, unchanged, lists the same samples.
            lists = image_folder_lists(x, mnt)
            self.assertEqual(lists[0], lists[1])
            self.assertEqual(len(lists[1]["classes"]), 6)
            self.assertEqual(len(lists[1]["samples"]), 42)
        os.utime(x, ns=(root_ns, root_ns))
        v = tl.run_shardfs("verify", "--full", "--quiet", idx, x)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # Without the zip option the directories keep the ".zip"; the tar
        # option strips only ".tar", as ratarmount's does.
        plain = os.path.join(self.scratch("plain"), "idx")
        tl.build_index([outer], plain, "--recursive", "--strip-recursive-tar-extension")
        self.assertEqual(tl.index_entries(plain)[b"n01440764.zip"]["type"], "dir")
        # The option needs --recursive.
        p = tl.run_shardfs("index", "build", "--out", plain + "2",
                           "--strip-recursive-zip-extension", outer, check=2)
        self.assertIn(b"--strip-recursive-zip-extension needs --recursive", p.stderr)

    def test_a_tar_inside_a_zip(self):
        base = self.scratch("tz")
        tars = {"n%d.tar" % c: gnu_tar_of({"s%d.JPEG" % i: os.urandom(100 + 600 * i)
                                           for i in range(4)}, T0 + c) for c in range(3)}
        tars["notes.txt"] = b"a deflated text member\n" * 400
        # And a zip in the zip, with a deflated member of its own.
        tars["sub/in.zip"] = tl.read_file(self.info_zip(
            self.scratch("tzi"), "in.zip", {"deep.txt": b"deep text\n" * 300}))
        # -n .tar:.zip: the archives stored, the text deflated.
        outer = self.info_zip(base, "outer.zip", tars, "-n", ".tar:.zip")
        # "sub" has no member: unzip makes it at extraction time, the index
        # gives an implied directory its newest child's mtime.
        idx, x, _ = self.check(outer, strip=True, strip_zip=True, skip_mtime=("sub",))
        entries = tl.index_entries(idx)
        self.assertEqual(entries[b"sub/in/deep.txt"].get("method"), "deflate")
        self.assertEqual(entries[b"n1"]["type"], "dir")
        self.assertEqual(entries[b"notes.txt"].get("method"), "deflate")
        self.assertIn(b"n2/s3.JPEG", entries)
        # A tar stored deflated in a zip: refused, naming the zip and the member.
        deflated = self.info_zip(self.scratch("tzd"), "deflated.zip",
                                 {"d.tar": gnu_tar_of({"f": b"compressible " * 500})})
        self.refused(deflated, "member 'd.tar'", "a tar stored deflated inside a zip",
                     "zip -0")
        # Without --recursive it is a file, as before.
        tl.build_index([deflated], os.path.join(self.scratch("tzf"), "idx"))

    def test_refusals_of_nested_zips(self):
        base = self.scratch("zr")
        # An encrypted member of an inner zip.
        enc = self.info_zip(base, "sec.zip", {"secret.txt": b"hush " * 100}, "-P", "pw")
        outer = self.write(base, "enc.tar", archive(f("ok.txt", "1"), f("d/sec.zip",
                                                                         tl.read_file(enc))))
        self.refused(outer, "member 'd/sec.zip'", "member 'secret.txt'", "encrypted")
        # A zip bomb: 300 MiB of zeros deflated to a few hundred KiB.
        bomb = io.BytesIO()
        with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
            with z.open("zeros.bin", "w", force_zip64=True) as w:
                block = bytes(1 << 20)
                for _ in range(300):
                    w.write(block)
        outer = self.write(base, "bomb.tar", archive(f("bomb.zip", bomb.getvalue())))
        self.refused(outer, "member 'bomb.zip'", "more than 100 times the zip's",
                     "refused as a zip bomb")
        # Overlapping members (two central entries sharing one local header):
        # the zip bomb's trick without nesting.
        one = io.BytesIO()
        with zipfile.ZipFile(one, "w", zipfile.ZIP_STORED) as z:
            z.writestr("x", b"x" * 1000)
        data = one.getvalue()
        cd = data.index(b"PK\1\2")
        end = data.index(b"PK\5\6")
        entry = data[cd:end]
        tail = bytearray(data[end:])
        tail[8:12] = (2).to_bytes(2, "little") * 2
        tail[12:16] = (2 * len(entry)).to_bytes(4, "little")
        overlapping = data[:end] + entry + bytes(tail)
        outer = self.write(base, "overlap.tar", archive(f("o.zip", overlapping)))
        self.refused(outer, "member 'o.zip'", "overlap: refused as a zip bomb")
        # A quine: an archive holding itself needs a compressed copy of
        # itself, and an archive stored deflated in a zip is refused. Here a
        # zip holding a deflated zip of the same member, inside a tar.
        inner = io.BytesIO()
        with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("r.zip", b"PK\5\6" + bytes(18))
        quine = io.BytesIO()
        with zipfile.ZipFile(quine, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("r.zip", inner.getvalue())
        outer = self.write(base, "quine.tar", archive(f("r.zip", quine.getvalue())))
        self.refused(outer, "member 'r.zip/r.zip'", "a zip stored deflated inside a zip")
        # Stored zips nested deeper than --recursive-depth stay files, with a
        # warning: each level lies strictly inside its parent's bytes.
        level = b"PK\5\6" + bytes(18)
        for k in range(6):
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
                z.writestr("z%d.zip" % k, level)
            level = buf.getvalue()
        outer = self.write(base, "deep.tar", archive(f("top.zip", level)))
        idx = os.path.join(base, "deep-idx")
        p = tl.run_shardfs("index", "build", "--out", idx, "--recursive", "--recursive-depth",
                           "2", outer, check=0)
        self.assertRegex(p.stderr, rb"member 'top.zip/z5.zip/z4.zip' at byte \d+: a zip nested "
                                   rb"deeper than --recursive-depth 2; left as a file")
        self.assertEqual(tl.index_entries(idx)[b"top.zip/z5.zip/z4.zip"]["type"], "file")
        # The entry bound counts zip members too.
        many = io.BytesIO()
        with zipfile.ZipFile(many, "w") as z:
            for i in range(20):
                z.writestr("f%d" % i, b"x")
        outer = self.write(base, "many.tar", archive(f("m.zip", many.getvalue())))
        self.refused(outer, "more than 10 entries (--recursive-max-entries)",
                     extra=("--recursive-max-entries", "10"))

    def test_a_remote_tar_of_zips_and_index_add(self):
        # Over HTTP: deflated inner members are inflated from compressed bytes
        # fetched through the chunk cache. Then `index add` of a second one.
        base = self.scratch("rz")
        served = os.path.join(base, "served")
        os.mkdir(served)
        outer = self.imagenet_zips(served, classes=3, per_class=5, seed=9)
        x = os.path.join(base, "x")
        os.mkdir(x)
        two_step_extract(outer, x, strip_zip=True)
        want = tl.walk_reference(x)
        del want[b""]
        with rs.Nginx(served) as web:
            idx = os.path.join(base, "idx")
            url = web.url + "/" + os.path.basename(outer)
            tl.build_index([url], idx, "--recursive", "--strip-recursive-zip-extension")
            entries = tl.index_entries(idx)
            self.assertEqual(entries[b"n01440764/n01440764_0.JPEG"]["shard"], url)
            mnt = os.path.join(base, "mnt")
            os.mkdir(mnt)
            with tl.Mount(idx, mnt, "chunk_size=64K,cache_size=8M"):
                got = tl.walk_reference(mnt)
        del got[b""]
        self.compare(want, got)
        two = self.write(base, "two.tar", gnu_tar_of({"n9.zip": tl.read_file(self.info_zip(
            base, "n9.zip", {"c.JPEG": b"c" * 5000}))}))
        tl.run_shardfs("index", "add", "--quiet", "--recursive",
                       "--strip-recursive-zip-extension", idx, two, check=0)
        got = tl.index_entries(idx)
        self.assertEqual(got[b"n9/c.JPEG"]["shard"], os.path.abspath(two))
        self.assertEqual(got[b"n9/c.JPEG"]["method"], "deflate")

    def test_archives_inside_a_compressed_tar_shard(self):
        # A .tar.gz shard's members are ranges of its decoded stream, and so
        # are those of a tar or a stored zip inside it. A deflated zip member
        # there is refused: a read would inflate the shard's raw bytes.
        base = self.scratch("gz")
        stored = tl.read_file(self.info_zip(base, "s.zip", {
            "a.JPEG": os.urandom(3000), "b.txt": b"text " * 400}, "-0"))
        deflated = tl.read_file(self.info_zip(base, "d.zip", {"b.txt": b"text " * 400}))
        outer = self.write(base, "outer.tar", gnu_tar_of({
            "n1.tar": gnu_tar_of({"x.JPEG": os.urandom(5000)}), "n2.zip": stored}))
        subprocess.run(["gzip", "-k", outer], check=True)
        x = os.path.join(base, "x")
        os.mkdir(x)
        two_step_extract(outer, x, strip=True, strip_zip=True)  # The same tar, not gzipped.
        want = tl.walk_reference(x)
        del want[b""]
        idx = os.path.join(base, "idx")
        tl.build_index([outer + ".gz"], idx, "--recursive", "--strip-recursive-tar-extension",
                       "--strip-recursive-zip-extension")
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            got = tl.walk_reference(mnt)
        del got[b""]
        self.compare(want, got)
        bad = self.write(base, "bad.tar", gnu_tar_of({"n3.zip": deflated}))
        subprocess.run(["gzip", "-k", bad], check=True)
        self.refused(bad + ".gz", "member 'n3.zip/b.txt' of the zip 'n3.zip'",
                     "deflated, in a compressed tar shard")

    def test_a_sparse_member_of_a_tar_inside_a_compressed_tar_is_refused(self):
        # Its extents would be ranges of the decoded stream, which a mount
        # reads as one range: the holes came back as the stored bytes.
        base = self.scratch("gz-sparse")
        src = os.path.join(base, "src")
        os.mkdir(src)
        with open(os.path.join(src, "sp.bin"), "wb") as fh:
            fh.truncate(200_000)
            fh.write(b"A" * 5000)
            fh.seek(150_000)
            fh.write(b"B" * 7000)
        inner = subprocess.run(["tar", "--sparse", "-cf", "-", "-C", src, "sp.bin"],
                               stdout=subprocess.PIPE, check=True).stdout
        outer = self.write(base, "outer.tar", gnu_tar_of({
            "inner.tar": inner, "pad": os.urandom(1 << 20)}))
        subprocess.run(["gzip", "-k", outer], check=True)
        self.refused(outer + ".gz", "inner.tar/sp.bin", "sparse member in a compressed tar")
        # Not compressed, the same member reads back with its holes.
        idx = os.path.join(base, "idx")
        tl.build_index([outer], idx, "--recursive")
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            self.assertEqual(tl.read_file(os.path.join(mnt, "inner.tar/sp.bin")),
                             tl.read_file(os.path.join(src, "sp.bin")))

    def test_corrupt_inner_deflated_member_is_eio(self):
        base = self.scratch("corrupt")
        rnd = random.Random(5)
        z = self.info_zip(base, "c.zip", {
            "head.bin": rnd.randbytes(100_000),
            "mid.txt": b"".join(b"line %d\n" % i for i in range(20_000)),
            "tail.bin": rnd.randbytes(100_000)})
        outer = self.write(base, "outer.tar", archive(
            f("pad-a", rnd.randbytes(100_000)), f("c.zip", tl.read_file(z)),
            f("pad-z", rnd.randbytes(100_000))))
        idx = os.path.join(base, "idx")
        tl.build_index([outer], idx, "--recursive")
        e = tl.index_entries(idx)[b"c.zip/mid.txt"]
        self.assertEqual(e["method"], "deflate")
        at, n = e["compressed_offset"], e["compressed_size"]
        damage(outer, range(at + n // 3, at + n // 3 + 64))
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        m = tl.Mount(idx, mnt)
        with m:
            for _ in range(2):  # A failed decode is not cached.
                with self.assertRaises(OSError) as cm:
                    with open(os.path.join(mnt, "c.zip/mid.txt"), "rb", buffering=0) as fh:
                        fh.read()
                self.assertEqual(cm.exception.errno, 5)
            # The other members still read.
            with zipfile.ZipFile(z) as zf:
                self.assertEqual(tl.read_file(os.path.join(mnt, "c.zip/head.bin")),
                                 zf.read("head.bin"))
        self.assertIn("%s: member at byte %d" % (outer, at), m.final_log())


# (suffix, compress command reading stdin, writing stdout)
INNER_CODECS = [
    (".tar.gz", ["gzip", "-c"]),
    (".tgz", ["pigz", "-p", "2", "-b", "128", "-c"]),
    (".tar.zst", ["zstd", "-q", "-c"]),
    (".tar.zstd", ["pzstd", "-q", "-p", "2", "-c"]),
    (".tar.xz", ["xz", "-T2", "--block-size=128KiB", "-c"]),
    (".tar.bz2", ["bzip2", "-1", "-c"]),
]


class RecursiveCompressedTarTest(tl.ScratchTestCase):
    """Compressed tars inside a tar (slice shards), against the two-step
    GNU tar extraction."""
    PREFIX = "shardfs-recursive-ctar-"

    compare = ts.TarSemanticsTest.compare
    write = RecursiveTest.write

    def class_tar(self, wnid, c, rnd, per_class, big=0):
        files = {"%s_%d.JPEG" % (wnid, i): rnd.randbytes(rnd.choice([0, 1, 511, 512, 513, 3000,
                                                                    70000]))
                 for i in range(per_class)}
        if big:
            # Half text (compressible), half random: several seek points.
            text = b"".join(b"line %d of %s\n" % (i, wnid.encode()) for i in range(big // 40))
            files["%s_big.JPEG" % wnid] = text[:big // 2] + rnd.randbytes(big // 2)
        return gnu_tar_of(files, T0 + c)

    def imagenet(self, base, per_class=6, seed=24, big=600_000, extra=()):
        """An ILSVRC-shaped tar whose class archives are compressed, one per
        codec of INNER_CODECS, plus a plain class tar and a loose file."""
        rnd = random.Random(seed)
        members = {}
        for c, (suffix, cmd) in enumerate(INNER_CODECS):
            wnid = "n%08d" % (1440764 + 1000 * c)
            plain = self.class_tar(wnid, c, rnd, per_class, big)
            members[wnid + suffix] = subprocess.run(cmd, input=plain, stdout=subprocess.PIPE,
                                                    check=True).stdout
        members["n09999999.tar"] = self.class_tar("n09999999", 50, rnd, per_class)
        members["README.txt"] = b"classes\n"
        members.update(extra)
        return self.write(base, "train.tar", gnu_tar_of(members, T0 + 99))

    def extraction(self, base, outer, strip=True, depth=4):
        x = os.path.join(base, "x")
        os.mkdir(x)
        two_step_extract(outer, x, strip=strip, depth=depth, compressed=True)
        want = tl.walk_reference(x)
        del want[b""]
        return x, want

    def build(self, outer, idx, *extra, strip=True, check=0):
        opts = ["--recursive", "--seek-spacing", "64K", *extra]
        opts += ["--strip-recursive-tar-extension"] if strip else []
        return tl.build_index([outer], idx, *opts, check=check)

    def test_imagenet_shaped_every_codec(self):
        base = self.scratch("in")
        outer = self.imagenet(base)
        x, want = self.extraction(base, outer)
        self.assertEqual(sorted(os.listdir(x))[:2], ["README.txt", "n01440764"])
        idx = os.path.join(base, "idx")
        build = self.build(outer, idx)
        # A single zstd frame is read sequentially: a warning names the member.
        self.assertRegex(build.stderr, rb"member 'n01442764.tar.zst' .*only be read sequentially")
        info = tl.run_shardfs("index", "info", "--json", idx, check=0)
        lines = tl.json_lines(info.stdout)
        self.assertEqual(lines[0]["schema_version"], 6)
        self.assertEqual(lines[0]["shards"], 1 + len(INNER_CODECS))
        self.assertEqual(lines[0]["slices"], len(INNER_CODECS))
        self.assertEqual(lines[0]["shard_bytes"], os.path.getsize(outer))
        slices = [s for s in lines[1:] if "slice_base" in s]
        self.assertEqual(sorted(s["codec"] for s in slices),
                         sorted(["gzip", "gzip", "zstd", "zstd", "xz", "bzip2"]))
        data = tl.read_file(outer)
        for s in slices:  # Each is the compressed member's bytes, exactly.
            self.assertEqual(s["shard"], os.path.abspath(outer))
            self.assertEqual(s["size"], len(data))
            inner = data[s["slice_base"]:s["slice_base"] + s["slice_length"]]
            self.assertTrue(is_tar(decompress(inner)))
        # ls and stat show the archive, its codec and the slice's range.
        entries = tl.index_entries(idx)
        e = entries[b"n01440764/n01440764_big.JPEG"]
        self.assertEqual(e["codec"], "gzip")
        self.assertEqual(e["shard"], os.path.abspath(outer))
        self.assertIn("slice_base", e)
        st = tl.run_shardfs("stat", idx, "n01440764/n01440764_big.JPEG", check=0)
        self.assertRegex(st.stdout, rb"slice: bytes \d+\.\.\d+ of the shard")
        self.assertRegex(st.stdout, rb"compressed: bytes \d+\.\.\d+ of the shard")
        self.assertNotIn("codec", entries[b"n09999999/n09999999_0.JPEG"])
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt, options="verify=first"):
            got = tl.walk_reference(mnt)
            del got[b""]
            self.compare(want, got)
        files = tl.regular_files(x)
        with tl.Mount(idx, mnt) as m:
            root_ns = os.stat(mnt).st_mtime_ns
            problems = tl.random_range_reads(mnt, files, 200_000, readers=16, reads=100)
            self.assertEqual(problems, [], m.stderr())
            self.assertEqual(tl.run_shardfs("stats", mnt, check=None).returncode, 0)
        # verify --full: the index against the extraction, byte for byte
        # (the root is implied: the extraction's takes the index's mtime).
        os.utime(x, ns=(root_ns, root_ns))
        for args in ([], ["--full"]):
            v = tl.run_shardfs("verify", *args, "--quiet", idx, x)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # The kernel mount refuses compressed shards, slices included.
        kmnt = os.path.join(base, "kmnt")
        os.mkdir(kmnt)
        p = tl.run_shardfs("mount", "--kernel", "-o", "cache_dir=" + os.path.join(base, "img"),
                           idx, kmnt, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertFalse(tl.is_mounted(kmnt))

    def test_not_stripped_and_a_tar_inside_the_compressed_tar(self):
        base = self.scratch("deep")
        rnd = random.Random(8)
        inner_tar = gnu_tar_of({"deep/a.bin": rnd.randbytes(5000), "b.txt": b"b\n"}, T0 + 7)
        ctar = gzip.compress(gnu_tar_of({"x.bin": rnd.randbytes(70_000), "inner.tar": inner_tar},
                                        T0 + 5))
        # A hard link to the compressed tar is that tar again: a second slice.
        outer = self.write(base, "outer.tar", archive(
            f("c.tar.gz", ctar), f("z.txt", "z\n"), link("c2.tar.gz", "c.tar.gz")))
        x, want = self.extraction(base, outer, strip=False)
        self.assertTrue(os.path.isdir(os.path.join(x, "c.tar.gz", "inner.tar", "deep")))
        self.assertTrue(os.path.isdir(os.path.join(x, "c2.tar.gz", "inner.tar", "deep")))
        idx = os.path.join(base, "idx")
        self.build(outer, idx, strip=False)
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt):
            got = tl.walk_reference(mnt)
            del got[b""]
            # No member describes "deep": its mtime is its newest child's.
            self.compare(want, got, {b"c.tar.gz/inner.tar/deep", b"c2.tar.gz/inner.tar/deep"})
        # The depth bound counts the slice as a level: the tar in it stays a file.
        x1 = os.path.join(self.scratch("d1"), "x")
        os.mkdir(x1)
        two_step_extract(outer, x1, depth=1, compressed=True)
        idx1 = os.path.join(base, "idx1")
        b = self.build(outer, idx1, "--recursive-depth", "1", strip=False)
        self.assertIn(b"--recursive-depth 1", b.stderr)
        self.assertEqual(tl.index_entries(idx1)[b"c.tar.gz/inner.tar"]["type"], "file")

    def test_refusals(self):
        base = self.scratch("refuse")
        rnd = random.Random(9)
        inner = gnu_tar_of({"a.bin": rnd.randbytes(300_000)})
        good = gzip.compress(inner)
        cases = [
            # A compressed tar in a compressed tar: not a range of a file.
            ("cc", gnu_tar_of({"c.tar.gz": gzip.compress(gnu_tar_of({"d.tar.gz": good}))}),
             [b"'c/d.tar.gz'", b"compressed tar inside a compressed tar"]),
            # Cut short: the inner stream is truncated.
            ("cut", gnu_tar_of({"t.tar.gz": good[:len(good) // 2]}),
             [b"'t.tar.gz'", b"truncated"]),
            # Trailing garbage after the gzip stream.
            ("garbage", gnu_tar_of({"g.tar.gz": good + b"garbage!"}),
             [b"'g.tar.gz'", b"trailing garbage"]),
        ]
        # A compression bomb: 300 MB of zeros in a tar, gzipped to ~300 KB, past
        # 256 MiB and 100 times its size: stopped as it decodes.
        z = zlib.compressobj(1, zlib.DEFLATED, 31)
        ti = tarfile.TarInfo("z.bin")
        ti.size = 300 << 20
        parts = [z.compress(ti.tobuf(tarfile.GNU_FORMAT))]
        chunk = bytes(1 << 20)
        parts += [z.compress(chunk) for _ in range(300)]
        parts += [z.compress(bytes(1024)), z.flush()]
        cases.append(("bomb", gnu_tar_of({"b.tar.gz": b"".join(parts)}),
                      [b"'b.tar.gz'", b"refused as a compression bomb"]))
        for name, data, words in cases:
            with self.subTest(case=name):
                outer = self.write(base, name + ".tar", data)
                p = self.build(outer, os.path.join(base, "idx-" + name), check=None)
                self.assertNotEqual(p.returncode, 0)
                for w in words:
                    self.assertIn(w, p.stderr)
                self.assertIn(os.fsencode(name + ".tar"), p.stderr)
        # Without --recursive they are files.
        outer = os.path.join(base, "cut.tar")
        idx = os.path.join(base, "idx-plain")
        tl.build_index([outer], idx)
        self.assertEqual(tl.index_entries(idx)[b"t.tar.gz"]["type"], "file")

    def test_corrupt_inner_stream_gives_eio(self):
        base = self.scratch("corrupt")
        rnd = random.Random(11)
        files = {"f%02d.bin" % i: rnd.randbytes(40_000) for i in range(40)}
        ctar = gzip.compress(gnu_tar_of(files), compresslevel=1)
        outer = self.write(base, "outer.tar", gnu_tar_of({
            "pad-a.bin": rnd.randbytes(300_000), "c.tar.gz": ctar,
            "pad-z.bin": rnd.randbytes(300_000)}))
        idx = os.path.join(base, "idx")
        self.build(outer, idx)
        e = tl.index_entries(idx)[b"c/f00.bin"]
        at = e["slice_base"] + e["slice_length"] // 2
        damage(outer, range(at, at + 4096, 64))
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        m = tl.Mount(idx, mnt)
        with m:
            eio = tl.read_all_right_or_eio(
                self, mnt, {"c/" + n: d for n, d in files.items()})
        self.assertGreater(eio, 0)
        self.assertLess(eio, len(files))
        # The log names the shard, the slice and the compressed offset.
        self.assertRegex(m.final_log(), r"shard %s \(a compressed tar at bytes %d\.\.%d[^)]*\): "
                         r"compressed data at byte \d+" % (
                             os.path.abspath(outer), e["slice_base"],
                             e["slice_base"] + e["slice_length"]))

    def mounted_files(self, idx, options=None):
        """{path: content} of the regular files of a mount of idx."""
        mnt = os.path.join(self.scratch("m"), "mnt")
        os.mkdir(mnt)
        with tl.Mount(idx, mnt, options):
            return tl.regular_files(mnt)

    def test_bounded_build_ranks_views_index_add_and_pack(self):
        base = self.scratch("where")
        outer = self.imagenet(base, per_class=4, seed=31, big=200_000)
        x, want = self.extraction(base, outer)
        files = tl.regular_files(x)
        idx = os.path.join(base, "idx")
        self.build(outer, idx)
        # The bounded build (--memory) gives the same index.
        spilled = os.path.join(base, "idx-spilled")
        self.build(outer, spilled, "--memory", "1")
        self.assertEqual(tl.ls_json(spilled), tl.ls_json(idx))
        # Ranks: a slice is a shard of its own (its class archive), split
        # by samples as any; the ranks are disjoint, each with as many
        # samples, their union the whole tree but for the trimmed rest,
        # every byte right.
        seen = {}
        n = len(tl.samples_of(files))
        for k in range(3):
            got = self.mounted_files(idx, "rank=%d,world=3" % k)
            self.assertEqual(len(tl.samples_of(got)), n // 3, k)
            for p, data in got.items():
                self.assertNotIn(p, seen)
                self.assertEqual(data, files[p], p)
                seen[p] = k
        self.assertTrue(set(seen) <= set(files))
        self.assertEqual(len(tl.samples_of(set(files) - set(seen))), n % 3, "trimmed")
        # A view of two classes, exported as an index: the slices' meta and
        # seek keys go with it.
        tl.view_create(idx, "two", "--include", "n01440764/*", "--include", "n01443764/*")
        out = os.path.join(base, "two-idx")
        tl.run_shardfs("view", "export", idx, "two", "--format", "index", "--out", out, check=0)
        self.assertEqual(tl.index_info(out)[0]["schema_version"], 6)
        got = self.mounted_files(out)
        self.assertEqual(sorted(got), sorted(p for p in files if p.startswith(
            ("n01440764/", "n01443764/"))))
        for p, data in got.items():
            self.assertEqual(data, files[p], p)
        # The shard list names the outer file once (its slices are its bytes).
        ex = tl.run_shardfs("view", "export", idx, "default", "--format", "shards", check=0)
        self.assertEqual(ex.stdout.splitlines(), [os.fsencode(os.path.abspath(outer))])
        # index add of a shard with a compressed tar in it.
        rnd = random.Random(4)
        more = {"m%d.bin" % i: rnd.randbytes(30_000) for i in range(5)}
        outer2 = self.write(base, "more.tar", gnu_tar_of({
            "n07777777.tar.zst": subprocess.run(["zstd", "-q", "-c"], input=gnu_tar_of(more),
                                                stdout=subprocess.PIPE, check=True).stdout}))
        tl.run_shardfs("index", "add", idx, outer2, "--recursive",
                       "--strip-recursive-tar-extension", check=0)
        got = self.mounted_files(idx)
        want_all = dict(files)
        want_all.update({"n07777777/" + n: d for n, d in more.items()})
        self.assertEqual(sorted(got), sorted(want_all))
        for p, data in got.items():
            self.assertEqual(data, want_all[p], p)
        # pack --from-index: plain tar shards of the same tree.
        packed = os.path.join(base, "packed")
        tl.run_shardfs("pack", "--from-index", spilled, "--out", packed, "--quiet", check=0)
        mnt = os.path.join(base, "pmnt")
        os.mkdir(mnt)
        with tl.Mount(os.path.join(packed, "index"), mnt):
            got = tl.walk_reference(mnt)
            del got[b""]
            self.compare(want, got)

    def test_a_remote_outer_shard(self):
        # Over HTTP (a bounded build): the slices read their ranges of the
        # outer object through the chunk cache.
        base = self.scratch("remote")
        served = os.path.join(base, "served")
        os.mkdir(served)
        outer = self.imagenet(served, per_class=4, seed=13, big=300_000)
        x, want = self.extraction(base, outer)
        with rs.Nginx(served) as web:
            idx = os.path.join(base, "idx")
            url = web.url + "/" + os.path.basename(outer)
            self.build(url, idx)
            lines = tl.json_lines(tl.run_shardfs("index", "info", "--json", idx, check=0).stdout)
            self.assertEqual(lines[0]["slices"], len(INNER_CODECS))
            self.assertTrue(all(s["shard"] == url and s["remote"] for s in lines[1:]))
            mnt = os.path.join(base, "mnt")
            os.mkdir(mnt)
            with tl.Mount(idx, mnt, "chunk_size=64K,cache_size=8M"):
                got = tl.walk_reference(mnt)
                problems = tl.random_range_reads(mnt, tl.regular_files(x), 100_000, readers=16,
                                                 reads=40)
                st = tl.run_shardfs("stats", "--shards", mnt, check=0)
                self.assertRegex(st.stdout, rb"fetched .*%s \(slice at bytes \d+\.\.\d+\)" %
                                 os.fsencode(url))
            # cache warm fetches the compressed bytes of a class's seek
            # intervals (in the outer object): its reads then miss nothing.
            e = tl.index_entries(idx)[b"n01444764/n01444764_big.JPEG"]  # .tar.xz, far in
            mnt2 = os.path.join(base, "mnt2")
            os.mkdir(mnt2)
            with tl.Mount(idx, mnt2, "chunk_size=64K,cache_size=8M"):
                tl.run_shardfs("cache", "warm", mnt2, "n01444764", check=0)
                for n in os.listdir(os.path.join(mnt2, "n01444764")):
                    self.assertEqual(tl.read_file(os.path.join(mnt2, "n01444764", n)),
                                     tl.read_file(os.path.join(x, "n01444764", n)))
                st = json.loads(tl.run_shardfs("stats", "--json", "--shards", mnt2,
                                               check=0).stdout)
                slice_stats = [s for s in st["shards"] if s["shard_id"] == e["shard_id"]]
                self.assertEqual(slice_stats[0]["cache_misses"], 0, slice_stats)
                self.assertGreater(slice_stats[0]["cache_hits"], 0, slice_stats)
        del got[b""]
        self.compare(want, got)
        self.assertEqual(problems, [])

    def test_partitions_and_a_manifest(self):
        # Each part holds its shards' slices; the manifest reads them as one.
        base = self.scratch("parts")
        outers, want = [], {}
        for k in range(2):
            d = os.path.join(base, "s%d" % k)
            os.mkdir(d)
            rnd = random.Random(40 + k)
            files = {"f%d.bin" % i: rnd.randbytes(20_000) for i in range(4)}
            ctar = subprocess.run(["xz", "-c"], input=gnu_tar_of(files), stdout=subprocess.PIPE,
                                  check=True).stdout
            outers.append(self.write(d, "train-%d.tar" % k,
                                     gnu_tar_of({"c%d.tar.xz" % k: ctar})))
            want.update({"c%d/%s" % (k, n): data for n, data in files.items()})
        parts = []
        for k in range(2):
            parts.append(os.path.join(base, "p%d" % k))
            tl.build_index(outers, parts[-1], "--recursive", "--strip-recursive-tar-extension",
                           "--part", "%d/2" % k)
        m = os.path.join(base, "m.manifest")
        tl.run_shardfs("index", "manifest", "--out", m, *parts, check=0)
        self.assertEqual(self.mounted_files(m), want)

    def test_index_add_of_a_slice_makes_version_6(self):
        # An index without slices stays version 1 until a slice comes in.
        base = self.scratch("v6")
        plain = self.write(base, "plain.tar", gnu_tar_of({"a.txt": b"a\n"}))
        idx = os.path.join(base, "idx")
        tl.build_index([plain], idx, "--recursive")
        self.assertEqual(tl.index_info(idx)[0]["schema_version"], 1)
        inner = {"x.bin": random.Random(6).randbytes(9000)}
        outer = self.write(base, "more.tar", gnu_tar_of({
            "c.tar.bz2": bz2.compress(gnu_tar_of(inner))}))
        tl.run_shardfs("index", "add", idx, outer, "--recursive", check=0)
        self.assertEqual(tl.index_info(idx)[0]["schema_version"], 6)
        self.assertEqual(self.mounted_files(idx),
                         {"a.txt": b"a\n", "c.tar.bz2/x.bin": inner["x.bin"]})


if __name__ == "__main__":
    tl.main()
