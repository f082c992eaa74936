"""The bench plot: latency and decisions per second against batch size, one line per runtime.

matplotlib is an optional extra (``pip install 'rlparity[plot]'``), imported only here and
only when a plot is asked for; the figure is drawn with the Agg canvas, without pyplot, so
no display and no global backend state are involved.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rlparity.artifacts.device_tables import bench_label
from rlparity.errors import UserError

INSTALL_HINT = "the plot needs matplotlib: pip install 'rlparity[plot]' (or matplotlib)"


def require_matplotlib(path: str | Path) -> None:
    """Fail before anything is measured when the plot cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError(INSTALL_HINT, path) from None
    if Path(path).suffix.lower() != ".png":
        raise UserError("the plot is written as PNG: give a file name ending in .png", path)


def plot_bench(bench: dict[str, Any], path: str | Path, title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series: dict[str, list[dict]] = {}
    for r in bench["results"]:
        series.setdefault(bench_label(r), []).append(r)

    figure = Figure(figsize=(11, 4.5), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    latency, throughput = figure.subplots(1, 2)
    for label, rows in series.items():
        rows = sorted(rows, key=lambda r: r["batch"])
        batches = [r["batch"] for r in rows]
        line, = latency.plot(batches, [r["p50_ms"] * 1e3 for r in rows], marker="o", label=label)
        latency.fill_between(batches, [r["min_ms"] * 1e3 for r in rows], [r["p99_ms"] * 1e3 for r in rows],
                             color=line.get_color(), alpha=0.15, linewidth=0)
        throughput.plot(batches, [r["decisions_per_s"] for r in rows], marker="o", label=label, color=line.get_color())
    latency.set(xscale="log", yscale="log", xlabel="batch size", ylabel="latency per call (µs)",
                title="p50 per call (band: min to p99)")
    throughput.set(xscale="log", yscale="log", xlabel="batch size", ylabel="decisions per second",
                   title="throughput at p50")
    for axes in (latency, throughput):
        batches = sorted({r["batch"] for r in bench["results"]})
        if batches:
            axes.set_xticks(batches, [str(b) for b in batches])
        axes.grid(True, which="both", alpha=0.3)
    latency.legend(fontsize="small")
    overhead = bench.get("overhead_ms")
    note = f"  (harness overhead {overhead * 1e3:.2f} µs per call)" if overhead is not None else ""
    figure.suptitle(f"{title}{note}", fontsize="medium")
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="png")
    except OSError as e:
        raise UserError(f"cannot write the plot: {e.strerror or e}", path) from None
