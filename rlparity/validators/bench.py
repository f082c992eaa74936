"""`rlparity bench`: latency and throughput per runtime and batch size, measured honestly.

What one timed call is: ``Runtime.run(feeds)``, numpy inputs on the host in, numpy outputs
on the host out: what an agent's loop pays per decision, and the same for every runtime.
For torch on an accelerator it includes the copies to and from the device; with
``--graph`` it is: copy the inputs into the graph's static buffers, replay, copy the outputs
back. Every call gets the same inputs (edge cases, then seeded random rows).

How it is timed:
- the device is synchronised before and after each call (``torch.cuda`` / ``torch.npu``
  ``.synchronize``), and the wall time between is read with ``time.perf_counter_ns``;
  where the device has events, events recorded on its stream around the call also give
  the device's view (``event_p50_ms``, ``event_min_ms``);
- ``warmup`` untimed calls first, then ``runs`` timed calls; garbage collection is off
  during the timed loop (as ``timeit`` does) and the progress bar is redrawn only between
  measurements, never during one;
- ``first_call_ms``, the cold start of one (runtime, batch): from before ``prepare`` to the
  first call's outputs on the host. It includes creating the onnxruntime session (graph
  optimisation), copying / casting / moving the torch module to its device, capturing the
  device graph with ``--graph`` (three warm-up runs on a side stream, then the capture),
  and the first call with its allocations and kernel selection. It excludes reading the
  checkpoint, the ONNX export (done once for all) and creating the device's context (done
  once before anything is timed);
- ``overhead_ms``: an empty call timed through the same harness (same synchronisation,
  same clock), p50, the largest over the devices used: the harness's own share of every
  figure;
- ``decisions_per_s`` = batch / p50: one decision per batch row;
- for torch runtimes, ``forward_*``: the same statistics for the call without the host
  copies (inputs staged on the device once, outputs left there; with ``--graph``, the
  replay alone), like trtexec's compute time beside its host latency.

Every (runtime, batch) is checked after timing: the outputs of its last timed call are
compared with a separate run of the float32 CPU reference (deterministic and constant outputs; sampled ones
are checked by distribution in ``validate``), so a fast but wrong runtime, or a graph that
replays stale inputs, fails the run.

Device graphs capture the whole forward, sampling included: PyTorch registers the
device's default generator with the graph at capture, so each replay draws fresh numbers
(not reseeded per call). Graphs are captured on zero-filled static inputs, so the check
above also proves that replays read the inputs copied in.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from rlparity.artifacts.report import Report, RuntimeResult
from rlparity.converters.family import Family
from rlparity.errors import AcceleratorUnavailable, UsageError
from rlparity.validators.compare import compare_outputs
from rlparity.validators.ort import OrtRuntime
from rlparity.validators.precision import dtype_tolerances
from rlparity.validators.runtimes import (
    OFFICIAL,
    OURS,
    REFERENCE,
    Runtime,
    choose_runtimes,
)
from rlparity.validators.torch_runtime import TorchRuntime, parse_device, parse_dtype

DEFAULT_BATCHES = (1, 8, 64, 512)
PERCENTILES = (50, 90, 95, 99)


@dataclass
class BenchOptions:
    runtimes: list[str] | None = None  # None: torch-cpu, ort-cpu, and torch on --device
    device: str | None = None
    batches: list[int] = field(default_factory=lambda: list(DEFAULT_BATCHES))
    runs: int = 200
    warmup: int = 20
    graph: bool = False                # also time accelerator torch runtimes as device graphs
    dtype: str = "float32"             # precision of the torch runtimes
    seed: int = 0


@dataclass(frozen=True)
class Series:
    """One line of the plot: a runtime, eager or as a device graph."""
    runtime: str
    graph: bool = False

    @property
    def label(self) -> str:
        return f"{self.runtime} graph" if self.graph else self.runtime


# -- the clock --------------------------------------------------------------------------------

class DeviceClock:
    """Times calls on one device: synchronised before and after, wall clock and device events."""

    def __init__(self, device: str):
        import torch

        kind, index = parse_device(device)
        self.device = device
        self.index = index
        self.backend = None if kind == "cpu" else getattr(torch, kind)
        self.has_events = self.backend is not None and hasattr(self.backend, "Event")

    def synchronize(self) -> None:
        if self.backend is not None:
            self.backend.synchronize(self.index)

    def initialize(self) -> None:
        """Create the device's context now, so that no timed call pays for it."""
        if self.backend is not None:
            import torch

            torch.zeros(1, device=self.device).add_(1)
            self.synchronize()

    def time(self, call: Callable[[], Any], runs: int, warmup: int) -> tuple[np.ndarray, np.ndarray | None, Any]:
        """``runs`` timed calls after ``warmup`` untimed ones: (wall ms, event ms or None, last result)."""
        for _ in range(warmup):
            call()
        self.synchronize()
        wall = np.empty(runs)
        events = np.empty(runs) if self.has_events else None
        if events is not None:
            start, end = self.backend.Event(enable_timing=True), self.backend.Event(enable_timing=True)
            stream = self.backend.current_stream(self.index)
        result = None
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for i in range(runs):
                self.synchronize()
                if events is not None:
                    start.record(stream)
                t0 = time.perf_counter_ns()
                result = call()
                if events is not None:
                    end.record(stream)
                self.synchronize()
                wall[i] = (time.perf_counter_ns() - t0) / 1e6
                if events is not None:
                    events[i] = start.elapsed_time(end)
        finally:
            if gc_was_enabled:
                gc.enable()
        return wall, events, result


def summarize(samples_ms: np.ndarray) -> dict[str, float]:
    p50, p90, p95, p99 = np.percentile(samples_ms, PERCENTILES)
    return {"min_ms": float(samples_ms.min()), "p50_ms": float(p50), "p90_ms": float(p90), "p95_ms": float(p95),
            "p99_ms": float(p99), "max_ms": float(samples_ms.max()), "mean_ms": float(samples_ms.mean())}


def harness_overhead(clock: DeviceClock, runs: int, warmup: int) -> float:
    """p50 of an empty call through the same harness, in ms."""
    wall, _, _ = clock.time(lambda: None, runs, warmup)
    return float(np.median(wall))


# -- device graphs ------------------------------------------------------------------------------

def _graph_class(backend):
    """torch.cuda.CUDAGraph or torch.npu.NPUGraph (torch_npu), when this build has one."""
    return getattr(backend, "CUDAGraph", None) or getattr(backend, "NPUGraph", None)


class GraphRuntime(Runtime):
    """A torch runtime on an accelerator whose forward is captured once as a device graph
    and replayed: one launch per call instead of one per operation."""

    kind = "torch"

    def __init__(self, eager: TorchRuntime, example: dict[str, np.ndarray]):
        self.eager = eager
        self.eager.seed_each_call = False  # reseeding inside a capture is not allowed
        self.example = example  # fixes the shapes of the static input buffers
        self.name = eager.name
        self.device = eager.device
        self.graph = None

    def available(self) -> tuple[bool, str]:
        ok, reason = self.eager.available()
        if not ok:
            return ok, reason
        import torch

        kind, _ = parse_device(self.device)
        if kind == "cpu" or _graph_class(getattr(torch, kind, None)) is None:
            return False, f"{kind} has no device graphs in this torch build (--graph needs cuda or npu)"
        return True, ""

    def prepare(self, model: Any) -> None:
        import torch

        ok, reason = self.available()
        if not ok:
            raise AcceleratorUnavailable(f"{self.device}: {reason}")
        self.eager.prepare(model)
        kind, index = parse_device(self.device)
        backend = getattr(torch, kind)
        # Captured on zeros: the output check after timing then proves replays read new inputs.
        self.static_inputs = [torch.zeros_like(x) for x in self.eager.to_device(self.example)]
        with backend.device(index):
            side = backend.Stream()
            side.wait_stream(backend.current_stream())
            with backend.stream(side):  # warm-up outside the graph, as capture requires
                for _ in range(3):
                    self.eager.forward(self.static_inputs)
            backend.current_stream().wait_stream(side)
            self.graph = _graph_class(backend)()
            with backend.graph(self.graph):
                self.static_outputs = self.eager.forward(self.static_inputs)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.stage(feeds)
        self.graph.replay()
        return self.eager.to_host(self.static_outputs)

    def stage(self, feeds: dict[str, np.ndarray]) -> None:
        """Copy the inputs into the graph's static buffers (the only memory a replay reads)."""
        import torch

        for buffer, name in zip(self.static_inputs, self.eager.spec.input_names):
            buffer.copy_(torch.from_numpy(np.ascontiguousarray(feeds[name])))

    def synchronize(self) -> None:
        self.eager.synchronize()

    def close(self) -> None:
        self.graph = self.static_inputs = self.static_outputs = None
        self.eager.close()

    def info(self) -> dict[str, Any]:
        return {**self.eager.info(), "graph": True}


# -- the benchmark ------------------------------------------------------------------------------

def device_forward(runtime: Runtime, feeds: dict[str, np.ndarray]) -> Callable[[], Any] | None:
    """The torch call without the host copies: inputs staged on the device once, outputs left
    there (the device is still synchronised around it). None for onnxruntime, whose
    session.run is its whole call."""
    if isinstance(runtime, GraphRuntime):
        runtime.stage(feeds)
        return runtime.graph.replay
    if isinstance(runtime, TorchRuntime):
        args = runtime.to_device(feeds)
        return lambda: runtime.forward(args)
    return None


def series_for(family: Family, options: BenchOptions) -> list[Series]:
    names = choose_runtimes(options.runtimes, options.device, [REFERENCE, OURS])
    for name in names:
        if name.startswith("torch-"):
            parse_device(name.removeprefix("torch-"))
    if OFFICIAL in names and family.reference_export() is None:
        raise UsageError("runtime ort-ref needs the official export: none was found beside the checkpoint")
    series = [Series(name) for name in names]
    if options.graph:
        accelerated = [name for name in names if name.startswith("torch-") and name != REFERENCE]
        if not accelerated:
            raise UsageError("--graph captures torch on an accelerator (--device cuda:0 or npu:0); "
                             "CPU runtimes have no device graphs")
        series += [Series(name, graph=True) for name in accelerated]
    return series


def bench(family: Family, options: BenchOptions,
          on_progress: Callable[[str, int, int], None] = lambda *_: None) -> Report:
    """Time every series at every batch size. ``on_progress(step, done, total)`` is called
    between measurements, never during one."""
    from rlparity.validators.validate import new_report

    dtype = parse_dtype(options.dtype)
    series = series_for(family, options)  # usage errors before any work
    spec = family.io_spec()
    total, done = len(series) * len(options.batches), 0
    on_progress("exporting", done, total)
    ours = family.export()
    models = {OURS: ours, OFFICIAL: family.reference_export()}
    report = new_report(family, ours, None, inputs={"seed": options.seed, "batches": list(options.batches)})

    clocks: dict[str, DeviceClock] = {"cpu": DeviceClock("cpu")}
    for s in series:
        probe = _make_runtime(s, spec, dtype, family, options.seed, {})
        result = RuntimeResult(s.label, probe.kind, probe.device)
        report.runtimes.append(result)
        result.available, result.reason = probe.available()
        if result.available and result.device not in clocks:
            clocks[result.device] = DeviceClock(result.device)
            clocks[result.device].initialize()

    on_progress("timing the harness itself", done, total)
    overhead = {device: harness_overhead(clock, options.runs, options.warmup) for device, clock in clocks.items()}
    section: dict[str, Any] = {
        "runs": options.runs, "warmup": options.warmup, "overhead_ms": max(overhead.values()),
        "overhead_by_device": overhead, "dtype": dtype, "results": [], "errors": [],
    }
    report.extra["bench"] = section

    digests = {}
    for batch in options.batches:
        feeds = family.make_feeds(batch, options.seed)
        digests[str(batch)] = feeds.digest
        reference = TorchRuntime(spec, "cpu", seed=options.seed)
        reference.prepare(family.build_torch())
        expected = reference.run(feeds.arrays)
        scores = family.scores(feeds.arrays)
        for s, result in zip(series, report.runtimes):
            on_progress(f"{s.label} batch {batch}", done, total)
            done += 1
            if not result.available:
                continue
            runtime = _make_runtime(s, spec, dtype, family, options.seed, feeds.arrays)
            run_dtype = dtype if runtime.kind == "torch" else "float32"
            clock = clocks[result.device]
            try:
                clock.synchronize()
                t0 = time.perf_counter_ns()
                runtime.prepare(models[s.runtime] if s.runtime in models else family.build_torch())
                runtime.run(feeds.arrays)
                clock.synchronize()
                first_ms = (time.perf_counter_ns() - t0) / 1e6
                result.info = runtime.info()
                wall, events, last = clock.time(lambda: runtime.run(feeds.arrays), options.runs, options.warmup)
                forward = device_forward(runtime, feeds.arrays)
                if forward is not None:
                    forward_wall, forward_events, _ = clock.time(forward, options.runs, options.warmup)
            except Exception as e:  # recorded; the other series and batches still run
                message = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
                result.error = result.error or message
                section["errors"].append({"runtime": s.runtime, "graph": s.graph, "batch": batch, "error": message})
                continue
            finally:
                runtime.close()
            figures = summarize(wall)
            entry = {"runtime": s.runtime, "device": result.device, "dtype": run_dtype, "batch": batch,
                     "graph": s.graph, "first_call_ms": first_ms, **figures,
                     "decisions_per_s": batch * 1e3 / figures["p50_ms"]}
            if events is not None:
                entry["event_p50_ms"] = float(np.median(events))
                entry["event_min_ms"] = float(events.min())
            if forward is not None:
                entry.update({f"forward_{k}": v for k, v in summarize(forward_wall).items() if k != "mean_ms"})
                if forward_events is not None:
                    entry["forward_event_p50_ms"] = float(np.median(forward_events))
            # Even torch-cpu is checked: the timed instance against a separate reference run.
            comparison = compare_outputs(
                spec, expected, last, reference_name=REFERENCE, candidate_name=f"{s.label} batch {batch}",
                tolerances=dtype_tolerances(family, run_dtype), scores=scores,
                valid=family.valid_elements(feeds.arrays), dtype=run_dtype,
            )
            report.comparisons.append(comparison.to_json())
            entry["matches_reference"] = comparison.passed
            section["results"].append(entry)
    on_progress("done", done, total)
    report.inputs["digests"] = digests
    if not section["errors"]:
        del section["errors"]
    return report


def _make_runtime(s: Series, spec, dtype: str, family: Family, seed: int, example: dict) -> Runtime:
    if s.runtime in (OURS, OFFICIAL):
        return OrtRuntime(s.runtime)
    torch_runtime = TorchRuntime(spec, s.runtime.removeprefix("torch-"), seed=seed, dtype=dtype,
                                 keep_float32=family.float32_modules(), seed_each_call=False)
    return GraphRuntime(torch_runtime, example) if s.graph else torch_runtime
