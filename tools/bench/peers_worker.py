#!/usr/bin/env python3
"""The measured side of `shardfs_bench.py --python-peers` (bench_peers.py starts it): one
process that reads the bench's shards through shardfs.torch or through webdataset's own
readers, step by step at the driver's word.

Protocol: before each step the process prints `READY` and reads one line from stdin (the
driver drops the page cache in between for a cold step); after it, one line `RESULT <json>`.
Anything else on stdout (wids prints there) is not the driver's.

  random  one reader in this process, the samples in the bench's shuffled order:
          shardfs.torch.SampleDataset[i] or wids' ShardListDataset[i]. Step 1 (cold when the
          driver dropped the caches): open the dataset and read every sample once, timed;
          then, untimed with --verify, every sample checked against the bench's data; step 2
          (warm): every sample again, timed.
  stream  one rank (--rank of --world) of a job: a torch DataLoader of --workers forked
          workers over shardfs.torch.SampleStream or webdataset's pipeline
          (WebDataset(urls, shardshuffle=True, nodesplitter=split_by_node,
          workersplitter=split_by_worker).shuffle(--shuffle-buffer); RANK and WORLD_SIZE in
          the environment, as webdataset reads them), one epoch per step, timed from
          iter(loader) to the last batch. Every item is checked.

--mode raw gives each item's bytes as the library returns them; --mode decode decodes the
.jpg to an RGB PIL image, the .json and the .cls: webdataset's pipeline by its own
`.decode("pilrgb")`, shardfs and wids by decode_item below, which does the same (PIL open,
load, convert to RGB; json.loads; int). wids' own "PIL" transformation only opens the image
(its header) and decodes no pixels, so it is not used.

The data description (--data, JSON): samples, keys, crc (CRC-32 of each .jpg), cls, shards
([{"url", "nsamples"}]), index, order (the shuffled sample numbers).
"""

import argparse
import contextlib
import io
import json
import os
import sys
import time
import zlib

import torch.utils.data


def decode_item(item, dot=""):
    """A sample with its .jpg an RGB PIL image, its .json a dict and its .cls an int: what
    webdataset's .decode("pilrgb") makes of it. `dot` is "." for wids' keys (".jpg")."""
    from PIL import Image
    out = {"__key__": item["__key__"]}
    for ext, value in item.items():
        if ext.startswith("__"):
            continue
        data = value.getvalue() if isinstance(value, io.BytesIO) else bytes(value)
        name = ext[len(dot):]
        if name == "jpg":
            img = Image.open(io.BytesIO(data))
            img.load()
            out[name] = img.convert("RGB")
        elif name == "json":
            out[name] = json.loads(data)
        elif name == "cls":
            out[name] = int(data)
    return out


def summary(item, dot=""):
    """What is checked of an item: (key, CRC-32 of the .jpg, class) of a raw one; (key, class,
    the image's (width, height) == the .json's, the .json's class) of a decoded one."""
    jpg = item[dot + "jpg"]
    if isinstance(jpg, (bytes, io.BytesIO)):
        data = jpg.getvalue() if isinstance(jpg, io.BytesIO) else jpg
        cls = item[dot + "cls"]
        cls = cls.getvalue() if isinstance(cls, io.BytesIO) else cls
        return [item["__key__"], zlib.crc32(data), int(cls)]
    meta = item[dot + "json"]
    return [item["__key__"], item[dot + "cls"], list(jpg.size) == [meta["w"], meta["h"]],
            meta["cls"]]


def check(summaries, data, mode):
    """None if every (sample number, summary) matches the bench's data, else the first
    mismatch."""
    for i, s in summaries:
        if s[0] != data["keys"][i]:
            return f"sample {i}: key {s[0]!r}, expected {data['keys'][i]!r}"
        want = ([data["keys"][i], data["crc"][i], data["cls"][i]] if mode == "raw"
                else [data["keys"][i], data["cls"][i], True, data["cls"][i]])
        if s != want:
            return f"sample {s[0]}: {s}, expected {want}"
    return None


def open_random(a, data):
    """(get(i), close()) of the random-access dataset of --lib."""
    if a.lib == "shardfs":
        import shardfs.torch as st
        ds = st.SampleDataset(data["index"])
        if a.mode == "raw":
            return ds.__getitem__, ds.index.close
        return (lambda i: decode_item(ds[i])), ds.index.close
    import wids
    shard_dir = os.path.dirname(data["shards"][0]["url"])
    transformations = [] if a.mode == "raw" else [lambda s: decode_item(s, ".")]
    with contextlib.redirect_stderr(io.StringIO()):  # One line about the dataset, each time.
        # cache_dir: the shards' own folder, so that wids reads them in place (no copy).
        ds = wids.ShardListDataset(data["shards"], cache_dir=shard_dir,
                                   transformations=transformations,
                                   lru_size=max(10, len(data["shards"])))
    return ds.__getitem__, ds.close


def run_random(a, data):
    """Step 1: open and one pass, timed (then the check, untimed, with --verify); step 2:
    one pass, timed."""
    order = data["order"]
    dot = "." if a.lib == "wids" and a.mode == "raw" else ""
    wait_go()
    start = time.perf_counter()
    get, close = open_random(a, data)
    opened = time.perf_counter() - start
    for i in order:
        get(i)
    first = time.perf_counter() - start
    problem = check(((i, summary(get(i), dot)) for i in order), data, a.mode) \
        if a.verify else None
    result({"samples": len(order), "seconds": first, "open_seconds": opened,
            "problem": problem})
    wait_go()
    start = time.perf_counter()
    for i in order:
        get(i)
    result({"samples": len(order), "seconds": time.perf_counter() - start})
    close()


def keep_list(batch):
    return batch


def stream_dataset(a, data):
    """The IterableDataset of --lib whose items are summary()'s."""
    if a.lib == "shardfs":
        import shardfs.torch as st
        if a.mode == "raw":
            decode = summary
        else:
            def decode(item):
                return summary(decode_item(item))
        return st.SampleStream(data["index"], rank=a.rank, world=a.world, seed=a.seed,
                               shuffle_buffer=a.shuffle_buffer, decode=decode)
    import webdataset as wds
    urls = [s["url"] for s in data["shards"]]
    ds = wds.WebDataset(urls, shardshuffle=True, nodesplitter=wds.split_by_node,
                        workersplitter=wds.split_by_worker, seed=a.seed)
    ds = ds.shuffle(a.shuffle_buffer)
    if a.mode == "decode":
        ds = ds.decode("pilrgb")
    return ds.map(summary)


def run_stream(a, data):
    """--steps epochs of one rank, each at the driver's word."""
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(a.rank), str(a.world)
    ds = stream_dataset(a, data)
    forked = dict(multiprocessing_context="fork", timeout=600) if a.workers > 0 else {}
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=a.workers,
                                         collate_fn=keep_list, **forked)
    where = {k: i for i, k in enumerate(data["keys"])}
    for _ in range(a.steps):
        wait_go()
        start = time.perf_counter()
        items = [s for batch in loader for s in batch]
        seconds = time.perf_counter() - start
        numbered = [(where.get(s[0], -1), s) for s in items]
        bad = next((s for i, s in numbered if i < 0), None)
        problem = f"unknown key {bad[0]!r}" if bad else check(numbered, data, a.mode)
        result({"samples": len(items), "seconds": seconds, "problem": problem,
                "numbers": [i for i, _ in numbered]})


def wait_go():
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("peers_worker: the driver went away")


def result(doc):
    print("RESULT " + json.dumps(doc), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("random", "stream"))
    p.add_argument("--lib", choices=("shardfs", "wids", "webdataset"), required=True)
    p.add_argument("--mode", choices=("raw", "decode"), required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--verify", action="store_true")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--shuffle-buffer", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()
    with open(a.data) as f:
        data = json.load(f)
    if a.what == "random":
        run_random(a, data)
    else:
        run_stream(a, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
