"""The `rlparity` command line: rich tables on stderr, machine output with --json.

Exit codes: 0 pass, 1 bad input (one line, no traceback), 2 usage, 3 mismatch,
4 accelerator unavailable.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from rlparity import __version__
from rlparity.errors import EXIT_ACCELERATOR_UNAVAILABLE, EXIT_MISMATCH, EXIT_USER_ERROR, UserError

console = Console(stderr=True, width=None if sys.stderr.isatty() else 140, highlight=False)


class RlparityGroup(click.Group):
    """Turns a UserError anywhere below into one red line and its exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as e:
            console.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
            ctx.exit(e.exit_code)


@click.group(cls=RlparityGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rlparity")
def main() -> None:
    """Port reinforcement-learning policies to new hardware and prove the port exact."""


def model_options(f):
    """Options shared by every command that reads a checkpoint."""
    f = click.option("--family", default=None, help="Model family, when it cannot be detected (mlagents, ...).")(f)
    f = click.option("--obs-sizes", default=None, metavar="N,N,...",
                     help="ML-Agents: sizes of the vector observations, when neither normalizer "
                          "statistics nor an official export tell them.")(f)
    return f


def load_model(path: str, family: str | None, obs_sizes: str | None):
    from rlparity import converters

    options = {}
    if obs_sizes:
        options["obs_sizes"] = _int_list(obs_sizes, "--obs-sizes")
    with console.status(f"reading {path}"):
        return converters.load(path, family=family, **options)


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=option) from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"expected positive integers, got {text!r}", param_hint=option)
    return values


def write_json(data: dict, target: str) -> None:
    text = json.dumps(data, indent=2, default=str) + "\n"
    if target == "-":
        sys.stdout.write(text)
        return
    try:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(text)
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}", target) from None


@main.command()
@click.argument("path", type=click.Path())
@model_options
@click.option("--json", "json_out", metavar="FILE", help="Write the facts as JSON to FILE (- for stdout).")
def inspect(path, family, obs_sizes, json_out):
    """Family, I/O, parameters, normalizer and training step of a checkpoint."""
    from rlparity.artifacts.tables import render_inspect
    from rlparity.converters.safe_load import sha256_file

    model = load_model(path, family, obs_sizes)
    info = {
        "family": model.name,
        "title": model.title,
        "source": {"path": str(model.source), "sha256": sha256_file(model.source) if model.source.is_file() else None,
                   "note": model.source_note},
        "summary": model.summary(),
        "io_spec": model.io_spec().to_json(),
        "graph_contents": model.graph_contents(),
    }
    render_inspect(info, console)
    if json_out:
        write_json(info, json_out)


@main.command()
@click.argument("path", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(), help="Where to write the ONNX file.")
@click.option("--opset", type=click.IntRange(7, 25), default=None, help="ONNX opset (default: the family's).")
@model_options
def export(path, output, opset, family, obs_sizes):
    """Export a checkpoint to ONNX with the official names and I/O."""
    import hashlib

    from rlparity.validators.validate import _reference_facts

    model = load_model(path, family, obs_sizes)
    with console.status("exporting"):
        data = model.export(output, opset=opset)
    console.print(f"wrote [bold]{escape(output)}[/] ({len(data):,} bytes, opset {opset or model.default_opset}, "
                  f"sha256 {hashlib.sha256(data).hexdigest()[:16]}...)")
    if model.source_note:
        console.print(escape(model.source_note))
    reference = model.reference_export()
    if reference is not None:
        facts = _reference_facts(reference, data)
        same = "identical to" if facts.get("graph_identical") else "different from"
        console.print(f"graph {same} the official export {escape(str(reference))}")


@main.command()
@click.argument("path", type=click.Path())
@click.option("--runtimes", default=None, metavar="LIST",
              help="Comma-separated: torch-cpu, ort-cpu, ort-ref, torch-cuda:0, torch-npu:0 "
                   "(default: torch-cpu, ort-cpu, and ort-ref when an official export is found).")
@click.option("--device", default=None, metavar="DEV", help="Also run torch on this device: cuda, cuda:1, npu:0 ...")
@click.option("--ref", "reference", type=click.Path(), default=None,
              help="The official ONNX export to compare with (default: found beside the checkpoint).")
@click.option("--batch", type=click.IntRange(1, 100_000), default=64, show_default=True,
              help="Rows of inputs: edge cases first, then seeded random rows.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--opset", type=click.IntRange(7, 25), default=None, help="Opset of our export (default: the family's).")
@click.option("--draws", type=click.IntRange(16, 100_000), default=512, show_default=True,
              help="Samples per element when checking sampled outputs by distribution.")
@click.option("--json", "json_out", metavar="FILE", help="Write the report as JSON to FILE (- for stdout).")
@click.option("--dtype", "dtypes", default=None, metavar="LIST",
              help="Precision sweep: also run torch on --device (default cpu) in each of these dtypes "
                   "(float32,float16,bfloat16), normalizer statistics kept float32, each against the "
                   "float32 CPU reference with its own tolerance.")
@model_options
def validate(path, runtimes, device, reference, batch, seed, opset, draws, json_out, family, obs_sizes, dtypes=None):
    """Run the same inputs through every runtime and compare them to the reference."""
    from rlparity.artifacts.tables import render_validation
    from rlparity.validators.validate import ValidateOptions, validate as run_validation

    model = load_model(path, family, obs_sizes)
    if reference is not None and not Path(reference).is_file():
        raise UserError("no such file", reference)
    options = ValidateOptions(
        runtimes=[r.strip() for r in runtimes.split(",") if r.strip()] if runtimes else None,
        device=device, reference=Path(reference) if reference else None,
        batch=batch, seed=seed, opset=opset, draws=draws, dtypes=_dtype_list(dtypes),
    )
    with console.status("validating") as status:
        report = run_validation(model, options, on_step=lambda step: status.update(step))
    report.command = " ".join(["rlparity", *sys.argv[1:]])
    data = report.to_json()
    render_validation(data, console)
    if json_out:
        report.write(json_out)
    sys.exit(exit_code(report))


def _dtype_list(text: str | None) -> list[str] | None:
    from rlparity.validators.torch_runtime import parse_dtype

    if not text:
        return None
    return list(dict.fromkeys(parse_dtype(d) for d in text.split(",") if d.strip())) or None


def exit_code(report) -> int:
    """0 pass, 3 mismatch, 4 when the asked-for accelerator is missing, 1 when a runtime failed."""
    if report.verdict == "mismatch":
        return EXIT_MISMATCH
    unavailable = [r for r in report.runtimes if not r.available]
    failed = [r for r in report.runtimes if r.available and r.error]
    for r in unavailable:
        console.print(f"[bold red]error:[/] {r.name}: unavailable: {escape(r.reason)}", soft_wrap=True)
    for r in failed:
        console.print(f"[bold red]error:[/] {r.name}: {escape(r.error)}", soft_wrap=True)
    if unavailable:
        return EXIT_ACCELERATOR_UNAVAILABLE
    return EXIT_USER_ERROR if failed or report.verdict != "pass" else 0



@main.command("npu-check")
@click.argument("path", type=click.Path(), required=False, default="sample:tinywalker")
@click.option("--device", default="npu:0", show_default=True, metavar="DEV",
              help="The accelerator to check: npu:N, cuda:N (or cpu, which takes the same path).")
@click.option("--batch", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--draws", type=click.IntRange(16, 100_000), default=512, show_default=True)
@click.option("--json", "json_out", metavar="FILE", help="Write the report as JSON to FILE (- for stdout).")
@model_options
def npu_check(path, device, batch, seed, draws, json_out, family, obs_sizes):
    """Check an accelerator host: versions, devices, an operation, and PATH on the device.

    PATH (default: the bundled sample) is run on the device with every parameter, input,
    intermediate activation and output proven to live there, then validated against
    torch-cpu and ort-cpu. Exit 4 names what is missing (torch_npu, a device, CANN).
    """
    from rlparity.artifacts.device_tables import render_npu_check
    from rlparity.errors import AcceleratorUnavailable
    from rlparity.validators.accelerator import npu_check as run_check, passed

    model = load_model(path, family, obs_sizes)
    with console.status(f"checking {device}") as status:
        report = run_check(model, device, batch=batch, seed=seed, draws=draws, on_step=lambda step: status.update(step))
    report.command = " ".join(["rlparity", *sys.argv[1:]])
    render_npu_check(report.to_json(), console)
    if json_out:
        report.write(json_out)
    first = report.extra["npu_check"]["checks"][0]
    if not first["passed"]:
        raise AcceleratorUnavailable(f"{report.extra['npu_check']['device']}: {first['detail']}")
    if not passed(report) or report.verdict == "mismatch":
        sys.exit(EXIT_MISMATCH)
    sys.exit(0 if report.verdict == "pass" else exit_code(report))


@main.command()
@click.argument("path", type=click.Path())
@click.option("--runtimes", default=None, metavar="LIST",
              help="Comma-separated: torch-cpu, ort-cpu, ort-ref, torch-cuda:0, torch-npu:0 "
                   "(default: torch-cpu, ort-cpu, and torch on --device).")
@click.option("--device", default=None, metavar="DEV", help="Also time torch on this device: cuda, npu:0 ...")
@click.option("--batch", "batches", default="1,8,64,512", show_default=True, metavar="N,N,...",
              help="Batch sizes (rows per call).")
@click.option("--runs", type=click.IntRange(1, 10_000_000), default=200, show_default=True,
              help="Timed calls per runtime and batch.")
@click.option("--warmup", type=click.IntRange(0, 10_000_000), default=20, show_default=True,
              help="Untimed calls before them.")
@click.option("--graph", is_flag=True,
              help="Also time torch on the accelerator with its forward captured as a CUDA / NPU graph.")
@click.option("--dtype", default="float32", show_default=True, help="Precision of the torch runtimes.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_out", metavar="FILE", help="Write the full report as JSON to FILE (- for stdout).")
@click.option("--plot", "plot_out", metavar="FILE.png", help="Draw latency and throughput against batch size.")
@model_options
def bench(path, runtimes, device, batches, runs, warmup, graph, dtype, seed, json_out, plot_out, family, obs_sizes):
    """Latency (first call, min/p50/p90/p95/p99/max) and decisions per second, per runtime and batch."""
    import os

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rlparity.artifacts.device_tables import render_bench
    from rlparity.artifacts.plot import plot_bench, require_matplotlib
    from rlparity.artifacts.tables import verdict_line
    from rlparity.validators.bench import BenchOptions, bench as run_bench, series_for
    from rlparity.validators.torch_runtime import parse_dtype

    if plot_out:
        require_matplotlib(plot_out)  # before anything is measured
    options = BenchOptions(
        runtimes=[r.strip() for r in runtimes.split(",") if r.strip()] if runtimes else None,
        device=device, batches=_int_list(batches, "--batch"), runs=runs, warmup=warmup, graph=graph,
        dtype=parse_dtype(dtype), seed=seed,
    )
    model = load_model(path, family, obs_sizes)
    series_for(model, options)  # usage errors (unknown runtime, --graph on the CPU) first
    # Redrawn only between measurements (auto_refresh off): a refresh thread would steal
    # CPU time from the calls being timed.
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, auto_refresh=False, transient=True) as progress:
        task = progress.add_task("bench", total=None)

        def on_progress(step: str, done: int, total: int) -> None:
            progress.update(task, description=step, completed=done, total=total)
            progress.refresh()

        report = run_bench(model, options, on_progress=on_progress)
    report.command = " ".join(["rlparity", *sys.argv[1:]])
    section = report.extra["bench"]
    if plot_out:
        title = f"{model.title}: {Path(str(model.source)).name}"
        plot_bench(section, plot_out, title)
        base = Path(json_out).resolve().parent if json_out and json_out != "-" else Path.cwd()
        section["plot"] = os.path.relpath(Path(plot_out).resolve(), base)
    data = report.to_json()
    render_bench(data, console)
    if report.comparisons:
        console.print(verdict_line(data))
    if json_out:
        report.write(json_out)
    unavailable = [r for r in report.runtimes if not r.available]
    failed = [r for r in report.runtimes if r.available and r.error]
    if any(not c["passed"] for c in report.comparisons):
        sys.exit(EXIT_MISMATCH)
    for r in unavailable:
        console.print(f"[bold red]error:[/] {r.name}: unavailable: {escape(r.reason)}", soft_wrap=True)
    if unavailable:
        sys.exit(EXIT_ACCELERATOR_UNAVAILABLE)
    sys.exit(EXIT_USER_ERROR if failed else 0)


if __name__ == "__main__":
    main()
