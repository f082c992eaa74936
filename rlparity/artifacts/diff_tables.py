"""Rich rendering of `rlparity diff` and `rlparity compare`, from their JSON forms."""
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
    fmt,
    runtimes_table,
    verdict_line,
)

MAX_DIFFERENCE_ROWS = 40
SEVERITY_STYLE = {"error": "bold red", "note": "yellow"}


def render_diff(data: dict[str, Any], console: Console) -> None:
    ref, cand = data["reference"], data["candidate"]
    inputs = data["inputs"]
    rows = ", ".join(f"{n} {k}" for k, n in inputs["rows"].items())
    source = "generated" if inputs["source"] == "generated" else f"loaded from {inputs['source']}"
    lines = [
        f"candidate {escape(cand['path'])}  [dim]sha256 {cand['sha256'][:16]}...[/]",
        f"reference {escape(ref['path'])}  [dim]sha256 {ref['sha256'][:16]}...[/]",
        escape(f"inputs: {source}, batch {inputs['batch']} ({rows}), {inputs['digest'][:23]}..."),
    ]
    console.print(Panel("\n".join(lines), title="rlparity diff", expand=False))
    console.print(contract_table(ref, cand))
    console.print(operator_table(ref["operators"], cand["operators"]))
    if data["differences"]:
        console.print(differences_table(data["differences"]))
    else:
        console.print("[green]no structural difference[/]: same I/O, weights and operators")
    if data.get("comparison"):
        console.print(comparison_table(data["comparison"]))
    else:
        console.print("[yellow]numbers not compared[/] (see the differences above)")
    if data.get("first_divergence"):
        console.print(divergence_panel(data["first_divergence"]))
    console.print(diff_verdict_line(data))


def contract_table(ref: dict[str, Any], cand: dict[str, Any]) -> Table:
    table = Table(title="Contract", box=box.SIMPLE_HEAVY, title_justify="left")
    table.add_column("")
    table.add_column("reference")
    table.add_column("candidate")
    table.add_column("", justify="center")

    def io(values: list[dict]) -> str:
        return "\n".join(f"{v['name']} {v['dtype']} {v['shape']}" for v in values) or "-"

    def opsets(o: dict[str, int]) -> str:
        return ", ".join(f"{domain} {version}" for domain, version in o.items())

    rows = [
        ("producer", ref["producer"] or "-", cand["producer"] or "-"),
        ("IR version", str(ref["ir_version"]), str(cand["ir_version"])),
        ("opset", opsets(ref["opsets"]), opsets(cand["opsets"])),
        ("inputs", io(ref["inputs"]), io(cand["inputs"])),
        ("outputs", io(ref["outputs"]), io(cand["outputs"])),
        ("nodes", str(ref["nodes"]), str(cand["nodes"])),
        ("initializers", f"{ref['initializers']} ({ref['parameters']:,} values)",
         f"{cand['initializers']} ({cand['parameters']:,} values)"),
    ]
    for label, a, b in rows:
        same = Text("=", style="green") if a == b else Text("≠", style="bold yellow")
        table.add_row(label, Text(a), Text(b), same)
    return table


def operator_table(ref: dict[str, int], cand: dict[str, int]) -> Table:
    table = Table(title="Operators", box=box.SIMPLE, title_justify="left")
    table.add_column("op")
    table.add_column("reference", justify="right")
    table.add_column("candidate", justify="right")
    for op in sorted(set(ref) | set(cand)):
        a, b = ref.get(op, 0), cand.get(op, 0)
        style = "" if a == b else "bold yellow"
        table.add_row(Text(op, style=style), Text(str(a), style=style), Text(str(b), style=style))
    return table


def differences_table(differences: list[dict[str, Any]]) -> Table:
    errors = sum(d["severity"] == "error" for d in differences)
    title = f"Differences: {errors} error(s), {len(differences) - errors} note(s)" if differences else "Differences: none"
    table = Table(title=title, box=box.SIMPLE_HEAVY, title_justify="left")
    for column in ("severity", "kind", "what"):  # each message names its subject
        table.add_column(column, no_wrap=column != "what")
    ordered = sorted(differences, key=lambda d: d["severity"] != "error")  # errors first, stable
    for d in ordered[:MAX_DIFFERENCE_ROWS]:
        table.add_row(Text(d["severity"], style=SEVERITY_STYLE.get(d["severity"], "")), d["kind"], Text(d["message"]))
    if len(ordered) > MAX_DIFFERENCE_ROWS:
        table.add_row("", "", Text(f"... and {len(ordered) - MAX_DIFFERENCE_ROWS} more (all of them in --json)",
                                   style="dim"))
    return table


def divergence_panel(d: dict[str, Any]) -> Panel:
    if d.get("error"):
        return Panel(escape(d["error"]), title="first divergence", expand=False, border_style="yellow")
    if not d.get("found"):
        text = (f"no intermediate value differs beyond tolerance ({d.get('values_compared', 0)} compared); "
                "the difference is in values that could not be paired across the graphs")
        return Panel(escape(text), title="first divergence", expand=False, border_style="yellow")
    lines = [f"[bold]{escape(d['node'])}[/] ({escape(d['op_type'])})  tensor {escape(d['tensor'])}"]
    if d.get("candidate_node") != d["node"] or d.get("candidate_op_type") != d["op_type"]:
        lines.append(f"candidate: {escape(str(d.get('candidate_node')))} ({escape(str(d.get('candidate_op_type')))}), "
                     f"paired by {d['matched_by']}")
    else:
        lines.append(f"paired by {d['matched_by']}")
    if d.get("failing") is not None:
        tolerance = f" beyond |a-b| <= {fmt(d['atol'])} + {fmt(d['rtol'])}*|ref|" if d.get("atol") is not None else ""
        lines.append(f"max_abs {fmt(d.get('max_abs'))}: {d['failing']} of {d['elements']} values{tolerance}")
    if d.get("inputs_agree"):
        lines.append("every input of this node agrees: the difference starts here")
    elif d.get("unmatched_inputs"):
        lines.append(escape(f"inputs not paired across the graphs: {', '.join(d['unmatched_inputs'])}"))
    for w in d.get("changed_weights", []):
        size = f"max_abs {fmt(w['max_abs'])}" if "max_abs" in w else w.get("note", "")
        lines.append(escape(f"reads weight {w['reference']}, which differs in the candidate ({size})"))
    lines.append(f"[dim]{d['values_compared']} intermediate values compared in topological order[/]")
    return Panel("\n".join(lines), title="first divergence", expand=False, border_style="red")


def diff_verdict_line(data: dict[str, Any]) -> Text:
    if data["drop_in"]:
        return Text("verdict: DROP-IN (same contract, every output within tolerance)", style="bold green")
    errors = [d for d in data["differences"] if d["severity"] == "error"]
    kinds = ", ".join(dict.fromkeys(d["kind"] for d in errors))
    return Text(f"verdict: NOT A DROP-IN: {len(errors)} error(s): {kinds}", style="bold red")


def render_compare(report: dict[str, Any], console: Console) -> None:
    runs = report["extra"]["runs"]
    lines = [f"[bold]{escape(report['title'])}[/] ({escape(report['family'])})",
             f"reference runtime {escape(report['extra']['compare']['reference'])}"]
    inputs = report.get("inputs") or {}
    if inputs.get("digest"):
        lines.append(escape(f"inputs: batch {inputs.get('batch')}, seed {inputs.get('seed')}, {inputs['digest'][:23]}..."))
    console.print(Panel("\n".join(lines), title="rlparity compare", expand=False))
    table = Table(title="Saved runs", box=box.SIMPLE_HEAVY, title_justify="left")
    for column in ("run", "saved", "host", "versions", "runtimes"):
        table.add_column(column)
    for run in runs:
        host = run["host"]
        versions = ", ".join(f"{k} {v}" for k, v in run["versions"].items() if k in ("torch", "onnxruntime", "torch_npu"))
        table.add_row(Text(run["path"]), Text(str(run.get("created") or "-")),
                      Text(f"{host.get('hostname') or '?'} ({host.get('machine', '?')}, python {host.get('python', '?')})"),
                      Text(versions),
                      Text(", ".join(run["runtimes"])))
    console.print(table)
    console.print(runtimes_table(report))
    for c in report["comparisons"]:
        console.print(comparison_table(c))
    for note in report.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(note)}")
    console.print(verdict_line(report))
