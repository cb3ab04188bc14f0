"""The migration part of `shardfs_bench.py --netfs` (bench_netfs.py): the rig's raw bandwidth,
`shardfs pack` of the loose tree on sshfs against `tar -cf` of it, and the pack's verify."""

import os
import shutil
import time

from bench_common import BenchError, fmt_bytes, log, tree_bytes
from bench_images import file_tail
from bench_mounts import run_measured, run_tool
from bench_report import target_row


def raw_bandwidth(rig, scratch, nbytes):
    """(bytes, bytes/s) of a cold `dd bs=1M` of one file over the sshfs mount, as big as the
    tree within 32-256 MiB: the most the rig moves for one reader, the ceiling of a pack's
    MB/s."""
    mib = min(256, max(32, nbytes >> 20))
    name = "raw-bandwidth.bin"
    path = os.path.join(rig.netfs.export, name)
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)
    rig.cold()
    rc, secs, _, _ = run_measured(["dd", "if=" + os.path.join(rig.net, name), "of=/dev/null",
                                   "bs=1M"], timeout=600, log_path=os.path.join(scratch, "dd.log"))
    os.unlink(path)
    if rc != 0:
        raise BenchError(f"dd of {name} over sshfs exited {rc}")
    return mib << 20, (mib << 20) / secs


def pack_vs_tar(a, rig, scratch, nfiles, rtt):
    """The rig's raw bandwidth (raw_bandwidth), then `shardfs pack` and `tar -cf` of NET/loose,
    each cold, output on local disk; then `shardfs verify` of the pack against NET/loose."""
    src = os.path.join(rig.net, "loose")
    out = os.path.join(scratch, "pack-from-netfs")
    tar_out = os.path.join(scratch, "tar-from-netfs.tar")
    log_path = os.path.join(scratch, "pack-netfs.log")
    nbytes = tree_bytes(os.path.join(rig.netfs.export, "loose"))[0]
    raw_bytes, raw = raw_bandwidth(rig, scratch, nbytes)
    log(f"rtt {rtt:g} ms dd of one {fmt_bytes(raw_bytes)} file over sshfs: {raw / 1e6:,.1f} MB/s")
    rig.cold()
    rc, pack_s, pack_cpu, _ = run_measured(
        [a.shardfs, "pack", "--quiet", src, "--out", out, "--shard-size", a.shard_size],
        timeout=a.phase_timeout, log_path=log_path)
    if rc != 0:
        raise BenchError(f"shardfs pack {src} exited {rc}: {file_tail(log_path)}")
    log(f"rtt {rtt:g} ms pack from sshfs: {pack_s:.1f} s, {nfiles / pack_s:,.0f} files/s, "
        f"{nbytes / pack_s / 1e6:,.1f} MB/s")
    rig.cold()
    rc, tar_s, tar_cpu, _ = run_measured(["tar", "-cf", tar_out, "-C", rig.net, "loose"],
                                         timeout=a.phase_timeout, log_path=log_path)
    if rc != 0:
        raise BenchError(f"tar -cf of {src} exited {rc}: {file_tail(log_path)}")
    log(f"rtt {rtt:g} ms tar -cf from sshfs: {tar_s:.1f} s, {nfiles / tar_s:,.0f} files/s, "
        f"{nbytes / tar_s / 1e6:,.1f} MB/s")
    os.unlink(tar_out)
    start = time.perf_counter()
    rc, _, _, _ = run_tool([a.shardfs, "verify", "--quiet", "-j", "16",
                            os.path.join(out, "index"), src],
                           timeout=a.phase_timeout, log_path=log_path)
    verify_s = time.perf_counter() - start
    log(f"verify of the pack against the tree on sshfs: exit {rc} in {verify_s:.1f} s")
    shutil.rmtree(out)
    return {"rtt_ms": rtt, "files": nfiles, "bytes": nbytes, "raw_bytes_per_s": raw,
            "pack_seconds": pack_s, "pack_cpu_seconds": pack_cpu,
            "tar_seconds": tar_s, "tar_cpu_seconds": tar_cpu,
            "pack_files_per_s": nfiles / pack_s, "tar_files_per_s": nfiles / tar_s,
            "pack_bytes_per_s": nbytes / pack_s, "tar_bytes_per_s": nbytes / tar_s,
            "ratio": tar_s / pack_s, "verify_ok": rc == 0, "verify_exit": rc,
            "verify_seconds": verify_s}


def pack_target(pk):
    return target_row("pack from sshfs vs tar -cf, files/s" + ("" if pk is None else
                                                               f" ({pk['rtt_ms']:g} ms)"),
                      None if pk is None else pk["ratio"], ">=", 8.0, "x",
                      "" if pk is None or pk["verify_ok"] else "the pack did not verify")


def pack_line(pk):
    return (f"pack from sshfs, rtt {pk['rtt_ms']:g} ms, cold, output on local disk, "
            f"{pk['files']:,} files, {fmt_bytes(pk['bytes'])}: shardfs pack "
            f"{pk['pack_seconds']:.1f} s ({pk['pack_files_per_s']:,.0f} files/s, "
            f"{pk['pack_bytes_per_s'] / 1e6:,.1f} MB/s), tar -cf {pk['tar_seconds']:.1f} s "
            f"({pk['tar_files_per_s']:,.0f} files/s, {pk['tar_bytes_per_s'] / 1e6:,.1f} MB/s): "
            f"{pk['ratio']:.2f}x; verify "
            + ("ok" if pk["verify_ok"] else f"FAILED (exit {pk['verify_exit']})")
            + f"; dd of one file over sshfs {pk['raw_bytes_per_s'] / 1e6:,.1f} MB/s")
