#!/usr/bin/env python3
"""Hostile shards, crafted here byte by byte: `index build` must refuse each
malformed one with exit status 1 and a message naming the shard (and the
byte offset where there is one), leaving no index; or, where the archive is
readable, index exactly what GNU tar extracts. No path may leave the tree.
"""
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_tar_corpus import outcome  # noqa: E402


def member(name, data=b"", fmt=tarfile.GNU_FORMAT, **kw):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    for k, v in kw.items():
        setattr(info, k, v)
    buf = info.tobuf(fmt, "utf-8", "surrogateescape")
    pad = (512 - len(data) % 512) % 512
    return buf + data + b"\0" * pad


def end():
    return b"\0" * 1024


def checksum(header):
    h = bytearray(header)
    h[148:156] = b" " * 8
    return b"%06o\0 " % sum(h)


def with_field(block, start, length, value):
    """A copy of a 512-byte header with a field replaced and the checksum fixed."""
    h = bytearray(block[:512])
    h[start:start + length] = value.ljust(length, b"\0")[:length]
    h[148:156] = checksum(bytes(h))
    return bytes(h) + block[512:]


def pax_header(records):
    body = b"".join(records)
    info = tarfile.TarInfo("././@PaxHeader")
    info.type = tarfile.XHDTYPE
    info.size = len(body)
    pad = (512 - len(body) % 512) % 512
    return info.tobuf(tarfile.USTAR_FORMAT) + body + b"\0" * pad


def cases():
    good = member("a.txt", b"A" * 1000) + member("b.txt", b"B" * 700)
    data_start = 512
    c = {}
    # (bytes, expected): "refused" must fail; "either" may index if it matches GNU tar.
    c["truncated-in-header"] = (good[:300], "refused")
    c["truncated-in-second-header"] = (good[:1536 + 100], "refused")
    c["truncated-in-data"] = (good[:data_start + 100], "refused")
    c["truncated-in-padding"] = (good[:data_start + 1000 + 12], "either")
    c["no-end-blocks"] = (good, "either")
    bad_sum = bytearray(good)
    bad_sum[1536 + 10] ^= 0x55  # a byte of the second header's name
    c["bad-header-checksum"] = (bytes(bad_sum) + end(), "refused")
    c["size-past-eof"] = (with_field(member("big.bin", b"x" * 10), 124, 12, b"%011o" % 10**9)
                          + b"x" * 10, "refused")
    c["size-base256-negative"] = (with_field(member("neg.bin", b""), 124, 12, b"\xff" * 12)
                                  + end(), "refused")
    c["mtime-base256-huge"] = (with_field(member("t.bin", b"t"), 136, 12,
                                          b"\x80" + b"\x7f" * 11) + end(), "either")
    c["mode-garbage"] = (with_field(member("m.bin", b"m"), 100, 8, b"zzzzzzz") + end(), "either")
    c["pax-bad-record-length"] = (pax_header([b"99 path=long/name.txt\n"])
                                  + member("short.txt", b"s", tarfile.USTAR_FORMAT) + end(),
                                  "either")
    c["pax-length-zero"] = (pax_header([b"0 path=x\n"]) + member("z.txt", b"z", tarfile.USTAR_FORMAT)
                            + end(), "either")
    c["pax-embedded-nul"] = (pax_header([b"15 path=a\0b.txt\n"])
                             + member("n.txt", b"n", tarfile.USTAR_FORMAT) + end(), "either")
    long_name = tarfile.TarInfo("././@LongLink")
    long_name.type = tarfile.GNUTYPE_LONGNAME
    long_name.size = 10**9  # a long name that never ends
    c["gnu-longname-never-ends"] = (long_name.tobuf(tarfile.GNU_FORMAT) + b"n" * 2048, "refused")
    c["name-empty"] = (member("", b"e") + end(), "either")
    c["name-only-slashes"] = (member("////", b"s") + end(), "either")
    c["name-dotdot"] = (member("../../etc/passwd", b"root:x:0:0") + member("ok.txt", b"ok") + end(),
                        "either")
    c["name-absolute"] = (member("/etc/passwd", b"root:x:0:0") + end(), "either")
    c["name-inner-dotdot"] = (member("a/../../x", b"x") + end(), "either")
    c["symlink-escaping"] = (member("evil", b"", type=tarfile.SYMTYPE, linkname="../../../etc/shadow")
                             + end(), "either")
    c["hardlink-escaping"] = (member("evil", b"", type=tarfile.LNKTYPE, linkname="../../etc/passwd")
                              + end(), "either")
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w", format=tarfile.GNU_FORMAT) as t:
        info = tarfile.TarInfo("inside.txt")
        info.size = 3
        t.addfile(info, io.BytesIO(b"in\n"))
    c["member-is-a-tar"] = (member("inner.tar", inner.getvalue()) + end(), "either")
    c["zero-length"] = (b"", "refused")
    c["not-a-tar"] = (bytes(range(256)) * 40, "refused")
    c["only-zeros"] = (b"\0" * 10240, "either")
    gz = io.BytesIO()
    with tarfile.open(fileobj=gz, mode="w:gz") as t:
        info = tarfile.TarInfo("c.txt")
        info.size = 1
        t.addfile(info, io.BytesIO(b"c"))
    # A compressed tar is a shard too (codec told by its magic): indexed, its
    # files compared through the decoded stream.
    c["gzip-compressed"] = (gz.getvalue(), "indexed")
    return c


def main():
    shardfs = os.environ["SHARDFS"]
    failures = 0
    for name, (data, expected) in cases().items():
        with tempfile.TemporaryDirectory() as work:
            shard = os.path.join(work, name + ".tar")
            with open(shard, "wb") as f:
                f.write(data)
            result, detail = outcome(shardfs, shard, work)
            index = os.path.join(work, "index")
            leftovers = [p for p in os.listdir(work) if ".tmp-" in p]
            paths = []
            if result == "indexed":
                out = subprocess.run([shardfs, "ls", "-R", "--json", index], capture_output=True,
                                     check=True)
                paths = [json.loads(l)["path"] for l in out.stdout.decode().splitlines()]
        bad = None
        if result == "FAIL":
            bad = detail
        elif expected == "refused" and result != "refused":
            bad = f"expected a refusal, got {result}: {detail}"
        elif expected == "indexed" and result != "indexed":
            bad = f"expected an index, got {result}: {detail}"
        elif result == "refused" and "at byte" not in detail and name not in ("zero-length",):
            bad = f"refusal without a byte offset: {detail}"
        elif leftovers:
            bad = f"left {leftovers}"
        else:
            for p in paths:
                parts = p.split("/")
                if p.startswith("/") or ".." in parts or "" in parts:
                    bad = f"path escapes or is malformed: {p!r}"
        status = "ok" if bad is None else "FAIL"
        print(f"{status:4} {name:28} {result:8} {detail if bad is None else bad}")
        failures += bad is not None
    print(f"{len(cases()) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
