"""Rich tables for the accelerator evidence: npu-check, bench and the precision sweep.

Like tables.py, everything renders from the report's JSON form.
"""
from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rlparity.artifacts.tables import (
    comparison_table,
    facts_table,
    fmt,
    runtimes_table,
    verdict_text,
)


def _us(ms: float | None) -> str:
    """Milliseconds shown as microseconds: these networks answer in tens of them."""
    return "-" if ms is None else f"{ms * 1e3:,.1f}"


# -- npu-check -----------------------------------------------------------------------------------

def render_npu_check(report: dict[str, Any], console: Console) -> None:
    section = report["extra"]["npu_check"]
    console.print(Panel(f"[bold]{escape(report['title'])}[/] ({report['family']}) on [bold]{section['device']}[/]\n"
                        f"checkpoint {escape(report['source']['path'])}", title="rlparity npu-check", expand=False))
    console.print(facts_table(section["environment"], title="Software"))
    if section.get("devices"):
        devices = section["devices"]
        names = ", ".join(f"{i}: {n}" for i, n in enumerate(devices["names"]))
        console.print(facts_table({"visible devices": devices["count"], "names": names}, title="Devices"))
    table = Table(title="Proofs", box=box.SIMPLE_HEAVY, title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("verdict", justify="right")
    table.add_column("detail")
    for c in section["checks"]:
        table.add_row(c["check"], verdict_text(c["passed"]), Text(c["detail"]))
    if report["runtimes"]:
        console.print(runtimes_table(report))
    for c in report["comparisons"]:
        console.print(comparison_table(c))
    console.print(table)
    if section["checks"] and section["checks"][0]["passed"] is False:
        return  # the device line says it all; the caller prints the error and exits 4
    if all(c["passed"] is not False for c in section["checks"]):
        console.print(Text(f"npu-check: PASS on {section['device']} ({len(section['checks'])} proofs)", style="bold green"))
    else:
        failed = [c["check"] for c in section["checks"] if c["passed"] is False]
        console.print(Text(f"npu-check: FAILED: {', '.join(failed)}", style="bold red"))


# -- bench ----------------------------------------------------------------------------------------

def bench_label(r: dict[str, Any]) -> str:
    """A bench result's series, as the table and the plot name it: runtime, graph, dtype."""
    return r["runtime"] + (" graph" if r["graph"] else "") + (f" {r['dtype']}" if r["dtype"] != "float32" else "")


def render_bench(report: dict[str, Any], console: Console) -> None:
    bench = report["extra"]["bench"]
    lines = [f"[bold]{escape(report['title'])}[/] ({report['family']})", f"checkpoint {escape(report['source']['path'])}",
             f"{bench['runs']} timed calls after {bench['warmup']} warm-up calls per runtime and batch; "
             f"torch in {bench.get('dtype', 'float32')}",
             "one call: numpy inputs on the host -> outputs on the host, device synchronised around it",
             f"harness overhead (empty call, p50): {_us(bench['overhead_ms'])} µs"]
    console.print(Panel("\n".join(lines), title="rlparity bench", expand=False))
    table = Table(title="Latency per call (µs)", box=box.SIMPLE_HEAVY, title_justify="left",
                  caption="first call: prepare (session creation / module to device / graph capture) + first run; "
                          "forward: device-resident inputs, no host copies", caption_justify="left")
    for column in ("runtime", "batch", "first call", "min", "p50", "p90", "p99", "max", "decisions/s",
                   "forward p50", "outputs"):  # p95 is in the JSON
        table.add_column(column, justify="left" if column in ("runtime", "outputs") else "right",
                         no_wrap=column != "runtime")
    for r in bench["results"]:
        check = verdict_text(r.get("matches_reference"))
        table.add_row(bench_label(r), str(r["batch"]), _us(r["first_call_ms"]), _us(r["min_ms"]), _us(r["p50_ms"]),
                      _us(r["p90_ms"]), _us(r["p99_ms"]), _us(r["max_ms"]),
                      f"{r['decisions_per_s']:,.0f}", _us(r.get("forward_p50_ms")), check)
    console.print(table)
    for r in report["runtimes"]:
        if not r["available"]:
            console.print(f"[yellow]{escape(r['name'])}: unavailable: {escape(r['reason'])}[/]")
    for e in bench.get("errors", []):
        console.print(f"[red]{escape(e['runtime'])}{' graph' if e['graph'] else ''} batch {e['batch']}: "
                      f"{escape(e['error'])}[/]")
    for c in report["comparisons"]:
        if not c["passed"]:
            console.print(comparison_table(c))
    if bench.get("plot"):
        console.print(f"plot: {escape(bench['plot'])}")


# -- the precision sweep ---------------------------------------------------------------------------

def render_precision(report: dict[str, Any], console: Console) -> None:
    sweep = report["extra"]["precision"]
    summary = Table(title="Precision sweep (each dtype against the float32 CPU reference)", box=box.SIMPLE_HEAVY,
                    title_justify="left")
    for column in ("dtype", "device", "atol", "rtol", "kept float32", "worst max_abs", "naive cast max_abs", "verdict"):
        summary.add_column(column, justify="right" if column in ("atol", "rtol") or "max_abs" in column else "left")
    for entry in sweep:
        comparisons = entry.get("comparisons", [])
        worst = max((o["metrics"].get("max_abs", 0.0) for c in comparisons for o in c["outputs"]
                     if o["rule"] == "elementwise"), default=None)
        naive = entry.get("naive_cast") or {}
        naive_text = "-" if not naive else (
            f"{fmt(naive.get('max_abs'))} ({'pass' if naive.get('passed') else 'FAIL'})" if "error" not in naive
            else "failed")
        kept = f"{len(entry.get('float32_modules', []))} module(s)" if entry.get("float32_modules") else "-"
        verdict = verdict_text(all(c["passed"] for c in comparisons)) if comparisons else Text(
            f"not run: {entry.get('error', '')}", style="red")
        summary.add_row(entry["dtype"], entry["device"], fmt(entry["tolerance"]["atol"]), fmt(entry["tolerance"]["rtol"]),
                        kept, fmt(worst), naive_text, verdict)
    for entry in sweep:
        for c in entry.get("comparisons", []):
            console.print(comparison_table(c))
    console.print(summary)
    if any(entry.get("naive_cast") and not entry["naive_cast"].get("passed", True) for entry in sweep):
        console.print("[dim]naive cast: every floating tensor cast (module.to(dtype)), normalizer statistics "
                      "included; the sweep keeps those in float32.[/]")
