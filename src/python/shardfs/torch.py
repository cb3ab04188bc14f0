"""PyTorch datasets over a shardfs index (``import shardfs.torch``).

- ``ImageFolder``: torchvision's ``ImageFolder`` over a directory of the
  index: the same ``classes``, ``class_to_idx``, ``samples`` order and
  targets as torchvision's over the loose tree, each image decoded from
  memory.
- ``SampleDataset``: WebDataset's samples (files grouped by key: the path up
  to the first dot of the name) with random access by index; each item a dict
  ``{"__key__": key, "__shard__": shard, "__index__": i, "jpg": ..., ...}``,
  the bytes decoded as webdataset's ``.decode(...)`` decodes them
  (``decode=``).
- ``JobSampler``: the sampler of a whole job for those two (map-style): each
  epoch a new seeded assignment of shards to ranks, the same on every rank,
  the rank's samples shuffled in blocks that keep reads near each other, and
  the same number of samples on every rank.
- ``SampleStream``: WebDataset's samples as a stream (an ``IterableDataset``):
  each epoch a seeded shard order across the job, each DataLoader worker of
  each rank reading its own run of shards start to end, samples shuffled in a
  bounded buffer; every rank yields the same number of samples.
- ``EpochSampler``: a seeded permutation per epoch (``set_epoch``), the same
  on every rank.

Ranks: every rank of a job takes the same number of samples per epoch, as
torch's ``DistributedSampler`` gives them (``ceil(n / world)``, padded with
repeats of the rank's own samples; ``n // world`` with ``drop_last=True``), so
that no rank waits for ever at an all-reduce the others never reach. The
split follows the shards (shardfs._split): a rank reads about 1/world of the
bytes, in long runs; a shard is split inside when a run ends there, so a view
of fewer shards than ranks still feeds every rank. Fewer samples than ranks
is refused (ValueError). Without ``rank`` and ``world``, the samplers and the
stream take them from ``torch.distributed`` when it is initialised.

Which to use: ``JobSampler`` when the node-local cache (or the page cache)
holds the dataset, or most of it: each epoch a rank reads other shards, so
every rank sees every class over the epochs. A fixed split (``rank=`` and
``world=`` given to the dataset, with a ``shuffle=True`` sampler over it, or
``EpochSampler``) when a node's cache is smaller than the dataset: a rank
reads the same shards every epoch, which then stay in its node's cache.

Workers: a ``DataLoader``'s workers each read the indices their sampler
hands them (a ``SampleStream``: its own run); the index is opened again in
each worker after the fork, and uses the parent's cache.

Paths: where a dataset takes an index (a ``shardfs.Index`` or what it
opens), a path inside an index directory opens that index with the rest as
``root=`` (a ``root=`` given too is taken inside it):
``ImageFolder("data.idx/train")`` is ``ImageFolder("data.idx",
root="train")``. ``shardfs.Index`` itself opens only an index.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import random
import stat
import warnings
from typing import (Any, BinaryIO, Callable, Dict, Iterable, Iterator, List, Optional, Sequence,
                    Tuple, Union)

import torch.utils.data

from . import Index, StrPath
from . import _errors, _split
from ._samples import (DEFAULT_DECODERS, IMAGE_DECODERS, IMAGE_EXTENSIONS, Decoder, Item,
                       decoders_for, extensions_arg, group_samples, member_inodes, read_sample)

__all__ = ["ImageFolder", "SampleDataset", "JobSampler", "SampleStream", "EpochSampler",
           "IMG_EXTENSIONS", "IMAGE_DECODERS", "IMAGE_EXTENSIONS", "DEFAULT_DECODERS", "Decoder",
           "Item", "pil_loader"]

# torchvision.datasets.folder.IMG_EXTENSIONS.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

Placement = Tuple[int, int]
"""Where a sample's first file lies: (shard number, offset in the shard)."""
def _open(index: Union[Index, StrPath], view: Optional[str], root: str) -> Tuple[Index, str]:
    """``index`` as an open ``Index`` of ``view`` (itself when it is one and
    no view is asked for), and ``root`` inside it. A local path that is not
    an index but lies inside an index directory (or manifest, or bundle)
    opens that index, the rest of the path put before ``root``; otherwise
    the error of opening the path itself, with its hint."""
    root = root.strip("/")
    if isinstance(index, Index):
        return (index if view is None else Index(index.path, view=view)), root
    try:
        return Index(index, view=view), root
    except OSError:
        found = _index_above(index, view)
        if found is None:
            raise
    ix, rest = found
    return ix, _join(rest, root) if root else rest


def _index_above(path: StrPath, view: Optional[str]) -> Optional[Tuple[Index, str]]:
    """The nearest index above local path ``path`` ("IDX/train/cat": IDX),
    opened, and the rest of the path ("train/cat"); None if none is."""
    cur = os.path.normpath(os.fsdecode(os.fspath(path)))
    if "://" in cur:
        return None
    rest: List[str] = []
    while True:
        head, tail = os.path.split(cur)
        if not head or not tail or head == cur:
            return None
        rest.insert(0, tail)
        cur = head
        if _errors._is_index_dir(cur) or os.path.isfile(cur):
            try:
                return Index(cur, view=view), "/".join(rest)
            except OSError:
                return None


def _rank_world(rank: Optional[int], world: Optional[int], what: str) -> Tuple[int, int]:
    """``(rank, world)``: as given, or torch.distributed's when both are None
    and it is initialised, else (0, 1)."""
    if (rank is None) != (world is None):
        raise ValueError(f"{what}: rank and world go together")
    if rank is not None and world is not None:
        return rank, world
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1


def _placements(index: Index, paths: Sequence[str]) -> List[Placement]:
    """``(shard, offset)`` of each of ``paths``: where its bytes lie."""
    return [(shard, offset) for shard, offset in index._placement(paths)]


def _join(a: str, b: str) -> str:
    return f"{a}/{b}" if a else b


def pil_loader(f: BinaryIO) -> Any:
    """Decodes an image from binary file object ``f`` to RGB, as torchvision's
    ``pil_loader`` (and ``default_loader``) does from a path: ImageFolder's
    default ``loader``."""
    from PIL import Image
    img = Image.open(f)
    return img.convert("RGB")


def _name(f: object) -> str:
    module = getattr(f, "__module__", None)
    name = getattr(f, "__qualname__", None)
    return f"{module}.{name}" if module and name else repr(f)


class _Split:
    """What the datasets share: a rank's share of their samples (rank,
    world: _split's fixed split, seeded by ``seed``), and ``placements``."""

    index: Index
    _placed: Optional[List[Placement]]

    def _keep(self, which: Sequence[int]) -> None:
        raise NotImplementedError

    def _first_files(self) -> List[str]:
        raise NotImplementedError

    def _take_share(self, rank: Optional[int], world: Optional[int], seed: int,
                    drop_last: bool) -> None:
        if (rank is None) != (world is None):
            raise ValueError(f"{type(self).__name__}: rank and world go together")
        if rank is None or world is None:
            return
        placed = self.placements
        share = _split.rank_share(_split.job_order(placed, seed, 0), rank, world, drop_last)
        self._placed = [placed[i] for i in share]
        self._keep(share)

    @property
    def placements(self) -> List[Placement]:
        """``(shard, offset)`` of each sample's first file, in sample order:
        what ``JobSampler`` splits the samples by."""
        if self._placed is None:
            self._placed = _placements(self.index, self._first_files())
        return self._placed


class ImageFolder(_Split, torch.utils.data.Dataset):
    """torchvision's ``ImageFolder`` over directory ``root`` of an index.

    ``index`` is a ``shardfs.Index`` or what ``Index`` opens; ``view`` opens
    it with a view. Classes are ``root``'s subdirectories in name order;
    samples are the valid files under each (subdirectories walked, symbolic
    links followed) in torchvision's order: ``samples``, ``targets``,
    ``classes`` and ``class_to_idx`` equal torchvision's over the loose tree,
    with paths relative to the index's root.

    With ``rank`` and ``world``, the dataset holds rank ``rank``'s fixed
    share of those samples (the module's "Ranks": as many on every rank,
    padded or, with ``drop_last``, trimmed; the shards' order drawn from
    ``seed``), in the order their bytes lie; the classes stay the whole
    tree's. Without them, give ``JobSampler`` the whole dataset.

    ``index`` may be a path inside an index directory: ``ImageFolder(
    "data.idx/train")`` is ``ImageFolder("data.idx", root="train")``. Where
    ``root`` holds a single class folder that holds folders itself (a root
    one level too high: "data.idx" for "data.idx/train/<class>"), a
    UserWarning says so and names the root to give.

    ``loader`` gets an open binary file object over a file's bytes (read at
    once: what ``PIL.Image.open`` accepts), not a path, and returns the
    sample; the default, ``pil_loader``, gives a PIL RGB image, as
    torchvision's ``default_loader``. A loader that wants a path
    (torchvision's ``default_loader``, or one calling ``open(path, "rb")``)
    fails with a TypeError saying so: leave ``loader`` unset, or give a
    function of a file object, e.g. ``lambda f: PIL.Image.open(f).convert(
    "RGB")``. ``is_valid_file`` gets a path; by default a file is valid if
    its name ends in one of ``IMG_EXTENSIONS`` (any case).
    """

    def __init__(self, index: Union[Index, StrPath], transform: Optional[Callable[[Any], Any]] = None,
                 target_transform: Optional[Callable[[int], Any]] = None,
                 loader: Optional[Callable[[BinaryIO], Any]] = None,
                 is_valid_file: Optional[Callable[[str], bool]] = None, allow_empty: bool = False,
                 *, view: Optional[str] = None, root: str = "", rank: Optional[int] = None,
                 world: Optional[int] = None, seed: int = 0, drop_last: bool = False,
                 extensions: Optional[Sequence[str]] = None) -> None:
        self.index, self.root = _open(index, view, root)
        self._placed = None
        self.transform = transform
        self.target_transform = target_transform
        self.loader = loader if loader is not None else pil_loader
        if is_valid_file is not None and extensions is not None:
            raise ValueError("give extensions or is_valid_file, not both")
        if is_valid_file is None:
            exts = tuple(e.lower() for e in (extensions or IMG_EXTENSIONS))

            def is_valid_file(path: str) -> bool:
                return path.lower().endswith(exts)
        self.classes, self.class_to_idx = self.find_classes(self.root)
        if len(self.classes) == 1:
            self._warn_one_class(self.classes[0])
        self.samples = self.make_dataset(self.root, self.class_to_idx, is_valid_file,
                                         allow_empty)
        self._keep(range(len(self.samples)))
        self._take_share(rank, world, seed, drop_last)

    def _keep(self, which: Sequence[int]) -> None:
        self.samples = [self.samples[i] for i in which]
        self.imgs = self.samples
        self.targets = [t for _, t in self.samples]

    def _first_files(self) -> List[str]:
        return [path for path, _ in self.samples]

    def find_classes(self, directory: str) -> Tuple[List[str], Dict[str, int]]:
        classes = sorted(name for name in self.index.listdir(directory)
                         if self.index.isdir(_join(directory, name)))
        if not classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {directory!r} of "
                                    f"index {self.index.path}")
        return classes, {name: i for i, name in enumerate(classes)}

    def _warn_one_class(self, name: str) -> None:
        """A UserWarning if class folder ``name``, the only one, holds folders
        itself: the classes are likely those, one level down."""
        inner = _join(self.root, name)
        # One listing, modes included: a class folder may hold a million files.
        if not any(stat.S_ISDIR(mode) for _, mode in self.index._listdir(inner)):
            return
        where = f"folder {self.root!r}" if self.root else "the root"
        warnings.warn(
            f"ImageFolder: {where} of index {self.index.path} has one class folder, {name!r}, "
            f"so every sample is class 0; if the classes are the folders inside it, give "
            f"root={inner!r} (or the path {os.path.join(self.index.path, inner)!r})",
            UserWarning, stacklevel=3)

    def make_dataset(self, directory: str, class_to_idx: Dict[str, int],
                     is_valid_file: Callable[[str], bool],
                     allow_empty: bool = False) -> List[Tuple[str, int]]:
        samples: List[Tuple[str, int]] = []
        available = set()
        for target_class in sorted(class_to_idx):
            class_index = class_to_idx[target_class]
            target_dir = _join(directory, target_class)
            for root, _, fnames in sorted(self.index.walk(target_dir, followlinks=True)):
                for fname in sorted(fnames):
                    path = _join(root, fname)
                    if is_valid_file(path):
                        samples.append((path, class_index))
                        available.add(target_class)
        empty = set(class_to_idx) - available
        if empty and not allow_empty:
            raise FileNotFoundError(
                f"Found no valid file for the classes {', '.join(sorted(empty))} in index "
                f"{self.index.path}")
        return samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Tuple[Any, Any]:
        path, target = self.samples[i]
        try:
            sample = self.loader(io.BytesIO(self.index.read(path)))
        except (TypeError, AttributeError) as e:
            if "BytesIO" not in str(e):
                raise
            raise TypeError(
                f"ImageFolder: loader {_name(self.loader)} failed on {path!r} of index "
                f"{self.index.path} ({e}): a loader gets an open binary file object (what "
                f"PIL.Image.open accepts), not a path. Leave loader= unset (pil_loader: RGB, as "
                f"torchvision's default_loader), or give a function of a file object, e.g. "
                f"loader=lambda f: PIL.Image.open(f).convert(\"RGB\")") from e
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __getitems__(self, indices: Sequence[int]) -> List[Tuple[Any, Any]]:
        """Items ``indices``, as ``[self[i] for i in indices]``: what a
        ``DataLoader`` asks of a batch. The kernel is asked for all their
        files first (``Index.prefetch``: reads from a local disk overlap each
        other and the decoding), then each is read, loaded and transformed
        in turn (one file's bytes in memory at a time, as item by item)."""
        self.index.prefetch([self.samples[i][0] for i in indices])
        return [self[i] for i in indices]


class SampleDataset(_Split, torch.utils.data.Dataset):
    """WebDataset's samples over the files under ``root`` of an index, with
    random access: item ``i`` is a dict as webdataset gives it,
    ``{"__key__": key, "__shard__": shard, "__index__": i, ext: value, ...}``:
    ``__shard__`` the path (or URL) of the shard its first file lies in, as
    the index names it (``shardfs ls --json``), ``__index__`` its index in
    this dataset, and one entry per file of the sample, by extension.

    A file's key is its path up to the first dot of its name and its
    extension the rest, lowercased (WebDataset's rule,
    ``^((?:.*/|)[^.]+)[.]([^/]*)$``); files that do not match (no dot, a
    dotfile) are left out, as WebDataset leaves them out. Samples are in
    tree order of their first file. Raises ValueError if a key has one
    extension twice. ``index`` may be a path inside an index directory
    ("data.idx/train": ``root="train"`` of "data.idx").

    ``extensions``: only files of these extensions (a list, or a str of
    them separated by spaces; "jpg" or ".jpg"); the others are neither read
    nor in the item. ``keys=`` was its name: it still works for this
    release, with a DeprecationWarning, and will go, since in webdataset a
    sample's key is ``__key__``.

    ``decode``: None (the default) leaves each entry bytes. A str decodes
    images (``IMAGE_EXTENSIONS``: jpg, jpeg, png, ppm, pgm, pbm, bmp, webp,
    tif, tiff) as webdataset's ``.decode(str)``, one of ``IMAGE_DECODERS``:
    "pil" (a PIL image, RGB), "torchrgb" or "torch" (a float tensor,
    channels x height x width, in [0, 1]), "rgb8" (a numpy uint8 array,
    height x width x channels), "l" (numpy float32, height x width), ... A
    callable ``decode(key, data)`` gets each entry's name with a leading dot
    (".jpg", ".seg.png", as webdataset's decoders get it, so its handlers
    work here) and its bytes, and returns the value, or None to leave the
    entry to the defaults. Whenever ``decode`` is not None, entries nothing
    else decoded go through ``DEFAULT_DECODERS``: ``cls``/``cls2``/``index``
    to int, ``txt``/``text`` to str, ``json``/``jsn`` to objects, ``npy`` to a
    numpy array (``allow_pickle=False``); entries of other extensions stay
    bytes. ``pyd``, ``pickle`` and ``pth`` are never unpickled (unpickling
    runs code the bytes name): decode them with your own callable if you
    trust the shards. A decoder's error carries a note naming the file.

    ``transform`` is applied to each decoded item (the dict) last.

    Costs: item ``i`` is one call reading all its files at once (one pread
    where they lie together), then its decoders; ``__getitems__`` (a
    ``DataLoader``'s batch) one call for the whole batch. Each sample's files
    (by inode) and shard are found when the dataset is made, not per item.

    ``rank``, ``world``, ``seed`` and ``drop_last``: rank ``rank``'s fixed
    share, as ``ImageFolder``'s.
    """

    def __init__(self, index: Union[Index, StrPath], *, view: Optional[str] = None,
                 root: str = "", rank: Optional[int] = None, world: Optional[int] = None,
                 seed: int = 0, drop_last: bool = False,
                 decode: Union[None, str, Decoder] = None,
                 transform: Optional[Callable[[Item], Any]] = None,
                 extensions: Optional[Iterable[str]] = None,
                 keys: Optional[Iterable[str]] = None) -> None:
        wanted = extensions_arg(extensions, keys, "SampleDataset")
        self.index, self.root = _open(index, view, root)
        self.samples = group_samples(self.index, self.root, wanted)
        self.decode = decode
        self.transform = transform
        self._decoders = decoders_for(decode, {e for _, exts, _ in self.samples for e in exts})
        self._custom: Optional[Decoder] = decode if callable(decode) else None
        self._placed = _placements(self.index, self._first_files())
        self._keep(range(len(self.samples)))
        self._take_share(rank, world, seed, drop_last)
        names = self.index._shard_names()
        self._shard_of = [names[shard] for shard, _ in self.placements]  # Per sample.
        self._inodes, self._starts = member_inodes(self.index, self.samples)

    # Pickled (a DataLoader started with "spawn") without the inode numbers:
    # the index opened again may be a later version, so they are found again.
    def __getstate__(self) -> Dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_inodes", "_starts")}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._inodes, self._starts = member_inodes(self.index, self.samples)

    def _keep(self, which: Sequence[int]) -> None:
        self.samples = [self.samples[i] for i in which]
        self.keys = [k for k, _, _ in self.samples]

    def _first_files(self) -> List[str]:
        return [paths[0] for _, _, paths in self.samples]

    def __len__(self) -> int:
        return len(self.samples)

    def _item(self, i: int, key: str, exts: Tuple[str, ...], datas: Sequence[bytes],
              paths: Tuple[str, ...]) -> Any:
        item: Item = {"__key__": key, "__shard__": self._shard_of[i], "__index__": i}
        if self.decode is None:
            item.update(zip(exts, datas))
        else:
            for ext, data, path in zip(exts, datas, paths):
                try:
                    item[ext] = self._decode1(ext, data)
                except Exception as e:
                    e.add_note(f"decoding {path} of index {self.index.path}")
                    raise
        return self.transform(item) if self.transform is not None else item

    def _decode1(self, ext: str, data: bytes) -> Any:
        if self._custom is not None:
            value = self._custom("." + ext, data)
            if value is not None:
                return value
        f = self._decoders[ext]
        return data if f is None else f(data)

    def __getitem__(self, i: int) -> Any:
        key, exts, paths = self.samples[i]
        if i < 0:
            i += len(self.samples)
        starts = self._starts
        if self.decode is None and self.transform is None:  # _item's plain case, in one call.
            item: Item = {"__key__": key, "__shard__": self._shard_of[i], "__index__": i}
            return self.index._read_sample(item, exts, self._inodes, starts[i], starts[i + 1])
        datas = self.index._read_inodes(self._inodes[starts[i]:starts[i + 1]])
        return self._item(i, key, exts, datas, paths)

    def __getitems__(self, indices: Sequence[int]) -> List[Any]:
        """Items ``indices``, as ``[self[i] for i in indices]``: what a
        ``DataLoader`` asks of a batch, every file of the batch read in one
        call (the kernel asked for all their bytes first, as by
        ``Index.read_many``)."""
        n = len(self.samples)
        which = [i if i >= 0 else i + n for i in indices]
        samples = [self.samples[i] for i in which]
        starts, inodes = self._starts, self._inodes
        batch = [n for i in which for n in inodes[starts[i]:starts[i + 1]]]
        datas = self.index._read_inodes(batch, True)
        out: List[Any] = []
        at = 0
        for i, (key, exts, paths) in zip(which, samples):
            out.append(self._item(i, key, exts, datas[at:at + len(exts)], paths))
            at += len(exts)
        return out


class JobSampler(torch.utils.data.Sampler):
    """The sampler of rank ``rank`` of a job of ``world`` ranks, for a
    map-style dataset over a whole index (``ImageFolder``, ``SampleDataset``
    or any with ``placements``: ``(shard, offset)`` per sample).

    Each epoch (``set_epoch``, as ``DistributedSampler``'s): the shards in
    an order drawn from ``seed`` and the epoch, the sequence of their samples
    cut into ``world`` runs (shardfs._split: a new assignment of shards to
    ranks, the same on every rank without communication), the rank's run in
    blocks of ``block`` neighbouring samples, the blocks and the samples in
    each shuffled (``shuffle``). Every rank yields ``len(self)`` indices: the
    same number (padded with repeats of its own samples; ``drop_last``
    trims). Over the ranks, every sample once per epoch, padding aside.

    ``rank`` and ``world`` default to torch.distributed's. A dataset without
    ``placements`` is taken as one shard in index order (then only the cut
    and the shuffle are this sampler's).
    """

    def __init__(self, data_source: Any, *, rank: Optional[int] = None,
                 world: Optional[int] = None, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = False, block: int = 64) -> None:
        self.rank, self.world = _rank_world(rank, world, "JobSampler")
        placements: Optional[Sequence[Placement]] = getattr(data_source, "placements", None)
        if placements is None:
            placements = [(0, i) for i in range(len(data_source))]
        self.placements: List[Placement] = list(placements)
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        if block < 1:
            raise ValueError(f"block {block!r}: expected a positive integer")
        self.block = block
        self.epoch = 0
        _split.check_rank(self.rank, self.world)
        self.count = _split.equal_count(len(self.placements), self.world, drop_last)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        order = _split.job_order(self.placements, self.seed, self.epoch, self.shuffle)
        mine = _split.rank_share(order, self.rank, self.world, self.drop_last)
        if self.shuffle:
            rng = random.Random(_split.mixed_seed(self.seed, self.epoch, self.rank, 1))
            mine = _split.block_shuffle(mine, rng, self.block)
        return iter(mine)

    def __len__(self) -> int:
        return self.count


class SampleStream(torch.utils.data.IterableDataset):
    """WebDataset's samples of the files under ``root`` of an index as a
    stream: what webdataset's ``split_by_node`` + ``split_by_worker`` +
    ``shardshuffle=True`` + ``.shuffle(shuffle_buffer)`` do, with exact
    counts.

    Each epoch (``set_epoch``): the shards in an order drawn from ``seed``
    and the epoch, their samples in the order their bytes lie, cut into
    ``world`` runs of the same length (shardfs._split: padded with repeats of
    the rank's own samples, or trimmed with ``drop_last``), each rank's run
    cut again into one run per DataLoader worker, which reads it start to end
    (no byte range read by two workers) through a shuffle buffer of
    ``shuffle_buffer`` samples (0: in order). Every rank yields ``len(self)``
    samples; each worker as many as that worker of every other rank, so the
    batches a ``DataLoader`` makes number the same on every rank. Over the
    ranks, every sample once per epoch, padding aside.

    An item is ``{"__key__": key, ext: bytes, ...}``, or what
    ``decode(item)`` returns; ``extensions`` (``keys=`` before, deprecated)
    and ``index`` as SampleDataset's. ``rank`` and ``world`` default to
    torch.distributed's. ``set_epoch`` reaches the workers of a
    ``DataLoader``, persistent ones (``persistent_workers=True``) too: the
    epoch is a value in shared memory, which forked and spawned workers
    inherit.
    """

    def __init__(self, index: Union[Index, StrPath], *, view: Optional[str] = None,
                 root: str = "", rank: Optional[int] = None, world: Optional[int] = None,
                 seed: int = 0, shuffle_buffer: int = 1000,
                 decode: Optional[Callable[[Item], Any]] = None,
                 keys: Optional[Iterable[str]] = None, drop_last: bool = False,
                 extensions: Optional[Iterable[str]] = None) -> None:
        wanted = extensions_arg(extensions, keys, "SampleStream")
        self.index, self.root = _open(index, view, root)
        self.rank, self.world = _rank_world(rank, world, "SampleStream")
        self.samples = group_samples(self.index, self.root, wanted)
        self.placements = _placements(self.index, [paths[0] for _, _, paths in self.samples])
        _split.check_rank(self.rank, self.world)
        self.count = _split.equal_count(len(self.samples), self.world, drop_last)
        if shuffle_buffer < 0:
            raise ValueError(f"shuffle_buffer {shuffle_buffer!r}: expected 0 or more")
        self.seed = seed
        self.shuffle_buffer = shuffle_buffer
        self.decode = decode
        self.drop_last = drop_last
        self._epoch = multiprocessing.RawValue("q", 0)

    @property
    def epoch(self) -> int:
        """The epoch ``set_epoch`` set last (0 at first)."""
        return int(self._epoch.value)

    def set_epoch(self, epoch: int) -> None:
        self._epoch.value = epoch

    def __len__(self) -> int:
        return self.count

    def worker_share(self, worker: int, workers: int) -> List[int]:
        """The sample numbers worker ``worker`` of ``workers`` of this rank
        reads this epoch, in reading order (before the shuffle buffer)."""
        order = _split.job_order(self.placements, self.seed, self.epoch)
        mine = _split.rank_share(order, self.rank, self.world, self.drop_last)
        lo, hi = _split.cut(len(mine), workers, worker)
        return mine[lo:hi]

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        share = self.worker_share(worker, workers)
        rng = random.Random(_split.mixed_seed(self.seed, self.epoch, self.rank, worker, 2))
        for i in _split.buffer_shuffle(share, self.shuffle_buffer, rng):
            item = read_sample(self.index, self.samples[i])
            yield self.decode(item) if self.decode is not None else item


class EpochSampler(torch.utils.data.Sampler):
    """Indices 0..n-1 in a permutation seeded by ``seed`` and the epoch
    (``set_epoch``), the same in every process; in order with
    ``shuffle=False``. With ``rank`` and ``world`` (for a dataset not split
    by rank already), every ``world``-th index of the permutation from
    ``rank``, as ``DistributedSampler`` takes them: ``ceil(n / world)`` on
    every rank (the permutation's first indices repeated to fill), or
    ``n // world`` with ``drop_last``."""

    def __init__(self, data_source: Any, seed: int = 0, shuffle: bool = True, *,
                 rank: Optional[int] = None, world: Optional[int] = None,
                 drop_last: bool = False) -> None:
        self.n = data_source if isinstance(data_source, int) else len(data_source)
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        if (rank is None) != (world is None):
            raise ValueError("rank and world go together")
        self.rank = rank or 0
        self.world = world or 1
        _split.check_rank(self.rank, self.world)
        self.count = _split.equal_count(self.n, self.world, drop_last)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _order(self) -> List[int]:
        if not self.shuffle:
            return list(range(self.n))
        g = torch.Generator()
        g.manual_seed(self.seed * 1000003 + self.epoch)
        order: List[int] = torch.randperm(self.n, generator=g).tolist()
        return order

    def __iter__(self) -> Iterator[int]:
        order = self._order()
        total = self.count * self.world
        while 0 < len(order) < total:  # Padded as DistributedSampler pads.
            order += order[:total - len(order)]
        order = order[:total]
        return iter(order[self.rank::self.world])

    def __len__(self) -> int:
        return self.count
