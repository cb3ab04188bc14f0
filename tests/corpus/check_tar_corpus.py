#!/usr/bin/env python3
"""Index real tar archives written by other tools and compare with GNU tar.

For every archive in the corpus: `shardfs index build` either produces an
index whose every file has exactly the content GNU tar extracts (and whose
path set, types and symlink targets agree), or fails with exit status 1 and a
message that names the archive. The outcome per archive must equal the table
in OUTCOMES.md, so a change of behaviour is seen. `--write-table` rewrites
the table from the current outcomes.

The corpus is tests/corpus/archives/ (see its README.md for where the
archives come from); a missing corpus is a failure, not a skip.
"""
import gzip
import io
import json
import lzma
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = os.path.join(HERE, "OUTCOMES.md")


def corpus_dir():
    return os.path.join(HERE, "archives")


CHUNK = 1 << 16


def data_ranges(f):
    """(offset, length) of the data regions of an open file, holes left out."""
    size = os.fstat(f.fileno()).st_size
    ranges, pos = [], 0
    while pos < size:
        try:
            start = os.lseek(f.fileno(), pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left.
            break
        end = os.lseek(f.fileno(), start, os.SEEK_HOLE)
        ranges.append((start, end - start))
        pos = end
    return size, ranges


def file_digest(f, sized_ranges, read=None):
    """A file's content as (size, {chunk number: bytes}) of its CHUNK-sized
    chunks that are not all zeros. Only the chunks the data ranges touch are
    read, so a sparse file of many GiB costs its data, not its size."""
    size, ranges = sized_ranges
    if read is None:
        def read(off, length):
            f.seek(off)
            return f.read(length)
    chunks = {}
    for off, length in ranges:
        for n in range(off // CHUNK, (off + length + CHUNK - 1) // CHUNK):
            if n in chunks or n * CHUNK >= size:
                continue
            data = read(n * CHUNK, min(CHUNK, size - n * CHUNK))
            if data.count(0) != len(data):
                chunks[n] = data
    return size, chunks


def decoded_shard(path, codec):
    """The shard's bytes as a file: a compressed tar's offsets are in its
    decoded stream, decoded here by the standard library (or zstd)."""
    if codec in (None, "tar"):
        return open(path, "rb")
    with open(path, "rb") as f:
        raw = f.read()
    if codec == "gzip":
        data = gzip.decompress(raw)
    elif codec == "xz":
        data = lzma.decompress(raw)
    elif codec == "zstd":
        data = subprocess.run(["zstd", "-dc"], input=raw, capture_output=True, check=True).stdout
    else:
        raise ValueError(f"{path}: codec {codec}")
    return io.BytesIO(data)


def indexed_digest(f, e):
    """file_digest of an indexed file, read from where the index says its
    bytes are in the shard; holes of a sparse file are zeros."""
    if not e.get("sparse"):
        return file_digest(f, (e["size"], [(0, e["size"])]),
                           lambda off, length: (f.seek(e["offset"] + off), f.read(length))[1])
    extents = e["extents"]

    def read(off, length):
        data = bytearray(length)
        for logical, n, physical in extents:
            lo, hi = max(off, logical), min(off + length, logical + n)
            if lo < hi:
                f.seek(physical + lo - logical)
                data[lo - off:hi - off] = f.read(hi - lo)
        return bytes(data)
    return file_digest(f, (e["size"], [(lg, n) for lg, n, _ in extents]), read)


def extracted_tree(root):
    """path bytes -> (type, content or target) of what GNU tar extracted."""
    tree = {}
    broot = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(broot):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, broot)
            if os.path.islink(full):
                tree[rel] = ("symlink", os.readlink(full))
            elif os.path.isdir(full):
                tree[rel] = ("dir", None)
            elif os.path.isfile(full):
                with open(full, "rb") as f:
                    tree[rel] = ("file", file_digest(f, data_ranges(f)))
    return tree


def indexed_tree(shardfs, index):
    out = subprocess.run([shardfs, "ls", "-R", "--json", index], capture_output=True, check=True)
    tree = {}
    for line in out.stdout.decode().splitlines():
        e = json.loads(line)
        path = os.fsencode(e["path"])
        if e["type"] == "file":
            with decoded_shard(e["shard"], e.get("codec")) as f:
                tree[path] = ("file", indexed_digest(f, e))
        elif e["type"] == "symlink":
            tree[path] = ("symlink", os.fsencode(e["target"]))
        else:
            tree[path] = ("dir", None)
    return tree


def outcome(shardfs, archive, work):
    name = os.path.basename(archive)
    index = os.path.join(work, "index")
    build = subprocess.run([shardfs, "index", "build", "-q", "--out", index, archive],
                           capture_output=True)
    extract_dir = os.path.join(work, "x")
    os.mkdir(extract_dir)
    tar = subprocess.run(["tar", "-xf", archive, "-C", extract_dir, "--no-same-owner",
                          "--no-same-permissions"], capture_output=True)
    tar_ok = tar.returncode == 0
    if build.returncode != 0:
        err = build.stderr.decode(errors="replace").strip().splitlines()
        if build.returncode != 1:
            return "FAIL", f"index build exited {build.returncode}"
        if not err or name not in err[-1]:
            return "FAIL", f"error does not name the archive: {err}"
        if os.path.exists(index):
            return "FAIL", "a failed build left an index behind"
        # The message without the machine's path: "shard NAME: at byte N: why".
        reason = err[-1].replace(os.path.dirname(archive) + "/", "")
        reason = reason[reason.find("shard "):][:110]
        return "refused", reason + ("" if not tar_ok else " (GNU tar extracts it)")
    ours = indexed_tree(shardfs, index)
    theirs = extracted_tree(extract_dir)
    problems = []
    for path, (kind, data) in theirs.items():
        mine = ours.get(path)
        if mine is None:
            problems.append(f"missing {path!r}")
        elif mine[0] != kind:
            problems.append(f"{path!r} is {mine[0]}, GNU tar made a {kind}")
        elif mine[1] != data:
            problems.append(f"{path!r}: content differs")
    if tar_ok:
        for path in ours:
            if path not in theirs:
                problems.append(f"extra {path!r}")
    if problems:
        return "FAIL", "; ".join(problems[:3])
    files = sum(1 for k, _ in ours.values() if k == "file")
    note = "" if tar_ok else " (GNU tar rejects the archive; every file it did extract matches)"
    return "indexed", f"{files} files identical to GNU tar's{note}"


def main():
    shardfs = os.environ["SHARDFS"]
    corpus = corpus_dir()
    archives = []
    for dirpath, _, files in os.walk(corpus):
        archives += [os.path.join(dirpath, f) for f in files if f.endswith((".tar", ".pax"))]
    archives.sort()
    if not archives:
        print(f"no tar corpus at {corpus}: cannot run", file=sys.stderr)
        return 1
    rows = {}
    failed = 0
    for archive in archives:
        with tempfile.TemporaryDirectory() as work:
            result, detail = outcome(shardfs, archive, work)
        name = os.path.relpath(archive, corpus)
        rows[name] = (result, detail)
        if result == "FAIL":
            failed += 1
            print(f"FAIL {name}: {detail}", file=sys.stderr)

    lines = ["# Tar corpus outcomes", "",
             "Generated by `check_tar_corpus.py --write-table`; checked by the test suite.",
             "`indexed`: every file's content equals what GNU tar extracts. `refused`: `index build`",
             "exits 1 with a message naming the archive, and leaves no index.", "",
             "| archive | outcome | detail |", "|---|---|---|"]
    for name, (result, detail) in rows.items():
        lines.append(f"| {name} | {result} | {detail.replace('|', '/')} |")
    table = "\n".join(lines) + "\n"
    if "--write-table" in sys.argv:
        with open(TABLE, "w") as f:
            f.write(table)
        print(f"wrote {TABLE}")
    else:
        with open(TABLE) as f:
            expected = f.read()
        if expected != table:
            import difflib
            sys.stderr.writelines(difflib.unified_diff(
                expected.splitlines(True), table.splitlines(True), "OUTCOMES.md", "now"))
            print("outcomes differ from OUTCOMES.md", file=sys.stderr)
            failed += 1
    ok = len(rows) - sum(1 for r, _ in rows.values() if r == "FAIL")
    print(f"{len(rows)} archives: {ok} as expected, {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
