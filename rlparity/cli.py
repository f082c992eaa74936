"""The `rlparity` command line: rich tables on stderr, machine output with --json.

Exit codes: 0 pass, 1 bad input (one line, no traceback), 2 usage, 3 mismatch,
4 accelerator unavailable.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from rlparity import __version__
from rlparity.errors import (
    EXIT_ACCELERATOR_UNAVAILABLE,
    EXIT_MISMATCH,
    EXIT_USER_ERROR,
    UserError,
)

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
    f = click.option("--family", default=None, help="Model family, when it cannot be detected (sb3, mlagents, ...).")(f)
    f = click.option("--obs-sizes", default=None, metavar="N,N,...",
                     help="ML-Agents: sizes of the vector observations, when neither normalizer "
                          "statistics nor an official export tell them.")(f)
    f = click.option("--vec-normalize", type=click.Path(), default=None, expose_value=False,
                     callback=_remember_model_option, metavar="FILE",
                     help="Stable-Baselines3: VecNormalize statistics (vec_normalize.pkl) to fold into "
                          "the graph (default: the one beside the model, if any).")(f)
    return f


def _remember_model_option(ctx: click.Context, param: click.Parameter, value):
    """Options that only some families read travel to load_model in ctx.meta, so that every
    command taking model_options keeps its signature."""
    if value is not None:
        ctx.meta[f"rlparity.{param.name}"] = value
    return value


def load_model(path: str, family: str | None, obs_sizes: str | None):
    from rlparity import converters

    options = {}
    if obs_sizes:
        options["obs_sizes"] = _int_list(obs_sizes, "--obs-sizes")
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get("rlparity.vec_normalize"):
        options["vec_normalize"] = ctx.meta["rlparity.vec_normalize"]
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
    from rlparity.artifacts.report import dumps_json, write_output

    write_output(dumps_json(data), target)


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

    from rlparity.validators.validate import reference_facts

    model = load_model(path, family, obs_sizes)
    with console.status("exporting"):
        data = model.export(output, opset=opset)
    console.print(f"wrote [bold]{escape(output)}[/] ({len(data):,} bytes, opset {opset or model.default_opset}, "
                  f"sha256 {hashlib.sha256(data).hexdigest()[:16]}...)")
    if model.source_note:
        console.print(escape(model.source_note))
    reference = model.reference_export()
    if reference is not None:
        facts = reference_facts(reference, data)
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
@click.option("--save-run", type=click.Path(), default=None, metavar="DIR",
              help="Also save the inputs, every runtime's outputs and metadata to DIR, for `rlparity compare`.")
@click.option("--dtype", "dtypes", default=None, metavar="LIST",
              help="Precision sweep: also run torch on --device (default cpu) in each of these dtypes "
                   "(float32,float16,bfloat16), normalizer statistics kept float32, each against the "
                   "float32 CPU reference with its own tolerance.")
@model_options
def validate(path, runtimes, device, reference, batch, seed, opset, draws, json_out, family, obs_sizes, save_run=None,
             dtypes=None):
    """Run the same inputs through every runtime and compare them to the reference."""
    from rlparity.artifacts.tables import render_validation
    from rlparity.validators.validate import ValidateOptions
    from rlparity.validators.validate import validate as run_validation

    model = load_model(path, family, obs_sizes)
    if reference is not None and not Path(reference).is_file():
        raise UserError("no such file", reference)
    if save_run:
        from rlparity.artifacts.saved_run import prepare_dir

        prepare_dir(save_run)  # a bad folder fails now, not after the whole validation
    options = ValidateOptions(
        runtimes=[r.strip() for r in runtimes.split(",") if r.strip()] if runtimes else None,
        device=device, reference=Path(reference) if reference else None,
        batch=batch, seed=seed, opset=opset, draws=draws,
        save_run=Path(save_run) if save_run else None, command=" ".join(["rlparity", *sys.argv[1:]]),
        dtypes=_dtype_list(dtypes),
    )
    with console.status("validating") as status:
        report = run_validation(model, options, on_step=lambda step: status.update(step))
    report.command = " ".join(["rlparity", *sys.argv[1:]])
    data = report.to_json()
    render_validation(data, console)
    if save_run:
        console.print(f"saved the run to [bold]{escape(save_run)}[/] (compare it with `rlparity compare {escape(save_run)}`)")
    if json_out:
        report.write(json_out)
    sys.exit(exit_code(report))


def _dtype_list(text: str | None) -> list[str] | None:
    from rlparity.validators.torch_runtime import parse_dtype

    if not text:
        return None
    return list(dict.fromkeys(parse_dtype(d) for d in text.split(",") if d.strip())) or None


def exit_code(report, need_comparison: bool = True) -> int:
    """0 pass, 3 mismatch, 4 when an asked-for accelerator is missing, 1 when a runtime
    failed (or, with ``need_comparison``, when nothing could be compared)."""
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
    return EXIT_USER_ERROR if failed or (need_comparison and report.verdict != "pass") else 0


@main.command()
@click.argument("candidate", type=click.Path())
@click.option("--ref", "reference", required=True, type=click.Path(), help="The reference ONNX model (e.g. the official export).")
@click.option("--inputs", type=click.Path(), default=None, metavar="FILE.npz",
              help="Inputs to use, keyed by the reference's input names (default: generated from its I/O).")
@click.option("--atol", type=click.FloatRange(min=0), default=None, help="Absolute tolerance for every output (default: per dtype).")
@click.option("--rtol", type=click.FloatRange(min=0), default=None, help="Relative tolerance for every output (default: per dtype).")
@click.option("--batch", type=click.IntRange(1, 100_000), default=64, show_default=True,
              help="Rows of generated inputs: edge cases first, then seeded random rows.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--draws", type=click.IntRange(16, 100_000), default=512, show_default=True,
              help="Samples per element when checking sampled outputs by distribution.")
@click.option("--json", "json_out", metavar="FILE", help="Write the result as JSON to FILE (- for stdout).")
def diff(candidate, reference, inputs, atol, rtol, batch, seed, draws, json_out):
    """Is CANDIDATE.onnx a drop-in replacement for the reference, and if not, where does it diverge?

    Exit 0: same contract and every output within tolerance; 3: not a drop-in; 1: a file
    cannot be read.
    """
    from rlparity.artifacts.diff_tables import render_diff
    from rlparity.validators.diff import DiffOptions
    from rlparity.validators.diff import diff as run_diff

    options = DiffOptions(inputs=Path(inputs) if inputs else None, atol=atol, rtol=rtol, batch=batch, seed=seed, draws=draws)
    with console.status("comparing") as status:
        result = run_diff(candidate, reference, options, on_step=lambda step: status.update(step))
    result.command = " ".join(["rlparity", *sys.argv[1:]])
    data = result.to_json()
    render_diff(data, console)
    if json_out:
        write_json(data, json_out)
    sys.exit(0 if result.drop_in else EXIT_MISMATCH)


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--reference", "reference_runtime", default=None, metavar="NAME",
              help="Runtime of the first run to compare against (default: the reference it was saved with, torch-cpu).")
@click.option("--atol", type=click.FloatRange(min=0), default=None, help="Absolute tolerance for every output (default: as saved).")
@click.option("--rtol", type=click.FloatRange(min=0), default=None, help="Relative tolerance for every output (default: as saved).")
@click.option("--json", "json_out", metavar="FILE", help="Write the report as JSON to FILE (- for stdout).")
def compare(runs, reference_runtime, atol, rtol, json_out):
    """Compare runs saved by `validate --save-run`, offline.

    One RUN: its runtimes against its reference, as validate did. Several: every runtime
    of the later runs against the reference runtime of the first (e.g. an NPU host's run
    against a laptop's). Exit 0: all within tolerance; 3: a mismatch.
    """
    from rlparity.artifacts.diff_tables import render_compare
    from rlparity.artifacts.saved_run import compare_runs, load_run

    with console.status("loading the saved runs"):
        loaded = [load_run(path) for path in runs]
    report = compare_runs(loaded, reference=reference_runtime, atol=atol, rtol=rtol)
    report.command = " ".join(["rlparity", *sys.argv[1:]])
    render_compare(report.to_json(), console)
    if json_out:
        report.write(json_out)
    if report.verdict == "mismatch":
        sys.exit(EXIT_MISMATCH)
    if not report.comparisons:
        raise UserError("nothing to compare: no runtime other than the reference has saved outputs", runs[0])
    sys.exit(0 if report.verdict == "pass" else EXIT_USER_ERROR)


@main.command()
@click.argument("path", type=click.Path())
@click.option("--env", "env_id", required=True, metavar="ENV_ID",
              help="gymnasium environment id: seals/CartPole-v0, CartPole-v1, module:Env-v0 ...")
@click.option("--episodes", type=click.IntRange(1, 1_000_000), default=10, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True,
              help="Episode i is reset with seed S+i, the same on every runtime.")
@click.option("--runtimes", default=None, metavar="LIST",
              help="Comma-separated: torch-cpu, ort-cpu, torch-cuda:0, torch-npu:0 (default: torch-cpu, ort-cpu).")
@click.option("--device", default=None, metavar="DEV", help="Also play with torch on this device: cuda, npu:0 ...")
@click.option("--max-steps", type=click.IntRange(1), default=None,
              help="Cut episodes after this many steps (default: the environment's own time limit).")
@click.option("--opset", type=click.IntRange(7, 25), default=None, help="Opset of our export (default: the family's).")
@click.option("--target-return", type=float, default=None,
              help="Decision Transformer: the return to aim for, in the environment's reward units (hopper-medium: 3600).")
@click.option("--settings", "settings_file", type=click.Path(), default=None, metavar="FILE.json",
              help="Decision Transformer: state_mean, state_std, target_return, return_scale, context_length "
                   "(default: rollout.json beside the model, else hopper-medium's).")
@click.option("--json", "json_out", metavar="FILE", help="Write the report as JSON to FILE (- for stdout).")
@model_options
def rollout(path, env_id, episodes, seed, runtimes, device, max_steps, opset, target_return, settings_file,
            json_out, family, obs_sizes):
    """Play the policy in a real environment on every runtime, with the same seeds.

    Reports each runtime's mean and std of return and episode length, a sha256 fingerprint of
    its actions, and the first step where two runtimes acted differently: exit 3, unless the
    actions are continuous and that first difference is within float tolerance (the drift
    that follows is reported).
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from rlparity.artifacts.tables import render_rollout
    from rlparity.validators.rollout import RolloutOptions
    from rlparity.validators.rollout import rollout as run_rollout

    model = load_model(path, family, obs_sizes)
    options = RolloutOptions(
        env_id=env_id, episodes=episodes, seed=seed, device=device, max_steps=max_steps, opset=opset,
        runtimes=[r.strip() for r in runtimes.split(",") if r.strip()] if runtimes else None,
        settings={k: v for k, v in {"settings_file": settings_file, "target_return": target_return}.items() if v is not None},
    )
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"),
               TextColumn("{task.fields[last]}"), TimeElapsedColumn())
    progress = Progress(*columns, console=console, transient=True)
    tasks = {}

    def on_progress(runtime: str, done: int, total: int, last_return: float) -> None:
        if not tasks:
            progress.start()  # only once episodes run: a bad env id prints its one line alone
        if runtime not in tasks:
            tasks[runtime] = progress.add_task(runtime, total=total, last="")
        progress.update(tasks[runtime], completed=done, last=f"last return {last_return:g}")

    try:
        report = run_rollout(model, options, on_progress=on_progress)
    finally:
        progress.stop()
    report.command = " ".join(["rlparity", *sys.argv[1:]])
    render_rollout(report.to_json(), console)
    if json_out:
        report.write(json_out)
    sys.exit(exit_code(report, need_comparison=False))  # one runtime alone may play


@main.command()
@click.argument("path", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(), metavar="DIR", help="The folder to write.")
@click.option("--from-report", "from_reports", multiple=True, type=click.Path(), metavar="FILE",
              help="A report of `rlparity bench`, `rollout` ... whose sections go into the package (repeatable).")
@click.option("--base-model", default=None, metavar="OWNER/NAME",
              help="The Hub repository the checkpoint comes from, for the card's base_model.")
@click.option("--force", is_flag=True, help="Replace DIR when it already holds a package.")
@click.option("--runtimes", default=None, metavar="LIST", help="As for `validate`.")
@click.option("--device", default=None, metavar="DEV", help="Also run torch on this device: cuda:0, npu:0 ...")
@click.option("--ref", "reference", type=click.Path(), default=None, help="The official ONNX export, as for `validate`.")
@click.option("--batch", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--opset", type=click.IntRange(7, 25), default=None, help="Opset of the export (default: the family's).")
@click.option("--draws", type=click.IntRange(16, 100_000), default=512, show_default=True)
@model_options
def package(path, output, from_reports, base_model, force, runtimes, device, reference, batch, seed, opset, draws,
            family, obs_sizes):
    """Validate PATH and write a folder with the export, the evidence and a model card."""
    from rlparity.artifacts.package import (
        build_package,
        check_base_model,
        check_destination,
        read_reports,
    )
    from rlparity.artifacts.tables import render_validation
    from rlparity.converters.safe_load import sha256_file
    from rlparity.validators.validate import ValidateOptions, validate_with_arrays

    check_destination(Path(output), force)  # before any work
    check_base_model(base_model)
    model = load_model(path, family, obs_sizes)
    if reference is not None and not Path(reference).is_file():
        raise UserError("no such file", reference)
    checkpoint_sha = sha256_file(model.source) if model.source.is_file() else None
    merged, notes = read_reports([Path(p) for p in from_reports], checkpoint_sha)
    options = ValidateOptions(
        runtimes=[r.strip() for r in runtimes.split(",") if r.strip()] if runtimes else None,
        device=device, reference=Path(reference) if reference else None,
        batch=batch, seed=seed, opset=opset, draws=draws,
    )
    with console.status("validating") as status:
        validation = validate_with_arrays(model, options, on_step=lambda step: status.update(step))
    validation.report.command = _validate_command(path, runtimes, device, reference, batch, seed, opset, draws,
                                                  family, obs_sizes)
    render_validation(validation.report.to_json(), console)
    with console.status("packaging"):
        built = build_package(validation, output, merged=merged, base_model=base_model, force=force,
                              command=" ".join(["rlparity", *sys.argv[1:]]), notes=notes)
    _print_package(built)
    sys.exit(exit_code(built.report))


def _validate_command(path, runtimes, device, reference, batch, seed, opset, draws, family, obs_sizes) -> str:
    """The `rlparity validate` line that reproduces the packaged report."""
    import shlex

    words = ["rlparity", "validate", str(path)]
    for flag, value, default in (("--family", family, None), ("--obs-sizes", obs_sizes, None),
                                 ("--runtimes", runtimes, None), ("--device", device, None),
                                 ("--ref", reference, None), ("--batch", batch, 64), ("--seed", seed, 0),
                                 ("--opset", opset, None), ("--draws", draws, 512)):
        if value is not None and value != default:
            words += [flag, str(value)]
    return " ".join(shlex.quote(w) for w in [*words, "--json", "report.json"])


def _print_package(built) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title=f"wrote {built.folder}", box=box.SIMPLE_HEAVY, title_justify="left")
    table.add_column("file")
    table.add_column("bytes", justify="right")
    for name, size in built.files.items():
        table.add_row(escape(name), f"{size:,}")
    console.print(table)
    for note in built.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    console.print(f"next: rlparity publish {escape(str(built.folder))} --repo hf://OWNER/NAME --dry-run")


@main.command()
@click.argument("folder", type=click.Path())
@click.option("--repo", "target", required=True, metavar="TARGET",
              help="hf://OWNER/NAME (huggingface_hub; HF_ENDPOINT for a mirror), or a git URL or path.")
@click.option("--dry-run", is_flag=True, help="List exactly what would be pushed, and push nothing.")
@click.option("-m", "--message", default=None, help="The commit message (default: names the model and verdict).")
@click.option("--lfs/--no-lfs", default=None,
              help="Git remotes: binaries as LFS with the Hub's .gitattributes (default: only for Hub hosts).")
def publish(folder, target, dry_run, message, lfs):
    """Push a package folder to a model repository as one commit."""
    from rich import box
    from rich.table import Table

    from rlparity.artifacts.package import verify_package
    from rlparity.artifacts.publish import default_message, parse_target
    from rlparity.artifacts.publish import publish as push

    repo = parse_target(target, lfs=lfs)
    folder_path = Path(folder)
    verify_package(folder_path)  # a changed or foreign folder is refused before anything else
    message = message or default_message(folder_path)
    with console.status(f"publishing to {escape(repo.shown)}"):
        result = push(folder_path, repo, message, dry_run=dry_run,
                      say=lambda text: console.print(f"[yellow]{escape(text)}[/]"))
    title = f"{'would push ' if dry_run else ''}{folder} to {repo.shown}"
    table = Table(title=escape(title), box=box.SIMPLE_HEAVY, title_justify="left")
    for column in ("path", "bytes", "sha256", "lfs", "why"):
        table.add_column(column, justify="right" if column == "bytes" else "left", no_wrap=column != "why")
    for f in result.files:
        table.add_row(escape(f.path), f"{f.size:,}", f.sha256, "yes" if f.lfs else "no", escape(f.why))
    console.print(table)
    if dry_run:
        console.print(f"dry run: nothing pushed; commit message would be: {escape(message)}")
    elif result.unchanged:
        console.print(f"nothing to publish: {escape(repo.shown)} already holds these files (branch {result.branch})")
    else:
        console.print(f"[green]published[/] {len(result.files)} files to {escape(repo.shown)} "
                      f"as commit {result.commit or '?'} on {result.branch}")



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
    from rlparity.validators.accelerator import npu_check as run_check
    from rlparity.validators.accelerator import passed

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

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from rlparity.artifacts.device_tables import render_bench
    from rlparity.artifacts.plot import plot_bench, require_matplotlib
    from rlparity.artifacts.tables import verdict_line
    from rlparity.validators.bench import BenchOptions, series_for
    from rlparity.validators.bench import bench as run_bench
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
    sys.exit(exit_code(report, need_comparison=False))


if __name__ == "__main__":
    main()
