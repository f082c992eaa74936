"""Rich tables rendered from the Report (or a family's summary) for the terminal.

Everything here reads the JSON form of the report, so a saved report renders exactly as
the run that produced it.
"""
from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

PASS = Text("pass", style="bold green")
FAIL = Text("FAIL", style="bold red")
SKIP = Text("n/a", style="dim")


def verdict_text(passed: bool | None) -> Text:
    return SKIP if passed is None else (PASS if passed else FAIL)


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e4 or abs(value) < 1e-3:
            return f"{value:.{digits}e}"
        return f"{value:.{digits + 1}g}"
    return str(value)


def io_table(io_spec: dict[str, Any], title: str = "I/O") -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAVY, title_justify="left")
    for column in ("", "name", "dtype", "shape", "role", "description"):
        table.add_column(column)
    for direction, key in (("in", "inputs"), ("out", "outputs")):
        for t in io_spec[key]:
            shape = "[" + ", ".join(str(d) for d in t["shape"]) + "]"
            table.add_row(direction, t["name"], t["dtype"], Text(shape), t["role"], t.get("description", ""))
    return table


def facts_table(facts: dict[str, Any], title: str) -> Table:
    table = Table(title=title, box=box.SIMPLE, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in facts.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            value = "\n".join(", ".join(f"{k}={fmt(v)}" for k, v in item.items()) for item in value)
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        elif isinstance(value, dict):
            value = "\n".join(f"{k}: {fmt(v)}" for k, v in value.items())
        table.add_row(key.replace("_", " "), Text(fmt(value) if not isinstance(value, str) else value))
    return table


def render_inspect(info: dict[str, Any], console: Console) -> None:
    summary = dict(info["summary"])
    header = {"file": info["source"]["path"], "sha256": info["source"]["sha256"]}
    if info["source"].get("note"):
        header["chosen"] = info["source"]["note"]
    console.print(facts_table({**header, **summary}, title=f"{info['title']}"))
    console.print(io_table(info["io_spec"]))
    if info.get("graph_contents"):
        console.print(facts_table(info["graph_contents"], title="In the exported graph"))


def runtime_status(r: dict[str, Any], done: str) -> Text:
    """A runtime's outcome: unavailable (and why), failed (and why), or ``done``."""
    if not r["available"]:
        return Text(f"unavailable: {r['reason']}", style="yellow")
    if r["error"]:
        return Text(f"failed: {r['error']}", style="red")
    return Text(done, style="green")


def runtime_device(r: dict[str, Any]) -> str:
    return r.get("info", {}).get("device_name") or r["device"]


def runtimes_table(report: dict[str, Any]) -> Table:
    table = Table(title="Runtimes", box=box.SIMPLE_HEAVY, title_justify="left")
    for column in ("runtime", "device", "status", "first call ms", "median ms", "min ms"):
        table.add_column(column, justify="right" if "ms" in column else "left")
    for r in report["runtimes"]:
        status, device = runtime_status(r, "ran"), runtime_device(r)
        timing = r.get("timing", {})
        table.add_row(Text(r["name"]), Text(device), status, fmt(timing.get("first_call_ms")),
                      fmt(timing.get("median_ms")), fmt(timing.get("min_ms")))
    return table


def comparison_table(c: dict[str, Any]) -> Table:
    title = f"{c['candidate']} vs {c['reference']}"
    if c.get("shape"):  # validated at several shapes: say which one
        title += "  (" + ", ".join(f"{axis} {size}" for axis, size in c["shape"].items()) + ")"
    tolerances = {(o["atol"], o["rtol"]) for o in c["outputs"] if o["rule"] == "elementwise" and o.get("atol") is not None}
    caption = "; ".join(f"element-wise: |a-b| <= {fmt(a)} + {fmt(r)}*|ref|" for a, r in sorted(tolerances))
    table = Table(title=escape(title), caption=caption or None, box=box.SIMPLE_HEAVY, title_justify="left",
                  caption_justify="left")
    table.add_column("output", no_wrap=True)
    table.add_column("rule")
    for column in ("bit-match", "max_abs", "mean_abs", "max_rel", "cosine", "needed atol"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("detail")
    table.add_column("verdict", justify="right")
    for o in c["outputs"]:
        m = o["metrics"]
        bit = f"{100 * m['bit_match_rate']:.1f}%" if "bit_match_rate" in m else "-"
        table.add_row(Text(o["output"]), o["rule"], bit, fmt(m.get("max_abs")), fmt(m.get("mean_abs")),
                      fmt(m.get("max_rel")), fmt(m.get("cosine"), 7) if "cosine" in m else "-",
                      fmt(m.get("needed_atol")), Text(comparison_detail(o)), verdict_text(o["passed"]))
    return table


def comparison_detail(o: dict[str, Any]) -> str:
    """One output's comparison in words: what was checked, and its note (tables and card)."""
    m = o["metrics"]
    parts = []
    if o["rule"] == "exact" and m:
        parts.append("equal" if m.get("equal") else "differs")
    if o["rule"] == "agreement" and m:
        parts.append(f"{100 * m.get('agreement', 0):.2f}% agree, {m.get('ties', 0)} ties")
    if o["rule"] == "distribution" and m:
        z = max(m.get(k, 0.0) for k in ("z_mean", "z_second_moment", "z_frequency"))
        parts.append(f"z {fmt(z, 2)} of {fmt(m.get('z_limit'))} ({m.get('draws')} draws)")
    if o["rule"] == "elementwise" and m.get("elements") is not None and not o.get("scope"):
        parts.append(f"{m['elements']:,} elements")
    for key in ("scope", "note"):
        if o.get(key):
            parts.append(o[key])
    return "; ".join(parts)


def render_validation(report: dict[str, Any], console: Console) -> None:
    source = report["source"]
    lines = [f"[bold]{escape(report['title'])}[/] ({report['family']})", f"checkpoint {escape(source['path'])}"]
    if source.get("note"):
        lines.append(escape(source["note"]))
    ref = report.get("reference_export")
    if ref:
        same = ref.get("graph_identical")
        lines.append(f"official export {escape(ref['path'])}" + ("  [green](our graph is identical)[/]" if same else ""))
    inputs = report["inputs"]
    rows = ", ".join(f"{n} {k}" for k, n in inputs["rows"].items())
    lines.append(escape(f"inputs: batch {inputs['batch']} ({rows}), seed {inputs['seed']}, {inputs['digest'][:23]}..."))
    if inputs.get("shapes"):
        shapes = "; ".join(", ".join(f"{axis} {size}" for axis, size in shape["axes"].items())
                           for shape in inputs["shapes"])
        lines.append(escape(f"validated at {len(inputs['shapes'])} shapes: {shapes}"))
    console.print(Panel("\n".join(lines), title="rlparity validate", expand=False))
    console.print(runtimes_table(report))
    for c in report["comparisons"]:
        console.print(comparison_table(c))
    if report.get("extra", {}).get("decisions"):
        console.print(decisions_table(report["extra"]["decisions"]))
    if report.get("extra", {}).get("precision"):
        from rlparity.artifacts.device_tables import render_precision

        render_precision(report, console)
    for note in report.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(note)}")
    console.print(verdict_line(report))


def verdict_line(report: dict[str, Any]) -> Text:
    verdict = report["verdict"]
    failed = [f"{c['candidate']} vs {c['reference']}" for c in report["comparisons"] if not c["passed"]]
    if verdict == "pass":
        n = len(report["comparisons"])
        return Text(f"verdict: PASS ({n} comparison{'' if n == 1 else 's'})", style="bold green")
    if verdict == "mismatch":
        return Text(f"verdict: MISMATCH in {', '.join(failed)}", style="bold red")
    return Text("verdict: INCOMPLETE (a runtime failed or nothing was compared)", style="bold yellow")


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def decisions_table(view: dict[str, Any]) -> Table:
    """A family's decision view (Family.decision_view): inputs, scores, and each runtime's action."""
    caption = f"scores of {view['reference']}; inputs {view['inputs_digest'][:23]}..."
    table = Table(title=view["title"], caption=caption, box=box.SIMPLE_HEAVY, title_justify="left",
                  caption_justify="left")
    for column in view["columns"]:
        table.add_column(column, justify="right" if column == "row" or column.startswith("action ") else "left")
    for row in view["rows"]:
        table.add_row(*(Text(_cell(v)) for v in row))
    return table


def render_rollout(report: dict[str, Any], console: Console) -> None:
    """`rlparity rollout`: returns and episode lengths per runtime, and whether they acted alike."""
    section = report["extra"]["rollout"]
    source = report["source"]
    lines = [f"[bold]{escape(report['title'])}[/] ({report['family']})", f"model {escape(source['path'])}"]
    if source.get("note"):
        lines.append(escape(source["note"]))
    last_seed = section["seed"] + section["episodes"] - 1
    lines.append(escape(f"environment {section['env_id']}: {section['episodes']} episodes, seeds "
                        f"{section['seed']}..{last_seed} on every runtime"))
    console.print(Panel("\n".join(lines), title="rlparity rollout", expand=False))

    table = Table(title="Episodes", box=box.SIMPLE_HEAVY, title_justify="left")
    for column in ("runtime", "device", "status", "mean return", "std", "mean length", "std", "steps/s",
                   "policy us/step", "action fingerprint"):
        table.add_column(column, justify="left" if column in ("runtime", "device", "status", "action fingerprint") else "right")
    by_runtime = {r["runtime"]: r for r in section["results"]}
    for r in report["runtimes"]:
        played = by_runtime.get(r["name"])
        status, device = runtime_status(r, "played"), runtime_device(r)
        if played is None:
            table.add_row(r["name"], Text(device), status, *["-"] * 7)
            continue
        timing = r.get("timing", {})
        table.add_row(r["name"], Text(device), status, fmt(played["mean_return"]), fmt(played["std_return"]),
                      fmt(played["mean_length"]), fmt(played["std_length"]), _rate(timing.get("steps_per_s")),
                      _rate(1e3 * timing["policy_ms_per_step"] if timing.get("policy_ms_per_step") else None, 1),
                      played["fingerprint"][:23] + "...")
    console.print(table)
    for c in report["comparisons"]:
        console.print(comparison_table(c))
    console.print(rollout_verdict_line(report))


def _rate(value: float | None, decimals: int = 0) -> str:
    return "-" if value is None else f"{value:,.{decimals}f}"


def rollout_verdict_line(report: dict[str, Any]) -> Text:
    """As the exit code decides: a mismatch first, then a runtime that did not play, then a pass."""
    section = report["extra"]["rollout"]
    played = len(section["results"])
    failed = [c for c in report["comparisons"] if not c["passed"]]
    if failed:  # the failing pair itself: the earliest divergence may be another, within tolerance
        c = failed[0]
        where = _divergence_text(c["outputs"][0]["metrics"].get("first_divergence") or {})
        return Text(f"verdict: MISMATCH: {c['candidate']} acted differently from {c['reference']} first at {where}",
                    style="bold red")
    if played < len(report["runtimes"]) or played == 0:
        return Text("verdict: INCOMPLETE (a runtime did not play)", style="bold yellow")
    divergence = section.get("first_divergence")
    if divergence:
        a, b = divergence["runtimes"]
        return Text(f"verdict: PASS within tolerance: {b} first acted differently from {a} at "
                    f"{_divergence_text(divergence)}, within float tolerance; later differences are closed-loop "
                    "drift (see above)", style="bold green")
    if played == 1:
        return Text("verdict: PLAYED (one runtime: nothing to compare)", style="bold green")
    return Text(f"verdict: PASS (identical actions on all {played} runtimes)", style="bold green")


def _divergence_text(d: dict[str, Any]) -> str:
    max_abs = "-" if d.get("max_abs") is None else f"{d['max_abs']:.3g}"
    return f"episode {d.get('episode')}, step {d.get('step')} (max_abs {max_abs})"
