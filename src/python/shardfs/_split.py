"""How a training job splits an index's samples: by rank, by DataLoader
worker, by epoch (no torch here; ``shardfs.torch`` builds on it).

A job reads an index best in the order its bytes lie: shard by shard, each
shard's samples by offset. ``job_order`` lays every sample of the view out
that way (the shards in an order drawn from the seed and the epoch, or by
number); ``rank_share`` cuts that sequence into ``world`` contiguous runs, so
a rank reads about 1/world of the bytes in a few long runs, and a shard is
split between two ranks only where a run ends inside it (so a view of fewer
shards than ranks still gives every rank samples). Runs of ``n`` samples
differ by one at most; every rank then takes the same number, as torch's
``DistributedSampler`` does: ``ceil(n / world)``, the short runs padded with
their own first samples (read twice in the epoch), or with ``drop_last``
``n // world``, the long runs trimmed by their last sample (left out of that
epoch). Every process computes the same split from the same arguments, with
no communication.

Every permutation comes from ``random.Random`` seeded with an integer made
from the seed and the epoch (and the rank and worker where they matter):
the same in every process and on every machine that runs the same Python.
"""

import random
from typing import Dict, Iterator, List, Sequence, Tuple, TypeVar

T = TypeVar("T")

__all__ = ["job_order", "rank_share", "equal_count", "cut", "mixed_seed", "block_shuffle",
           "check_rank", "buffer_shuffle"]


def mixed_seed(*parts: int) -> int:
    """One integer seed from ``parts`` (integers), the same in every process
    (Python's ``hash`` of a tuple is salted for strings only, but this does
    not depend on it at all)."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = ((x ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x


def job_order(placements: Sequence[Tuple[int, int]], seed: int = 0, epoch: int = 0,
              shuffle_shards: bool = True) -> List[int]:
    """The indices of ``placements`` (one ``(shard, offset)`` per sample: where
    its first byte lies) in the order a job reads them: shard by shard, in an
    order drawn from ``seed`` and ``epoch`` (``shuffle_shards``) or by shard
    number, each shard's samples by offset."""
    by_shard: Dict[int, List[Tuple[int, int]]] = {}
    for i, (shard, offset) in enumerate(placements):
        by_shard.setdefault(shard, []).append((offset, i))
    shards = sorted(by_shard)
    if shuffle_shards:
        random.Random(mixed_seed(seed, epoch)).shuffle(shards)
    order: List[int] = []
    for shard in shards:
        order.extend(i for _, i in sorted(by_shard[shard]))
    return order


def cut(n: int, parts: int, k: int) -> Tuple[int, int]:
    """Bounds ``(lo, hi)`` of part ``k`` of ``n`` items cut into ``parts``
    contiguous runs whose lengths differ by one at most."""
    return n * k // parts, n * (k + 1) // parts


def equal_count(n: int, world: int, drop_last: bool = False) -> int:
    """The samples each rank takes of ``n``: ``ceil(n / world)``, or
    ``n // world`` with ``drop_last``. ValueError when a rank would have
    none (fewer samples than ranks; an empty view on one rank is
    an empty share)."""
    check_rank(0, world)
    if n < world and world > 1:
        raise ValueError(f"{n} samples cannot be split into {world} ranks: every rank needs "
                         f"one at least (use fewer ranks, or a view with more samples)")
    return n // world if drop_last else -(-n // world)


def rank_share(order: Sequence[T], rank: int, world: int, drop_last: bool = False) -> List[T]:
    """Rank ``rank``'s samples of ``order`` (``job_order``'s list): its
    contiguous run, padded with its own first samples or trimmed to
    ``equal_count`` samples, so that every rank gets as many."""
    check_rank(rank, world)
    want = equal_count(len(order), world, drop_last)
    lo, hi = cut(len(order), world, rank)
    mine = list(order[lo:hi])
    while len(mine) < want:
        mine.extend(mine[:want - len(mine)])
    return mine[:want]


def block_shuffle(items: Sequence[T], rng: random.Random, block: int) -> List[T]:
    """``items`` shuffled in blocks of ``block`` neighbours: the order of the
    blocks drawn, then each block's items. Reads stay within a block's bytes
    (a few chunks of one shard) while the block lasts."""
    blocks = [list(items[i:i + block]) for i in range(0, len(items), block)]
    rng.shuffle(blocks)
    out: List[T] = []
    for b in blocks:
        rng.shuffle(b)
        out.extend(b)
    return out


def check_rank(rank: int, world: int) -> None:
    """ValueError unless ``world`` is a positive integer and ``rank`` one of
    0..world-1."""
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world {world!r}: expected a positive integer")
    if not isinstance(rank, int) or not 0 <= rank < world:
        raise ValueError(f"rank {rank!r} of world {world}: expected 0 <= rank < {world}")


def buffer_shuffle(items: Sequence[int], size: int, rng: random.Random) -> Iterator[int]:
    """``items`` through a shuffle buffer of ``size`` (webdataset's
    ``shuffle``): each item goes in; once the buffer is full, a random one
    comes out for each that goes in; the rest drain in random order."""
    if size <= 1:
        yield from items
        return
    buf: List[int] = []
    for item in items:
        buf.append(item)
        if len(buf) >= size:
            j = rng.randrange(len(buf))
            buf[j], buf[-1] = buf[-1], buf[j]
            yield buf.pop()
    rng.shuffle(buf)
    yield from buf
