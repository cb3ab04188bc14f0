"""--plot FILE.png: every figure's ratio to the loose tree (loose = 1.0), the systems side by
side in grouped bars; for the main run also the mount times (ms), which the loose tree has not;
for --netfs each path against the loose tree on local disk, and the mount times.

The driver stays on the standard library: it writes the report's JSON and runs this file under
--plot-python (Debian's /usr/bin/python3 with python3-matplotlib), `bench_plot.py REPORT.json
OUT.png`, which draws with the Agg backend (no display). The same command redraws a saved
--json report.
"""

import json
import os
import subprocess
import sys

HERE = os.path.abspath(__file__)
COLORS = {"loose": "#9e9e9e", "shardfs": "#1f77b4", "shardfs-kernel": "#d62728",
          "squashfuse": "#2ca02c", "kernel": "#9467bd", "archivemount": "#8c564b",
          "mount": "#1f77b4", "mount_kernel": "#d62728",
          "loose on sshfs": "#ff7f0e", "shardfs default": "#1f77b4", "loose local": "#9e9e9e"}
ROW_TITLES = {"walk": "readdir walk", "lstat": "lstat walk", "read_tree1": "read tree order",
              "read_rand4": "read shuffled"}


# -- the driver's side (standard library) ------------------------------------------------------

def unavailable(python):
    """Why --plot cannot draw with `python` (no interpreter, no matplotlib), or None."""
    try:
        p = subprocess.run([python, "-c", "import matplotlib"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"--plot-python {python}: {e}"
    if p.returncode != 0:
        return (f"no matplotlib for {python} (Debian: python3-matplotlib, "
                "scripts/install-deps.sh test)")
    return None


def plot(a, report, scratch):
    """Draws `report` into a.plot under a.plot_python. Raises BenchError on failure."""
    from bench_common import BenchError, log
    path = os.path.join(scratch, "plot-report.json")
    with open(path, "w") as f:
        json.dump(report, f)
    p = subprocess.run([a.plot_python, HERE, path, a.plot], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        raise BenchError(f"--plot: {p.stdout.strip()[-2000:]}")
    log(f"wrote {a.plot}")


# -- the drawing (matplotlib) ------------------------------------------------------------------

def main_rows(report):
    """(title, rows, systems, values, mount_rows): ratio rows of the main run. A read's ratio is
    its files/s over the loose tree's, a walk's the loose tree's time over its own: above 1 is
    faster than the loose tree."""
    systems = report["systems"]
    loose = systems["loose"]["figures"]
    names = [n for n, s in systems.items()
             if n != "raw" and s["status"] == "ok" and s["figures"]]
    rows, values = [], {}
    for phase in ("read_tree1", "read_rand4", "walk", "lstat"):
        for temp in ("warm", "cold"):
            key = f"{phase}_{temp}"
            ref = loose.get(key, {}).get("median")
            if not ref:
                continue
            row = f"{ROW_TITLES[phase]}\n{temp}"
            rows.append(row)
            for n in names:
                f = systems[n]["figures"].get(key)
                if f and f["status"] == "ok" and f["median"]:
                    v = f["median"] / ref if phase.startswith("read") else ref / f["median"]
                    values[(row, n)] = v
    mounts, mvalues = [], {}
    for temp, title in (("warm", "warm"), ("cold", "cold"), ("build", "image build")):
        row = f"mount\n{title}"
        for n in names:
            f = systems[n]["figures"].get(f"mount_{temp}")
            if f and f["status"] == "ok" and f["median"]:
                mvalues[(row, n)] = f["median"]
                if row not in mounts:
                    mounts.append(row)
    d = report["dataset"]
    reps = report["params"]["reps"]
    title = (f"shardfs bench: {d['files']:,} files, median of {reps} rep{'s' * (reps > 1)} "
             "(reads: files/s, walks: 1/time; vs the loose tree, above 1 is faster)")
    return title, rows, names, values, (mounts, [n for n in names if n != "loose"], mvalues)


def loader_rows(report):
    paths = [("loose", "loose"), ("mount", "shardfs"), ("kernel", "shardfs-kernel")]
    paths = [(k, label) for k, label in paths
             if any(r.get(k) for r in report["rows"])]
    rows, values = [], {}
    for r in report["rows"]:
        if r["status"] != "ok":
            continue
        w = r["workers"]
        row = f"{r['mode']}, {w} worker{'s' * (w > 1)}\n{r['temp']}"
        rows.append(row)
        lo = r["loose"]["samples_per_s"]
        for k, label in paths:
            got = r.get(k)
            if got and got.get("samples_per_s") and lo:
                values[(row, label)] = got["samples_per_s"] / lo
    d = report["dataset"]
    title = (f"shardfs bench --loader: {d['samples']:,} JPEGs, torch DataLoader "
             "(samples/s vs the loose tree)")
    return title, rows, [label for _, label in paths], values, None


def netfs_rows(report):
    """--netfs: samples/s of each path over the loose tree on local disk's, per delay and
    temperature; the second panel the shardfs mount's time (ms), cold and warm, per delay."""
    paths = [("loose_netfs", "loose on sshfs"), ("shardfs", "shardfs default"),
             ("loose_local", "loose local")]
    rows, values = [], {}
    for r in report["rows"]:
        if r["status"] != "ok":
            continue
        row = f"{r['rtt_ms']:g} ms\n{r['temp']}"
        rows.append(row)
        lo = r["loose_local"]["samples_per_s"]
        for k, label in paths:
            if r[k]["samples_per_s"] and lo:
                values[(row, label)] = r[k]["samples_per_s"] / lo
    mrows, mvalues = [], {}
    for r in report["per_rtt"]:
        for temp in ("cold", "warm"):
            v = r.get(f"mount_{temp}_ms")
            if v:
                row = f"{r['rtt_ms']:g} ms\n{temp}"
                mrows.append(row)
                mvalues[(row, "shardfs default")] = v
    d, p = report["dataset"], report["params"]
    per_run = f"{p['samples']:,} samples per run" if p["samples"] else "one epoch per run"
    title = (f"shardfs bench --netfs: {d['samples']:,} JPEGs on sshfs, torch DataLoader, "
             f"{per_run}\n(samples/s vs the loose tree on local disk)")
    return (title, rows, [label for _, label in paths], values,
            (mrows, ["shardfs default"], mvalues) if mrows else None)


def bars(ax, rows, names, values, fmt, log_scale):
    import numpy as np
    x = np.arange(len(rows))
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        ys = [values.get((r, n), 0) for r in rows]
        pos = x - 0.4 + width * (i + 0.5)
        b = ax.bar(pos, ys, width, label=n, color=COLORS.get(n))
        for rect, y in zip(b, ys):
            if y:
                ax.annotate(fmt(y), (rect.get_x() + rect.get_width() / 2, y),
                            ha="center", va="bottom", fontsize=7, rotation=90,
                            xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(x)
    ax.set_xticklabels(rows, fontsize=8)
    if log_scale:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3, which="both")
    ax.set_axisbelow(True)


def draw(report, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    schema = report.get("schema", "")
    rows_of = (loader_rows if schema.startswith("shardfs-bench-loader") else
               netfs_rows if schema.startswith("shardfs-bench-netfs") else main_rows)
    title, rows, names, values, mounts = rows_of(report)
    panels = 2 if mounts and mounts[0] else 1
    fig, axes = plt.subplots(1, panels, figsize=(13 if panels == 2 else 10, 6),
                             gridspec_kw={"width_ratios": [3, 1]} if panels == 2 else None,
                             squeeze=False)
    ax = axes[0][0]
    bars(ax, rows, names, values, lambda v: f"{v:.2f}x", True)
    ax.axhline(1.0, color="black", linewidth=0.8)
    lo = min([v for v in values.values() if v] + [1.0])
    hi = max([v for v in values.values() if v] + [1.0])
    ax.set_ylim(lo / 1.6, hi * 2.2)
    ax.yaxis.set_major_locator(FixedLocator([0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5,
                                             2, 3, 5, 10, 20, 50, 100]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.set_ylabel("vs the loose tree (loose = 1.0; log scale)")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=10)
    if panels == 2:
        mrows, mnames, mvalues = mounts
        ax2 = axes[0][1]
        bars(ax2, mrows, mnames, mvalues,
             lambda v: f"{v:.1f} ms" if v < 100 else f"{v:,.0f} ms", True)
        hi = max(mvalues.values())
        ax2.set_ylim(min(mvalues.values()) / 1.6, hi * 6)
        ax2.set_ylabel("ms (log scale; lower is faster)")
        ax2.set_title("mount time", fontsize=10)
        ax2.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: bench_plot.py REPORT.json OUT.png")
    with open(sys.argv[1]) as f:
        draw(json.load(f), sys.argv[2])
