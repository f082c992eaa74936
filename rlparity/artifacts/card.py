"""The model card (README.md of a packaged model), rendered from the Report JSON only.

Every figure in the card is read from the report, so the evidence a model repository
shows cannot drift from what was measured. The front matter is what the Hugging Face Hub
reads (library_name, tags, base_model, model-index with rollout returns); it is built
with huggingface_hub's ModelCardData and parsed back by its ModelCard before use.

Sections for a benchmark (``extra["bench"]``), closed-loop rollouts (``extra["rollout"]``)
and a precision sweep (``extra["precision"]``) appear only when the report holds them.
"""
from __future__ import annotations

from pathlib import PurePath
from typing import Any

from rlparity.artifacts.tables import (
    comparison_detail,
    fmt,
    runtime_device,
    runtime_status,
)

# Files a package holds besides the export, and what each is (the package writes them).
PACKAGE_FILES = {
    "report.json": "the rlparity report: every figure in this card comes from it",
    "inputs.npz": "the inputs every runtime received (`np.load`; names as in the I/O table)",
    "outputs.npz": "what each runtime returned, keyed `runtime/output`",
    "environment.json": "versions of every installed library, the host and the devices",
    "MANIFEST.sha256": "sha256 of every file: `sha256sum -c MANIFEST.sha256`",
}
# The runtime whose rollout return heads the model-index: the export this card describes.
HEADLINE_RUNTIMES = ("ort-cpu", "ort-ref")


def model_name(report: dict[str, Any]) -> str:
    """A short name for the model: the checkpoint's file (or folder) name without suffix."""
    path = PurePath(report["source"]["path"])
    return path.stem if path.suffix else path.name


def card_data(report: dict[str, Any], base_model: str | None = None):
    """The Hub front matter, as huggingface_hub's ModelCardData."""
    from huggingface_hub import EvalResult, ModelCardData

    rollout = report.get("extra", {}).get("rollout")
    env_id = rollout.get("env_id") if rollout else None
    tags = ["reinforcement-learning", "onnx", "rlparity", report["family"]]
    if env_id:
        tags.append(env_id)
    eval_results = None
    if rollout and rollout.get("results"):
        headline = _headline(rollout["results"])
        eval_results = [EvalResult(
            task_type="reinforcement-learning", task_name="reinforcement-learning",
            dataset_type=env_id, dataset_name=env_id,
            metric_type="mean_reward", metric_name="mean_reward",
            metric_value=f"{headline['mean_return']:.2f} +/- {headline['std_return']:.2f}",
            verified=False,
        )]
    return ModelCardData(
        library_name="onnx",
        pipeline_tag="reinforcement-learning",
        tags=tags,
        base_model=base_model,
        model_name=model_name(report) if eval_results else None,  # model-index's name, nothing else
        eval_results=eval_results,
    )


def _headline(results: list[dict[str, Any]]) -> dict[str, Any]:
    by_runtime = {r["runtime"]: r for r in results}
    return next((by_runtime[n] for n in HEADLINE_RUNTIMES if n in by_runtime), results[0])


def render_card(report: dict[str, Any], onnx_name: str, base_model: str | None = None,
                files: dict[str, str] | None = None) -> str:
    """README.md for a package: front matter, then the evidence, all from ``report``.

    ``files`` maps each file of the package to what it is (default: the export and
    PACKAGE_FILES); it only names files, it adds no figure.
    """
    from huggingface_hub import ModelCard

    if files is None:
        files = {onnx_name: "the ONNX export", **PACKAGE_FILES}
    data = card_data(report, base_model)
    sections = [
        _summary(report, onnx_name),
        _files(files),
        _usage(report, onnx_name),
        _io(report),
        _graph_contents(report),
        _validation(report),
        _timing(report),
        _bench(report),
        _rollout(report),
        _precision(report),
        _reproduce(report),
        _environment(report),
    ]
    body = "\n\n".join(s.strip("\n") for s in sections if s) + "\n"
    text = f"---\n{data.to_yaml()}\n---\n\n{body}"
    ModelCard(text)  # huggingface_hub parses the front matter back; raises if it cannot
    return text


def section_problem(name: str, section: Any) -> str | None:
    """Why ``extra[name]`` of another report cannot be rendered into a card (it is not in the
    shape rlparity writes), or None. Sections the card does not show are not checked."""
    render = {"bench": _bench, "rollout": _rollout, "precision": _precision}.get(name)
    if render is None:
        return None
    report = {"family": "-", "source": {"path": "-"}, "extra": {name: section}}
    try:
        render(report)
        card_data(report)  # the model-index reads the rollout returns
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        return f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"
    return None


# -- sections ------------------------------------------------------------------------
def _summary(report: dict[str, Any], onnx_name: str) -> str:
    source, export = report["source"], report.get("export", {})
    name = model_name(report)
    checkpoint = PurePath(source["path"]).name
    facts = [f"step {source['step']:,}"] if source.get("step") is not None else []
    if source.get("sha256"):
        facts.append(f"sha256 `{source['sha256']}`")
    lines = [
        f"# {name}: ONNX export verified by rlparity",
        "",
        _verdict_sentence(report),
        "",
        f"A {report['title']} (family `{report['family']}`), checkpoint `{checkpoint}`"
        + (f" ({', '.join(facts)})" if facts else "")
        + ", rebuilt in pure PyTorch by rlparity and exported to ONNX as "
        f"`{onnx_name}` (opset {export.get('opset', '-')}, {export.get('bytes', 0):,} bytes, "
        f"sha256 `{export.get('sha256', '-')}`).",
    ]
    ref = report.get("reference_export")
    if ref:
        official = PurePath(ref["path"]).name
        made_by = ", ".join(x for x in (ref.get("producer"), f"opset {ref['opset']}" if ref.get("opset") else None) if x)
        if ref.get("graph_identical"):
            lines += ["", f"Its graph is identical, node for node, to the official export `{official}`"
                          + (f" ({made_by})" if made_by else "") + "."]
        else:
            lines += ["", f"Official export compared with: `{official}`" + (f" ({made_by})" if made_by else "")
                          + "; the graphs differ, and the validation below compares their outputs."]
    return "\n".join(lines)


def _verdict_sentence(report: dict[str, Any]) -> str:
    pairs = [f"{c['candidate']} vs {c['reference']}" for c in report["comparisons"]]
    verdict = report.get("verdict", "")
    if verdict == "pass":
        scope = "the one comparison" if len(pairs) == 1 else f"all {len(pairs)} comparisons"
        return f"**Verdict: PASS.** Every output agrees within tolerance in {scope} ({', '.join(pairs)})."
    if verdict == "mismatch":
        failed = [f"{c['candidate']} vs {c['reference']}" for c in report["comparisons"] if not c["passed"]]
        return f"**Verdict: MISMATCH** in {', '.join(failed)}. See the validation tables."
    return "**Verdict: INCOMPLETE.** A runtime failed or nothing was compared; see the runtimes table."


def _files(files: dict[str, str]) -> str:
    rows = [[f"`{name}`", what] for name, what in files.items()]
    return "## Files\n\n" + md_table(["file", "what"], rows)


def _usage(report: dict[str, Any], onnx_name: str) -> str:
    outputs = report["io_spec"]["outputs"]
    deterministic = next((t["name"] for t in outputs if t["role"] == "deterministic"), outputs[-1]["name"])
    ran = [r["name"] for r in report["runtimes"] if r["available"] and not r.get("error")]
    runtime = "ort-cpu" if "ort-cpu" in ran else (ran[0] if ran else None)  # ort-cpu ran this very file
    check = "" if runtime is None else f"""
expected = np.load("outputs.npz")["{runtime}/{deterministic}"]
print(np.abs(outputs["{deterministic}"] - expected).max())"""
    return f"""## Run it

```python
import numpy as np
import onnxruntime as ort

session = ort.InferenceSession("{onnx_name}", providers=["CPUExecutionProvider"])
inputs = dict(np.load("inputs.npz"))          # the inputs of the validation below
outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs))){check}
```"""


def _io(report: dict[str, Any]) -> str:
    rows = []
    for direction, key in (("in", "inputs"), ("out", "outputs")):
        for t in report["io_spec"][key]:
            shape = "[" + ", ".join(str(d) for d in t["shape"]) + "]"
            rows.append([direction, f"`{t['name']}`", t["dtype"], shape, t["role"], t.get("description", "")])
    return "## Inputs and outputs\n\n" + md_table(["", "name", "dtype", "shape", "role", "description"], rows)


def _graph_contents(report: dict[str, Any]) -> str:
    contents = report.get("graph_contents") or {}
    if not contents:
        return ""
    rows = [[part, what] for part, what in contents.items()]
    return "## What is inside the graph\n\n" + md_table(["part", "in the exported graph?"], rows)


def _validation(report: dict[str, Any]) -> str:
    inputs = report["inputs"]
    rows = inputs.get("rows", {})
    edge = [f"{name} ({n})" if n > 1 else name for name, n in rows.items() if name != "random"]
    lines = ["## Validation", ""]
    described = f"The same inputs went through every runtime: batch {inputs['batch']}"
    if edge:
        described += f", edge cases first ({', '.join(edge)}), then {rows.get('random', 0)} seeded random rows"
    described += f"; seed {inputs['seed']}; digest `{inputs['digest']}`."
    lines.append(described)
    if inputs.get("draws"):
        lines.append(f"Sampled outputs are compared by distribution over {inputs['draws']} draws on "
                     f"{inputs['draw_rows']} rows, since sampling cannot match element by element.")
    tolerances = sorted({(o["atol"], o["rtol"]) for c in report["comparisons"] for o in c["outputs"]
                         if o["rule"] == "elementwise" and o.get("atol") is not None})
    if tolerances:
        lines.append("Element-wise outputs pass when " + "; ".join(
            f"`|a - b| <= {fmt(a)} + {fmt(r)} * |ref|`" for a, r in tolerances)
            + " for every element. Bit-match is the share of elements whose float32 bits are identical; "
              "needed atol is the smallest atol that would have passed.")
    for c in report["comparisons"]:
        lines += ["", f"### {c['candidate']} vs {c['reference']}: {'pass' if c['passed'] else 'FAIL'}", "",
                  comparison_table(c["outputs"])]
    for note in report.get("notes", []):
        lines += ["", f"> note: {note}"]
    return "\n".join(lines)


def comparison_table(outputs: list[dict[str, Any]]) -> str:
    rows = []
    for o in outputs:
        m = o["metrics"]
        rows.append([
            f"`{o['output']}`", o["rule"],
            f"{100 * m['bit_match_rate']:.2f}%" if "bit_match_rate" in m else "-",
            fmt(m.get("max_abs")), fmt(m.get("max_rel")),
            fmt(m.get("cosine"), 7) if "cosine" in m else "-",
            fmt(m.get("needed_atol")), comparison_detail(o), "pass" if o["passed"] else ("FAIL" if o["passed"] is False else "n/a"),
        ])
    return md_table(["output", "rule", "bit-match", "max_abs", "max_rel", "cosine", "needed atol", "detail", "verdict"],
                    rows, right=range(2, 7))


def _timing(report: dict[str, Any]) -> str:
    rows = []
    for r in report["runtimes"]:
        t = r.get("timing", {})
        rows.append([r["name"], runtime_device(r), runtime_status(r, "ran").plain, fmt(t.get("first_call_ms")),
                     fmt(t.get("median_ms")), fmt(t.get("min_ms")), str(t.get("repeats", "-"))])
    host = report.get("host", {})
    return ("## Runtimes and timing\n\n"
            f"Wall-clock times of one call on the validation batch of {report['inputs']['batch']} rows "
            f"(the first call includes loading and compilation), on {host.get('processor') or '-'} "
            f"({host.get('platform') or '-'}). `rlparity bench` measures latency properly.\n\n"
            + md_table(["runtime", "device", "status", "first call ms", "median ms", "min ms", "timed calls"],
                       rows, right=range(3, 7)))


def _bench(report: dict[str, Any]) -> str:
    bench = report.get("extra", {}).get("bench")
    if not bench:
        return ""
    rows = [[r["runtime"], r["device"], r["dtype"], str(r["batch"]), fmt(bool(r.get("graph"))),
             fmt(r["first_call_ms"]), fmt(r["min_ms"]), fmt(r["p50_ms"]), fmt(r["p90_ms"]), fmt(r["p95_ms"]),
             fmt(r["p99_ms"]), fmt(r["max_ms"]), f"{r['decisions_per_s']:,.0f}"]
            for r in bench["results"]]
    lines = ["## Latency benchmark", "",
             f"{bench['runs']} timed calls per row after {bench['warmup']} warm-up calls, the device synchronised "
             f"around each call; the harness's own overhead is {fmt(bench['overhead_ms'])} ms per call. "
             "Decisions per second = batch / p50.", "",
             md_table(["runtime", "device", "dtype", "batch", "graph", "first call ms", "min ms", "p50 ms",
                       "p90 ms", "p95 ms", "p99 ms", "max ms", "decisions/s"], rows, right=range(3, 13))]
    if bench.get("plot"):
        lines += ["", f"![latency against batch size per runtime]({bench['plot']})"]
    lines += _measured_elsewhere(report, "bench")
    return "\n".join(lines)


def _rollout(report: dict[str, Any]) -> str:
    rollout = report.get("extra", {}).get("rollout")
    if not rollout:
        return ""
    rows = [[r["runtime"], fmt(r["mean_return"]), fmt(r["std_return"]), fmt(r["mean_length"]),
             fmt(r["std_length"]), ", ".join(fmt(x) for x in r["returns"]), f"`{r['fingerprint']}`"]
            for r in rollout["results"]]
    lines = ["## Closed-loop rollouts", "",
             f"The policy acted in `{rollout['env_id']}` for {rollout['episodes']} episodes per runtime, "
             f"seed {rollout['seed']}, the same seeds on every runtime. The fingerprint is the sha256 of the "
             "runtime's action sequence.", "",
             md_table(["runtime", "mean return", "std return", "mean length", "std length", "returns", "fingerprint"],
                      rows, right=range(1, 5)), ""]
    divergence = rollout.get("first_divergence")
    if len(rollout["results"]) < 2:
        lines.append(f"Only {', '.join(r['runtime'] for r in rollout['results']) or 'no runtime'} played: "
                     "no other runtime to compare its actions with.")
    elif rollout.get("identical_actions"):
        lines.append("Every runtime took identical actions at every step of every episode.")
    elif divergence:
        a, b = divergence["runtimes"]
        lines.append(f"The action sequences first diverge in episode {divergence['episode']}, step "
                     f"{divergence['step']}, between {a} and {b} (max_abs {fmt(divergence['max_abs'])}).")
    else:
        lines.append("The runtimes' action sequences are not identical.")
    lines += _measured_elsewhere(report, "rollout")
    return "\n".join(lines)


def _precision(report: dict[str, Any]) -> str:
    sweep = report.get("extra", {}).get("precision")
    if not sweep:
        return ""
    lines = ["## Precision", "",
             "The rebuild cast to each dtype on the device (normalizer statistics kept in float32), against "
             "the float32 CPU reference, each dtype with its own default tolerance."]
    for entry in sweep:
        for c in entry["comparisons"]:
            lines += ["", f"### {entry['dtype']} on {entry['device']}: {c['candidate']} vs {c['reference']}: "
                          f"{'pass' if c['passed'] else 'FAIL'}", "", comparison_table(c["outputs"])]
    lines += _measured_elsewhere(report, "precision")
    return "\n".join(lines)


def _measured_elsewhere(report: dict[str, Any], section: str) -> list[str]:
    """Where a section merged from another report was measured, when that is known."""
    for source in report.get("extra", {}).get("package", {}).get("merged", []):
        if section in source.get("sections", []):
            host = source.get("host", {})
            versions = source.get("versions", {})
            libs = ", ".join(f"{k} {versions[k]}" for k in ("torch", "onnxruntime", "torch_npu") if k in versions)
            return ["", f"Measured by `{source.get('command') or 'rlparity'}` on {host.get('processor') or '-'} "
                        f"({host.get('platform') or '-'}; {libs or 'versions not recorded'}), {source.get('created', '')}."]
    return []


def _reproduce(report: dict[str, Any]) -> str:
    package = report.get("extra", {}).get("package", {})
    commands = ["pip install rlparity", "sha256sum -c MANIFEST.sha256   # every file as packaged"]
    if report.get("command"):
        commands.append(f"{report['command']}   # the validation")
    for source in package.get("merged", []):
        if source.get("command"):
            commands.append(f"{source['command']}   # {', '.join(source.get('sections', []))}")
    if package.get("command"):
        commands.append(f"{package['command']}   # this folder")
    folder = package.get("folder", "DIR")
    commands += [f"rlparity publish {folder} --repo hf://OWNER/NAME --dry-run   # what would be pushed",
                 f"rlparity publish {folder} --repo hf://OWNER/NAME"]
    return "## Reproduce\n\n```sh\n" + "\n".join(commands) + "\n```"


def _environment(report: dict[str, Any]) -> str:
    versions = report.get("versions", {})
    host = report.get("host", {})
    rows = [[name, f"`{version}`"] for name, version in versions.items()]
    rows += [[f"host {key}", f"`{value}`"] for key, value in host.items() if key != "python"]
    devices = sorted({runtime_device(r) for r in report["runtimes"] if r["available"]})
    rows.append(["devices", ", ".join(f"`{d}`" for d in devices) or "-"])
    return ("## Environment\n\n" + md_table(["", "version"], rows)
            + f"\n\nRendered by rlparity from `report.json` (schema `{report.get('schema')}`, "
              f"created {report.get('created', '-')}); `environment.json` lists every installed library.")


# -- markdown ------------------------------------------------------------------------
def md_table(headers: list[str], rows: list[list[str]], right: range | tuple = ()) -> str:
    """A GitHub-flavoured markdown table; cells are escaped so a '|' cannot break a row."""
    def cell(text: Any) -> str:
        text = " ".join(str(text).split()).replace("|", "\\|")
        return text if text.startswith("`") else text.replace("*", "\\*")

    align = ["---:" if i in right else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
