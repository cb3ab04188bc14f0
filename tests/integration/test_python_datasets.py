#!/usr/bin/env python3
"""The Python package's datasets as users expect them (shardfs.torch) and
`shardfs.Index` as a container.

Shards are made here with Python's tarfile and indexed with `shardfs index
build`:
- `ImageFolder("IDX/train")` opens index IDX with root "train" (and so do
  SampleDataset and SampleStream), while `shardfs.Index("IDX/train")` stays
  strict; a root one level too high (one class folder holding folders) warns
  once, naming the root to give; a loader that wants a path gets a TypeError
  saying what a loader receives.
- SampleDataset's items as webdataset gives them: `__key__`, `__shard__` (the
  shard's path), `__index__`, one entry per extension; `decode=` None, every
  image spec, a callable, and the default decoders (int, str, JSON, numpy; a
  pickle never unpickled); `transform=`; `extensions=` and the deprecated
  `keys=`; a batch equal to its items; forked workers; pickling.
- `len(ix)`, `p in ix` and `iter(ix)` agree with `ix.files()` over a tree
  with symbolic links, hard links and empty folders, whole and as a rank's
  share; `ix.open(p, "r")` gives text.

Runs under the interpreter the package was built for (meson sets PYTHONPATH
to <build>/src/python); torch, torchvision, numpy and PIL are Debian's.
"""
import io
import json
import os
import pathlib
import pickle
import random
import sys
import tarfile
import unittest
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardfs_testlib as tl  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=<build>/src/python)

IMAGE_FORMATS = {"jpg": ("JPEG", "RGB"), "jpeg": ("JPEG", "RGB"), "png": ("PNG", "RGBA"),
                 "ppm": ("PPM", "RGB"), "pgm": ("PPM", "L"), "pbm": ("PPM", "1"),
                 "bmp": ("BMP", "RGB"), "webp": ("WEBP", "RGB"), "tif": ("TIFF", "RGB"),
                 "tiff": ("TIFF", "RGB")}


def image_bytes(rnd, fmt, mode, w, h):
    from PIL import Image
    img = Image.new("RGB", (w, h))
    img.putdata([tuple(rnd.randrange(256) for _ in range(3)) for _ in range(w * h)])
    out = io.BytesIO()
    img.convert(mode).save(out, fmt)
    return out.getvalue()


def npy_bytes(array):
    import numpy
    out = io.BytesIO()
    numpy.save(out, array)
    return out.getvalue()


class Tar:
    """A tar shard written member by member with tarfile."""

    def __init__(self, path):
        self.path = path
        self.tar = tarfile.open(path, "w", format=tarfile.PAX_FORMAT)

    def file(self, name, data):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = tl.BASE_TIME_S
        self.tar.addfile(info, io.BytesIO(data))

    def link(self, name, target, hard=False):
        info = tarfile.TarInfo(name)
        info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
        info.linkname = target
        info.mtime = tl.BASE_TIME_S
        self.tar.addfile(info)

    def dir(self, name):
        info = tarfile.TarInfo(name)
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        info.mtime = tl.BASE_TIME_S
        self.tar.addfile(info)

    def close(self):
        self.tar.close()
        return self.path


class DatasetsTest(tl.ScratchTestCase):
    PREFIX = "shardfs-python-datasets-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        rnd = random.Random(17)
        cls.want = {}  # path -> bytes of every regular file
        d = cls.tmp
        # Shard 0: images of two classes under train/, one class holding
        # only files under solo/, and a tree for the container tests.
        t = Tar(os.path.join(d, "images-000.tar"))
        for cls_name, n in (("cat", 4), ("dog", 3)):
            for i in range(n):
                ext = ("png", "jpg")[i % 2]
                data = image_bytes(rnd, IMAGE_FORMATS[ext][0], "RGB", 5 + i, 4)
                cls._add(t, f"train/{cls_name}/{i:02d}.{ext}", data)
        cls._add(t, "train/dog/notes.txt", b"not an image\n")
        for i in range(2):
            cls._add(t, f"solo/only/{i}.png", image_bytes(rnd, "PNG", "RGB", 3, 3))
        t.dir("tree/empty")
        cls._add(t, "tree/a.txt", b"line 1\r\nline 2\n")
        cls._add(t, "tree/sub/b.bin", rnd.randbytes(3000))
        t.link("tree/hard.bin", "tree/sub/b.bin", hard=True)
        t.link("tree/link.txt", "a.txt")
        t.link("tree/dirlink", "sub")
        t.link("tree/dangling", "nowhere")
        t.close()
        # Shards 1 and 2: webdataset samples under wds/, every extension a
        # decoder knows, and some it does not.
        cls.sample_shards = []
        for s in range(2):
            t = Tar(os.path.join(d, f"wds-{s + 1:03d}.tar"))
            for i in range(6):
                key = f"wds/{s}{i:05d}"
                exts = list(IMAGE_FORMATS) if i == 0 else ["jpg", "png"][: 1 + i % 2]
                for ext in exts:
                    fmt, mode = IMAGE_FORMATS[ext]
                    cls._add(t, f"{key}.{ext}", image_bytes(rnd, fmt, mode, 6 + i, 5))
                cls._add(t, f"{key}.seg.png", image_bytes(rnd, "PNG", "L", 6 + i, 5))
                cls._add(t, f"{key}.cls", b"%d\n" % (i % 3))
                cls._add(t, f"{key}.txt", f"caption {s} {i} \u00e9".encode())
                cls._add(t, f"{key}.json", json.dumps({"s": s, "i": i}).encode())
                cls._add(t, f"{key}.npy", npy_bytes([[s, i], [i, s]]))
                cls._add(t, f"{key}.pyd", pickle.dumps({"unpickled": True}))
                cls._add(t, f"{key}.bin", rnd.randbytes(20))
            cls._add(t, "wds/README", b"no dot: no sample")
            cls.sample_shards.append(t.close())
        cls.shards = [os.path.join(d, "images-000.tar")] + cls.sample_shards
        cls.idx = os.path.join(d, "idx")
        tl.build_index(cls.shards, cls.idx)
        cls.loose = os.path.join(d, "loose")
        with tarfile.open(cls.shards[0]) as t:
            t.extractall(cls.loose)

    @classmethod
    def _add(cls, tar, name, data):
        tar.file(name, data)
        cls.want[name] = data

    def webdataset_samples(self, prefix="wds/"):
        """The samples of the wds shards as webdataset groups them (members
        read with tarfile in order; key: directory and name up to the first
        dot), each with the shard it came from."""
        out = []
        for shard in self.sample_shards:
            with tarfile.open(shard) as t:
                for m in t:
                    if not m.isfile() or not m.name.startswith(prefix):
                        continue
                    base = m.name.rsplit("/", 1)[-1]
                    if "." not in base:
                        continue
                    key = m.name[:len(m.name) - len(base)] + base.split(".", 1)[0]
                    ext = base.split(".", 1)[1].lower()
                    if not out or out[-1]["__key__"] != key:
                        out.append({"__key__": key, "__shard__": shard,
                                    "__index__": len(out)})
                    out[-1][ext] = t.extractfile(m).read()
        return out

    # -- A path inside an index ----------------------------------------------

    def test_path_inside_index_opens_it(self):
        import torchvision
        import shardfs.torch as st
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Two classes: no warning.
            got = st.ImageFolder(os.path.join(self.idx, "train"), loader=lambda f: f.read())
        self.assertEqual(got.index.path, self.idx)
        self.assertEqual(got.root, "train")
        want = torchvision.datasets.ImageFolder(os.path.join(self.loose, "train"))
        self.assertEqual(got.classes, ["cat", "dog"])
        self.assertEqual(got.classes, want.classes)
        self.assertEqual([(os.path.join(self.loose, p), t) for p, t in got.samples],
                         want.samples)
        self.assertEqual(got[0][0], self.want[got.samples[0][0]])
        # root= is taken inside the path; a trailing slash and ".." are fine.
        deeper = st.ImageFolder(self.idx + "/", root="train", loader=lambda f: f.read())
        self.assertEqual(deeper.samples, got.samples)
        same = st.ImageFolder(os.path.join(self.idx, "solo", "..", "train"),
                              loader=lambda f: f.read())
        self.assertEqual(same.samples, got.samples)
        # SampleDataset and SampleStream alike.
        a = st.SampleDataset(os.path.join(self.idx, "wds"))
        b = st.SampleDataset(shardfs.Index(self.idx), root="wds")
        self.assertEqual(a.root, "wds")
        self.assertEqual(len(a), 12)
        self.assertEqual([a[i] for i in range(len(a))], [b[i] for i in range(len(b))])
        stream = st.SampleStream(pathlib.Path(self.idx, "wds"), shuffle_buffer=0)
        self.assertEqual(sorted(item["__key__"] for item in stream), sorted(a.keys))
        # Index itself opens only an index, and its error still says where
        # the index is.
        with self.assertRaisesRegex(shardfs.Error, "the index is .*idx: open it and read "
                                                   "'train' inside it"):
            shardfs.Index(os.path.join(self.idx, "train"))
        # Nothing there inside the index: the index's own error.
        with self.assertRaisesRegex(FileNotFoundError, "nope"):
            st.ImageFolder(os.path.join(self.idx, "nope"))
        # No index above: the error of the path itself.
        with self.assertRaises(FileNotFoundError):
            st.ImageFolder(os.path.join(self.tmp, "not-there", "train"))
        with self.assertRaisesRegex(shardfs.Error, "is a shard, not an index"):
            st.SampleDataset(self.shards[1])

    def test_one_class_folder_warns_once(self):
        import shardfs.torch as st
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            got = st.ImageFolder(self.idx, root="train", loader=lambda f: f.read())
        self.assertEqual(got.classes, ["cat", "dog"])
        self.assertEqual(caught, [])  # Two class folders: fine as it is.
        # A tree of one top folder holding the class folders.
        d = self.scratch("one-top")
        t = Tar(os.path.join(d, "s.tar"))
        for c in ("a", "b"):
            t.file(f"imagenet/{c}/0.png", self.want["solo/only/0.png"])
        t.close()
        idx = os.path.join(d, "idx")
        tl.build_index([t.path], idx)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            for _ in range(3):
                got = st.ImageFolder(idx, loader=lambda f: f.read())
        self.assertEqual(got.classes, ["imagenet"])
        self.assertEqual(len(caught), 1, [str(w.message) for w in caught])
        w = caught[0]
        self.assertIs(w.category, UserWarning)
        self.assertEqual(w.filename, __file__)  # The caller's line, not the library's.
        msg = str(w.message)
        self.assertIn("one class folder, 'imagenet'", msg)
        self.assertIn("root='imagenet'", msg)
        self.assertIn(repr(os.path.join(idx, "imagenet")), msg)
        # Following the advice: two classes, no warning.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.assertEqual(st.ImageFolder(idx, root="imagenet").classes, ["a", "b"])
            self.assertEqual(st.ImageFolder(os.path.join(idx, "imagenet")).classes, ["a", "b"])
            # One class folder of files only is a one-class dataset: no warning.
            solo = st.ImageFolder(os.path.join(self.idx, "solo"), loader=lambda f: f.read())
        self.assertEqual(solo.classes, ["only"])
        self.assertEqual(len(solo), 2)

    def test_loader_that_wants_a_path(self):
        import torchvision.datasets.folder as folder
        import shardfs.torch as st

        def opens_path(path):
            with open(path, "rb") as f:
                return f.read()

        for loader, name in ((folder.default_loader, "torchvision.datasets.folder.default_loader"),
                             (opens_path, "opens_path")):
            with self.subTest(loader=name):
                ds = st.ImageFolder(self.idx, root="train", loader=loader)
                with self.assertRaises(TypeError) as cm:
                    ds[0]
                msg = str(cm.exception)
                self.assertIn(name, msg)
                self.assertIn("a loader gets an open binary file object (what PIL.Image.open "
                              "accepts), not a path", msg)
                self.assertIn(repr(ds.samples[0][0]), msg)
                self.assertIn("Leave loader= unset", msg)
                self.assertIsInstance(cm.exception.__cause__, TypeError)
                self.assertIn("BytesIO", str(cm.exception.__cause__))
        # The documented way: a function of a file object.
        from PIL import Image
        ds = st.ImageFolder(self.idx, root="train",
                            loader=lambda f: Image.open(f).convert("RGB"))
        self.assertEqual(ds[0][0].mode, "RGB")
        self.assertEqual(st.ImageFolder(self.idx, root="train")[1][0].size, ds[1][0].size)

        # A loader's own TypeError is its own.
        def bad(f):
            raise TypeError("unrelated")

        with self.assertRaisesRegex(TypeError, "^unrelated$"):
            st.ImageFolder(self.idx, root="train", loader=bad)[0]

    # -- SampleDataset ---------------------------------------------------------

    def test_samples_as_webdataset_gives_them(self):
        import shardfs.torch as st
        want = self.webdataset_samples()
        ds = st.SampleDataset(self.idx, root="wds")
        self.assertEqual(len(ds), len(want))
        got = [ds[i] for i in range(len(ds))]
        self.assertEqual(got, want)
        for item in got:
            self.assertEqual(list(item)[:3], ["__key__", "__shard__", "__index__"])
            self.assertTrue(os.path.isabs(item["__shard__"]), item["__shard__"])
        self.assertEqual({item["__shard__"] for item in got}, set(self.sample_shards))
        self.assertEqual(ds[-1], want[-1])
        order = list(range(len(ds)))
        random.Random(3).shuffle(order)
        self.assertEqual(ds.__getitems__(order), [want[i] for i in order])
        with self.assertRaises(IndexError):
            ds[len(ds)]
        # A rank's share: __index__ is the index in the share.
        for rank in range(2):
            part = st.SampleDataset(self.idx, root="wds", rank=rank, world=2)
            for i in range(len(part)):
                item = part[i]
                self.assertEqual(item["__index__"], i)
                whole = want[[w["__key__"] for w in want].index(item["__key__"])]
                self.assertEqual(item["__shard__"], whole["__shard__"])
        # Through a pickle (a DataLoader started with "spawn").
        again = pickle.loads(pickle.dumps(st.SampleDataset(self.idx, root="wds",
                                                           decode="rgb8")))
        self.assertEqual(again[3]["cls"], int(want[3]["cls"]))
        # __shard__ names the shard as `shardfs ls --json` names it.
        entries = tl.index_entries(self.idx)
        for item in got:
            first = item["__key__"] + "." + list(item)[3]
            self.assertEqual(entries[first.encode()]["shard"], item["__shard__"], first)

    def test_decode_defaults(self):
        import numpy
        import shardfs.torch as st
        want = self.webdataset_samples()
        for decode in ("pil", lambda key, data: None):
            with self.subTest(decode=decode):
                ds = st.SampleDataset(self.idx, root="wds", decode=decode)
                for i, w in enumerate(want):
                    item = ds[i]
                    self.assertEqual(item["cls"], int(w["cls"]))
                    self.assertIsInstance(item["cls"], int)
                    self.assertEqual(item["txt"], w["txt"].decode("utf-8"))
                    self.assertEqual(item["json"], json.loads(w["json"]))
                    self.assertIsInstance(item["npy"], numpy.ndarray)
                    self.assertTrue(numpy.array_equal(item["npy"],
                                                      numpy.load(io.BytesIO(w["npy"]))))
                    # Never unpickled: the bytes as they are.
                    self.assertEqual(item["pyd"], w["pyd"])
                    self.assertEqual(item["bin"], w["bin"])
                    if not isinstance(decode, str):  # A callable alone decodes no image.
                        self.assertEqual(item["jpg"], w["jpg"])
        # An npy of objects would need pickle: refused.
        d = self.scratch("npy")
        t = Tar(os.path.join(d, "s.tar"))
        t.file("x/0.npy", npy_bytes(numpy.array([{"a": 1}], dtype=object)))
        t.file("x/1.json", b"{not json")
        t.close()
        tl.build_index([t.path], os.path.join(d, "idx"))
        bad = st.SampleDataset(os.path.join(d, "idx"), decode="pil")
        with self.assertRaisesRegex(ValueError, "allow_pickle") as cm:
            bad[0]
        self.assertIn("decoding x/0.npy of index", "\n".join(cm.exception.__notes__))
        with self.assertRaises(json.JSONDecodeError) as cm:
            bad[1]
        self.assertIn("decoding x/1.json of index", "\n".join(cm.exception.__notes__))
        self.assertEqual(st.SampleDataset(os.path.join(d, "idx"))[1]["json"], b"{not json")

    def test_decode_images(self):
        import numpy
        import torch
        import torchvision.transforms as T
        from PIL import Image
        import shardfs.torch as st
        want = self.webdataset_samples()
        first = want[0]  # Has every image extension.
        self.assertLessEqual(set(IMAGE_FORMATS) | {"seg.png"}, set(first))
        for spec, (kind, element, mode) in st.IMAGE_DECODERS.items():
            with self.subTest(spec=spec):
                item = st.SampleDataset(self.idx, root="wds", decode=spec)[0]
                for ext in list(IMAGE_FORMATS) + ["seg.png"]:
                    ref = Image.open(io.BytesIO(first[ext])).convert(mode)
                    w, h = ref.size
                    got = item[ext]
                    if kind == "pil":
                        self.assertIsInstance(got, Image.Image)
                        self.assertEqual(got.mode, mode)
                        self.assertEqual(got.tobytes(), ref.tobytes())
                        continue
                    channels = len(mode)
                    array = numpy.asarray(ref)
                    if kind == "numpy":
                        self.assertIsInstance(got, numpy.ndarray)
                        self.assertEqual(got.shape, (h, w) if mode == "L" else (h, w, channels))
                    else:
                        self.assertIsInstance(got, torch.Tensor)
                        self.assertEqual(tuple(got.shape),
                                         (h, w) if mode == "L" else (channels, h, w))
                        got = got.numpy()
                        if mode != "L":
                            got = got.transpose(1, 2, 0)
                    if element == "uint8":
                        self.assertEqual(got.dtype, numpy.uint8)
                        self.assertTrue(numpy.array_equal(got, array), ext)
                    else:
                        self.assertEqual(got.dtype, numpy.float32)
                        self.assertTrue(numpy.allclose(got, array / 255.0), ext)
        # "torchrgb" (or "torch") is what torchvision's ToTensor makes.
        for spec in ("torchrgb", "torch", "TorchRGB"):
            item = st.SampleDataset(self.idx, root="wds", decode=spec)[0]
            for ext in IMAGE_FORMATS:
                ref = T.ToTensor()(Image.open(io.BytesIO(first[ext])).convert("RGB"))
                self.assertTrue(torch.equal(item[ext], ref), (spec, ext))
        with self.assertRaisesRegex(ValueError, "decode='jpeg': expected None, a callable"):
            st.SampleDataset(self.idx, root="wds", decode="jpeg")
        with self.assertRaisesRegex(TypeError, "decode=3: expected"):
            st.SampleDataset(self.idx, root="wds", decode=3)

    def test_decode_callable_and_transform(self):
        import shardfs.torch as st
        want = self.webdataset_samples()
        seen = []

        def decode(key, data):
            seen.append(key)
            if key.endswith(".png"):
                return ("png", len(data))
            if key == ".cls":
                return "mine"
            return None

        ds = st.SampleDataset(self.idx, root="wds", decode=decode,
                              transform=lambda item: (item["__key__"], item["png"],
                                                      item["cls"], item["txt"], item["jpg"]))
        for i in (0, 5, 7):
            w = want[i]
            self.assertEqual(ds[i], (w["__key__"], ("png", len(w["png"])), "mine",
                                     w["txt"].decode(), w["jpg"]))
        self.assertIn(".seg.png", seen)  # The whole name, with its leading dot.
        self.assertIn(".jpg", seen)
        # webdataset's handler style (a key tested by its last extension)
        # with a spec: the spec decodes what the handler leaves.
        ds = st.SampleDataset(self.idx, root="wds", extensions=["jpg", "seg.png"],
                              decode=lambda key, data: b"seg" if key.endswith(".seg.png")
                              else None)
        item = ds[0]
        self.assertEqual(item["seg.png"], b"seg")
        self.assertEqual(item["jpg"], want[0]["jpg"])  # A callable alone: bytes.

    def test_extensions_and_deprecated_keys(self):
        import shardfs.torch as st
        want = self.webdataset_samples()
        for extensions in (["jpg", "CLS"], (".jpg", ".cls"), "jpg cls"):
            with self.subTest(extensions=extensions):
                ds = st.SampleDataset(self.idx, root="wds", extensions=extensions)
                self.assertEqual(len(ds), len(want))
                for i, w in enumerate(want):
                    self.assertEqual(ds[i], {"__key__": w["__key__"],
                                             "__shard__": w["__shard__"], "__index__": i,
                                             "jpg": w["jpg"], "cls": w["cls"]})
        # A sample without any of them is not a sample.
        ds = st.SampleDataset(self.idx, root="wds", extensions=["webp"])
        self.assertEqual([ds[i]["__key__"] for i in range(len(ds))], ["wds/000000", "wds/100000"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            old = st.SampleDataset(self.idx, root="wds", keys=["jpg", "cls"])
        self.assertEqual([w.category for w in caught], [DeprecationWarning])
        self.assertIn("extensions=", str(caught[0].message))
        self.assertEqual(caught[0].filename, __file__)
        self.assertEqual([old[i] for i in range(len(old))],
                         [st.SampleDataset(self.idx, root="wds", extensions="jpg cls")[i]
                          for i in range(len(old))])
        with self.assertRaisesRegex(ValueError, "not keys= too"):
            st.SampleDataset(self.idx, root="wds", keys=["jpg"], extensions=["jpg"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stream = st.SampleStream(self.idx, root="wds", keys=["cls"], shuffle_buffer=0)
        self.assertEqual([w.category for w in caught], [DeprecationWarning])
        self.assertEqual({tuple(sorted(item)) for item in stream}, {("__key__", "cls")})

    def test_decoding_in_forked_workers(self):
        import torch
        import torch.utils.data
        import shardfs.torch as st
        ds = st.SampleDataset(self.idx, root="wds", decode="torchrgb", extensions=["png", "cls"])
        want = [ds[i] for i in range(len(ds))]
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, shuffle=False,
                                             multiprocessing_context="fork", timeout=120,
                                             collate_fn=lambda b: b)
        got = [item for batch in loader for item in batch]
        self.assertEqual(len(got), len(want))
        for a, b in zip(got, want):
            self.assertEqual(sorted(a), sorted(b))
            self.assertEqual((a["__key__"], a["__index__"], a["cls"], a["__shard__"]),
                             (b["__key__"], b["__index__"], b["cls"], b["__shard__"]))
            if "png" in b:
                self.assertTrue(torch.equal(a["png"], b["png"]))
        self.assertEqual(sum("png" in b for b in want), 8)

    # -- Index as a container --------------------------------------------------

    def test_index_is_a_container_of_its_files(self):
        for kw in ({}, {"rank": 0, "world": 2}, {"rank": 1, "world": 2}):
            with self.subTest(**kw), shardfs.Index(self.idx, **kw) as ix:
                files = ix.files()
                self.assertEqual(list(ix), files)
                self.assertEqual(len(ix), len(files))
                self.assertEqual(len(ix), len(files))  # Remembered: the same.
                self.assertTrue(all(p in ix for p in files))
                self.assertTrue(bool(ix))
                if kw:
                    self.assertLess(len(ix), len(self.index_files()))
        with shardfs.Index(self.idx) as ix:
            files = ix.files()
            self.assertEqual(sorted(files), self.index_files())
            # Files and links of every kind, each hard link's name: as files() lists them.
            for p in ("tree/a.txt", "tree/sub/b.bin", "tree/hard.bin", "tree/link.txt",
                      "tree/dirlink", "tree/dangling", "wds/README", "wds/000000.seg.png"):
                self.assertIn(p, ix)
                self.assertIn(p.encode(), ix)
                self.assertIn(pathlib.PurePosixPath(p), ix)
            self.assertEqual(sum(p.startswith("tree/") for p in ix), 6)
            # Directories, paths not written as iter writes them, paths
            # through a link, missing paths and other types are not.
            for p in ("", "tree", "tree/", "tree/empty", "tree/sub", "./tree/a.txt",
                      "/tree/a.txt", "tree//a.txt", "tree/sub/../a.txt", "tree/a.txt/",
                      "tree/dirlink/b.bin", "tree/missing", "tree/a.txt/x", 3, None,
                      ("tree/a.txt",)):
                self.assertNotIn(p, ix)
            self.assertTrue(ix.isfile("tree/dirlink/b.bin"))  # Readable, but not listed.
            # Text: open(p, "r") decodes, newlines translated as open() does.
            with ix.open("tree/a.txt", "r", encoding="utf-8") as f:
                self.assertEqual(f.read(), "line 1\nline 2\n")
            with ix.open("tree/a.txt", "r", newline="") as f:
                self.assertEqual(f.readlines(), ["line 1\r\n", "line 2\n"])
            with ix.open("wds/000000.txt", "rt", encoding="utf-8") as f:
                self.assertEqual(f.read(), "caption 0 0 \u00e9")
            n = len(ix)
        with self.assertRaises(ValueError):
            len(ix)
        with self.assertRaises(ValueError):
            list(ix)
        with self.assertRaises(ValueError):
            "tree/a.txt" in ix  # noqa: B015
        self.assertEqual(n, len(self.index_files()))

    def test_empty_index_is_a_container(self):
        d = self.scratch("empty")
        t = Tar(os.path.join(d, "s.tar"))
        t.dir("only/a/dir")
        t.close()
        tl.build_index([t.path], os.path.join(d, "idx"))
        with shardfs.Index(os.path.join(d, "idx")) as ix:
            self.assertEqual((len(ix), list(ix), ix.files()), (0, [], []))
            self.assertNotIn("only", ix)
            self.assertTrue(bool(ix))  # An open Index is true, as a file is.

    def index_files(self):
        """Every path of the index that is not a directory, sorted, from
        `shardfs ls -R --json` (the CLI, not the package)."""
        return sorted(e["path"].decode() for e in tl.index_entries(self.idx).values()
                      if e["type"] != "dir")


if __name__ == "__main__":
    tl.main()
