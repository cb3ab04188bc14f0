"""PyTorch datasets over a shardfs index (``import shardfs.torch``).

- ``ImageFolder``: torchvision's ``ImageFolder`` over a directory of the
  index: the same ``classes``, ``class_to_idx``, ``samples`` order and
  targets as torchvision's over the loose tree, each image decoded from
  memory.
- ``SampleDataset``: WebDataset's samples (files grouped by key: the path up
  to the first dot of the name) with random access by index; each item a dict
  ``{"__key__": key, "jpg": bytes, "json": bytes, ...}``.
- ``EpochSampler``: a seeded permutation per epoch (``set_epoch``), the same
  on every rank.

Ranks: give ``rank`` and ``world`` (or open the ``Index`` with them) and the
dataset holds rank ``rank``'s share of the view, by shards as ``-o
rank=,world=`` splits it. Workers: a ``DataLoader``'s workers each read the
indices their sampler hands them; the index is opened again in each worker
after the fork.
"""

import io
import re

import torch.utils.data

from . import Index

__all__ = ["ImageFolder", "SampleDataset", "EpochSampler", "IMG_EXTENSIONS"]

# torchvision.datasets.folder.IMG_EXTENSIONS.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

# WebDataset's sample key (base_plus_ext in its tariterators.py): the
# directory and the name up to its first dot; the rest is the extension.
_KEY_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


def _open(index, view, rank, world, seed, keep_dirs):
    if isinstance(index, Index):
        if view is None and rank is None and world is None:
            return index
        return Index(index.path, view=view, rank=rank, world=world, seed=seed,
                     rank_keep_dirs=keep_dirs)
    return Index(index, view=view, rank=rank, world=world, seed=seed, rank_keep_dirs=keep_dirs)


def _join(a, b):
    return f"{a}/{b}" if a else b


def pil_loader(f):
    """Decodes an image from binary file object ``f`` to RGB, as torchvision's
    ``pil_loader`` does from a path."""
    from PIL import Image
    img = Image.open(f)
    return img.convert("RGB")


class ImageFolder(torch.utils.data.Dataset):
    """torchvision's ``ImageFolder`` over directory ``root`` of an index.

    ``index`` is a ``shardfs.Index`` or what ``Index`` opens; ``view``,
    ``rank``, ``world`` and ``seed`` open it with a view or a rank's share.
    Classes are ``root``'s subdirectories in name order; samples are the
    valid files under each (subdirectories walked, symbolic links followed)
    in torchvision's order: ``samples``, ``targets``, ``classes`` and
    ``class_to_idx`` equal torchvision's over the loose tree, with paths
    relative to the index's root.

    ``loader`` gets a binary file object over a file's bytes (read at once)
    and returns the sample (default: a PIL RGB image, as torchvision's);
    ``is_valid_file`` gets a path; by default a file is valid if its name
    ends in one of ``IMG_EXTENSIONS`` (any case).
    """

    def __init__(self, index, transform=None, target_transform=None, loader=None,
                 is_valid_file=None, view=None, *, root="", rank=None, world=None, seed=0,
                 extensions=None):
        self.index = _open(index, view, rank, world, seed, keep_dirs=True)
        self.root = root.strip("/")
        self.transform = transform
        self.target_transform = target_transform
        self.loader = loader if loader is not None else pil_loader
        if is_valid_file is not None and extensions is not None:
            raise ValueError("give extensions or is_valid_file, not both")
        if is_valid_file is None:
            exts = tuple(e.lower() for e in (extensions or IMG_EXTENSIONS))

            def is_valid_file(path):
                return path.lower().endswith(exts)
        self.classes, self.class_to_idx = self.find_classes(self.root)
        # A rank's share may leave a class without files; the full tree may not.
        allow_empty = self.index is not index and world is not None
        self.samples = self.make_dataset(self.root, self.class_to_idx, is_valid_file,
                                         allow_empty)
        self.imgs = self.samples
        self.targets = [t for _, t in self.samples]

    def find_classes(self, directory):
        classes = sorted(name for name in self.index.listdir(directory)
                         if self.index.isdir(_join(directory, name)))
        if not classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {directory!r} of "
                                    f"index {self.index.path}")
        return classes, {name: i for i, name in enumerate(classes)}

    def make_dataset(self, directory, class_to_idx, is_valid_file, allow_empty=False):
        samples = []
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

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, target = self.samples[i]
        sample = self.loader(io.BytesIO(self.index.read(path)))
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __getitems__(self, indices):
        """Items ``indices``, as ``[self[i] for i in indices]``: what a
        ``DataLoader`` asks of a batch. The kernel is asked for all their
        files first (``Index.prefetch``: reads from a local disk overlap each
        other and the decoding), then each is read, loaded and transformed
        in turn (one file's bytes in memory at a time, as item by item)."""
        self.index.prefetch([self.samples[i][0] for i in indices])
        return [self[i] for i in indices]


class SampleDataset(torch.utils.data.Dataset):
    """WebDataset's samples over the files under ``root`` of an index, with
    random access: item ``i`` is ``{"__key__": key, ext: bytes, ...}``.

    A file's key is its path up to the first dot of its name and its
    extension the rest, lowercased (WebDataset's rule,
    ``^((?:.*/|)[^.]+)[.]([^/]*)$``); files that do not match (no dot, a
    dotfile) are left out, as WebDataset leaves them out. Samples are in
    tree order of their first file. Raises ValueError if a key has one
    extension twice.
    """

    def __init__(self, index, view=None, *, root="", rank=None, world=None, seed=0,
                 keys=None):
        self.index = _open(index, view, rank, world, seed, keep_dirs=False)
        root = root.strip("/")
        prefix = f"{root}/" if root else ""
        self.samples = []  # (key, [(ext, path), ...])
        where = {}
        for path in self.index.files(prefix):
            m = _KEY_RE.match(path)
            if not m:
                continue
            key, ext = m.group(1), m.group(2).lower()
            if keys is not None and ext not in keys:
                continue
            i = where.get(key)
            if i is None:
                where[key] = len(self.samples)
                self.samples.append((key, [(ext, path)]))
                continue
            members = self.samples[i][1]
            if any(e == ext for e, _ in members):
                raise ValueError(f"{path}: a second {ext!r} file of sample {key!r} in index "
                                 f"{self.index.path}")
            members.append((ext, path))
        self.keys = [k for k, _ in self.samples]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        key, members = self.samples[i]
        item = {"__key__": key}
        for ext, path in members:
            item[ext] = self.index.read(path)
        return item

    def __getitems__(self, indices):
        """Items ``indices``, as ``[self[i] for i in indices]``: what a
        ``DataLoader`` asks of a batch, the kernel asked for every member
        file first (``Index.prefetch``)."""
        self.index.prefetch([path for i in indices for _, path in self.samples[i][1]])
        return [self[i] for i in indices]


class EpochSampler(torch.utils.data.Sampler):
    """Indices 0..n-1 in a permutation seeded by ``seed`` and the epoch
    (``set_epoch``), the same in every process; in order with
    ``shuffle=False``. With ``rank`` and ``world``, every ``world``-th index
    of the permutation from ``rank`` (for a dataset not split by rank
    already)."""

    def __init__(self, data_source, seed=0, shuffle=True, rank=None, world=None):
        self.n = data_source if isinstance(data_source, int) else len(data_source)
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        if (rank is None) != (world is None):
            raise ValueError("rank and world go together")
        self.rank = rank or 0
        self.world = world or 1

    def set_epoch(self, epoch):
        self.epoch = epoch

    def _order(self):
        if not self.shuffle:
            return list(range(self.n))
        g = torch.Generator()
        g.manual_seed(self.seed * 1000003 + self.epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def __iter__(self):
        return iter(self._order()[self.rank::self.world])

    def __len__(self):
        return len(range(self.rank, self.n, self.world))
