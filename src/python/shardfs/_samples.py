"""WebDataset's samples of an index, for ``shardfs.torch``: files grouped
into samples by key, and their bytes decoded as webdataset's decoders decode
them (no torch here: it is imported only by the decoders that make tensors).

A file's key is its path up to the first dot of its name, its extension the
rest, lowercased; a sample is the files of one key, in tree order.
``decoders_for`` picks each extension's decoder once, when a dataset is
made, so that an item costs one dictionary lookup per file.
"""

from __future__ import annotations

import array
import functools
import io
import json
import re
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import Index

# WebDataset's sample key (base_plus_ext in its tariterators.py): the
# directory and the name up to its first dot; the rest is the extension.
_KEY_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


Sample = Tuple[str, Tuple[str, ...], Tuple[str, ...]]
"""A sample: its key, its files' extensions and their paths, in tree order."""
Item = Dict[str, Any]
"""What SampleDataset and SampleStream give: {"__key__": key, extension: bytes, ...}."""
Decoder = Callable[[str, bytes], Any]
"""A decoder of SampleDataset's ``decode=``: ``(".ext", bytes) -> value``, or
None to leave the entry to the next decoder."""


def extensions_arg(extensions: Optional[Iterable[str]], keys: Optional[Iterable[str]],
                what: str) -> Optional[Tuple[str, ...]]:
    """The ``extensions=`` of ``what`` (or the ``keys=`` it replaces, with a
    DeprecationWarning), lowercased, without a leading dot; a str is a
    space-separated list (webdataset's ``only=``)."""
    if keys is not None:
        if extensions is not None:
            raise ValueError(f"{what}: give extensions=, not keys= too (its old name)")
        warnings.warn(f"{what}(keys=...) is deprecated: it filters by extension, so it is "
                      f"extensions= now; keys= goes in the next release", DeprecationWarning,
                      stacklevel=3)
        extensions = keys
    if extensions is None:
        return None
    if isinstance(extensions, str):
        extensions = extensions.split()
    return tuple(e.lower().lstrip(".") for e in extensions)


def group_samples(index: Index, root: str, extensions: Optional[Sequence[str]]) -> List[Sample]:
    """WebDataset's samples of the files under ``root``: ``[(key, (ext, ...),
    (path, ...)), ...]`` in tree order of their first file (SampleDataset
    says the rule)."""
    prefix = f"{root}/" if root else ""
    keys: List[str] = []
    members: List[Tuple[List[str], List[str]]] = []
    where: Dict[str, int] = {}
    for path in index.files(prefix):
        m = _KEY_RE.match(path)
        if not m:
            continue
        key, ext = m.group(1), m.group(2).lower()
        if extensions is not None and ext not in extensions:
            continue
        i = where.get(key)
        if i is None:
            where[key] = len(keys)
            keys.append(key)
            members.append(([ext], [path]))
            continue
        exts, paths = members[i]
        if ext in exts:
            raise ValueError(f"{path}: a second {ext!r} file of sample {key!r} in index "
                             f"{index.path}")
        exts.append(ext)
        paths.append(path)
    return [(key, tuple(exts), tuple(paths)) for key, (exts, paths) in zip(keys, members)]


def member_inodes(index: Index, samples: Sequence[Sample]) -> Tuple["array.array[int]",
                                                                    "array.array[int]"]:
    """Each sample's files by inode number, found once: every file's in
    sample order, and where sample ``i``'s begin (one more at the end), for
    ``Index._read_inodes``, which then looks nothing up."""
    inodes = array.array("Q", index._inodes([p for _, _, paths in samples for p in paths]))
    starts = array.array("Q", [0])
    for _, exts, _ in samples:
        starts.append(starts[-1] + len(exts))
    return inodes, starts


def read_sample(index: Index, sample: Sample) -> Item:
    key, exts, paths = sample
    item: Item = {"__key__": key}
    item.update(zip(exts, index.read_many(paths)))
    return item


# The default decoders of SampleDataset (``decode=`` not None), by the last
# part of an entry's extension ("seg.png": "png"), as webdataset's
# basichandlers choose them. Not "pyd" and "pickle" (nor "pth", torch.load):
# unpickling runs whatever code the bytes name, so a shard from elsewhere
# could run code in the job; decode them yourself from shards you trust.
def _int(data: bytes) -> int:
    return int(data)


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _json(data: bytes) -> Any:
    return json.loads(data)


def _npy(data: bytes) -> Any:
    import numpy
    return numpy.load(io.BytesIO(data), allow_pickle=False)


DEFAULT_DECODERS: Dict[str, Callable[[bytes], Any]] = {
    "cls": _int, "cls2": _int, "index": _int, "inx": _int, "id": _int,
    "txt": _text, "text": _text, "transcript": _text,
    "json": _json, "jsn": _json,
    "npy": _npy,
}
"""What SampleDataset decodes whenever it decodes, by extension: ``cls``,
``cls2``, ``index``, ``inx``, ``id`` to int; ``txt``, ``text``,
``transcript`` to str (UTF-8); ``json``, ``jsn`` to objects (json.loads);
``npy`` to a numpy array (``numpy.load``, ``allow_pickle=False``)."""

IMAGE_DECODERS: Dict[str, Tuple[str, str, str]] = {
    "pil": ("pil", "", "RGB"), "pilrgb": ("pil", "", "RGB"), "pilrgba": ("pil", "", "RGBA"),
    "pill": ("pil", "", "L"),
    "rgb8": ("numpy", "uint8", "RGB"), "rgba8": ("numpy", "uint8", "RGBA"),
    "l8": ("numpy", "uint8", "L"),
    "rgb": ("numpy", "float", "RGB"), "rgba": ("numpy", "float", "RGBA"),
    "l": ("numpy", "float", "L"),
    "torchrgb8": ("torch", "uint8", "RGB"), "torchrgba8": ("torch", "uint8", "RGBA"),
    "torchl8": ("torch", "uint8", "L"),
    "torchrgb": ("torch", "float", "RGB"), "torch": ("torch", "float", "RGB"),
    "torchrgba": ("torch", "float", "RGBA"), "torchl": ("torch", "float", "L"),
}
"""The strings ``decode=`` takes, as webdataset's ``.decode(...)`` takes them:
each an (array type, element type, PIL mode) for the images. "pil": a PIL
image in RGB ("pill": L, "pilrgba": RGBA); "rgb8": a numpy uint8 array,
height x width x channels; "rgb": the same as float32 in [0, 1]; "torchrgb8"
a uint8 tensor, channels x height x width; "torchrgb" (or "torch") the same
as float32 in [0, 1], what torchvision's ``ToTensor`` gives. The "l" modes
give height x width (no channel axis), the "rgba" ones four channels."""

IMAGE_EXTENSIONS = frozenset(("jpg", "jpeg", "png", "ppm", "pgm", "pbm", "bmp", "webp", "tif",
                              "tiff"))
"""The extensions ``decode=`` decodes as images (the last part: "seg.png" too)."""


def _image(spec: str, data: bytes) -> Any:
    from PIL import Image
    kind, element, mode = IMAGE_DECODERS[spec]
    with Image.open(io.BytesIO(data)) as opened:
        img = opened.convert(mode)
    if kind == "pil":
        return img
    import numpy
    array = numpy.array(img)  # A copy: writable, as torch.from_numpy wants it.
    if kind == "numpy":
        return array.astype(numpy.float32) / 255 if element == "float" else array
    import torch
    t = torch.from_numpy(array)
    if t.ndim == 3:
        t = t.permute(2, 0, 1).contiguous()
    return t.float().div_(255) if element == "float" else t


def decoders_for(decode: Union[None, str, Decoder],
              exts: Iterable[str]) -> Dict[str, Optional[Callable[[bytes], Any]]]:
    """For each extension of ``exts``: the decoder ``decode`` implies for it
    (an image spec, then DEFAULT_DECODERS), None to keep the bytes."""
    if decode is None:
        return {ext: None for ext in exts}
    spec: Optional[str] = None
    if isinstance(decode, str):
        spec = decode.lower()
        if spec not in IMAGE_DECODERS:
            raise ValueError(f"decode={decode!r}: expected None, a callable(key, data) or one of "
                             + ", ".join(map(repr, IMAGE_DECODERS)))
    elif not callable(decode):
        raise TypeError(f"decode={decode!r}: expected None, a str or a callable(key, data)")
    out: Dict[str, Optional[Callable[[bytes], Any]]] = {}
    for ext in exts:
        last = ext.rsplit(".", 1)[-1]
        if spec is not None and last in IMAGE_EXTENSIONS:
            out[ext] = functools.partial(_image, spec)
        else:
            out[ext] = DEFAULT_DECODERS.get(last)
    return out
