"""What every model family provides, and the export + structural check they share.

A family is one file under converters/ that reads as the whole story of one kind of
checkpoint: how to recognise it (``sniff``), read it safely (``load``), rebuild it in pure
PyTorch (``build_torch``), declare its I/O (``io_spec``) and export it (``export``).

The rebuilt module takes its inputs positionally in ``io_spec().inputs`` order and returns
a tuple in ``io_spec().outputs`` order; runtimes and the exporter rely on nothing else.
"""
from __future__ import annotations

import io
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rlparity.errors import NotSupportedYet, UserError
from rlparity.spec import IOSpec

if TYPE_CHECKING:
    from rlparity.validators.feeds import Feeds
    from rlparity.validators.rollout import Controller


class Family:
    name: ClassVar[str]
    title: ClassVar[str]           # e.g. "Unity ML-Agents policy"
    looks_for: ClassVar[str]       # what sniff() recognises, for error messages
    default_opset: ClassVar[int] = 17

    def __init__(self, source: Path, source_note: str = ""):
        self.source = source            # the checkpoint file (or model folder) actually read
        self.source_note = source_note  # how it was chosen, when the user gave a folder
        self._module = None

    # -- what each family implements -------------------------------------------------
    @classmethod
    def sniff(cls, path: Path) -> bool:
        raise NotImplementedError

    @classmethod
    def load(cls, path: Path, **options: Any) -> "Family":
        raise NotImplementedError

    def io_spec(self) -> IOSpec:
        raise NotImplementedError

    def _build_module(self):
        raise NotImplementedError

    def summary(self) -> dict[str, Any]:
        """Facts for `inspect` and the report: architecture, parameters, training step."""
        raise NotImplementedError

    def graph_contents(self) -> dict[str, str]:
        """What is and is not inside the exported graph (pre/post-processing, sampling)."""
        return {}

    def reference_export(self) -> Path | None:
        """The library's own ONNX export of this checkpoint, when one lies beside it."""
        return None

    def scores(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Reference scores (logits, probabilities) behind discrete actions, for tie checks."""
        return {}

    def make_feeds(self, batch: int, seed: int, **axes: int) -> "Feeds":
        """Validation inputs; families with structured inputs (sequences, padding) override.

        ``axes``: sizes of the other symbolic axes (e.g. ``sequence=5``); default: io_spec().axes.
        """
        from rlparity.validators.feeds import make_feeds

        return make_feeds(self.io_spec(), batch, seed, axes=axes)

    def validation_shapes(self, batch: int) -> list[dict[str, int]]:
        """The sizes of the symbolic axes to validate at, the first one timed and sampled.

        One shape by default; families whose graphs take a dynamic sequence validate at
        several lengths, not only the one the export was traced with.
        """
        return [{"batch": batch}]

    def valid_elements(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """Per output, a boolean mask of the elements to compare (e.g. padding excluded)."""
        return None

    # What valid_elements() leaves out, in words, for the report (e.g. "padded positions").
    excluded_from_comparison: ClassVar[str] = ""

    def tolerances(self) -> dict[str, tuple[float, float]]:
        """Per-output (atol, rtol) where the family needs other than the dtype default."""
        return {}

    def float32_modules(self) -> list[str]:
        """Submodules of the rebuild that stay float32 when it runs in a lower precision:
        accumulated statistics (running variances, step counts) overflow float16."""
        return []

    def decision_view(self, feeds: "Feeds", outputs: dict[str, dict[str, np.ndarray]]) -> dict[str, Any] | None:
        """A few input rows beside the scores and the action each runtime chose on them, for
        the report: ``{"title", "columns", "rows"}`` (e.g. a discrete policy's logits, softmax
        probabilities and argmax). ``outputs`` maps runtime -> outputs on the full batch, whose
        first rows are ``feeds``. None: the family shows no such view."""
        return None

    def rollout_controller(self, **settings: Any) -> "Controller":
        """How the policy acts in a closed loop (`rlparity rollout`, validators/rollout.py).

        ``settings``: the loop's options from the command line (a Decision Transformer's
        ``settings_file`` and ``target_return``); families without any refuse them.
        """
        raise NotSupportedYet(f"playing a {self.title} in an environment (rollout)", self.source)

    # -- shared ------------------------------------------------------------------------
    def build_torch(self):
        """The pure-PyTorch rebuild, in eval mode on the CPU (built once, then shared)."""
        if self._module is None:
            self._module = self._build_module().eval()
        return self._module

    def export_inputs(self) -> tuple:
        """Example inputs the exporter traces with, at the sizes of ``io_spec().axes``."""
        import torch

        spec = self.io_spec()
        tensors = []
        for t in spec.inputs:
            shape = t.concrete_shape(**spec.axes)
            fill = 1 if t.role == "mask" else 0
            tensors.append(torch.full(shape, fill, dtype=getattr(torch, t.dtype)))
        return tuple(tensors)

    def export_input_names(self) -> list[str]:
        return self.io_spec().input_names

    def export_dynamic_axes(self) -> dict[str, dict[int, str]]:
        spec = self.io_spec()
        return {t.name: t.dynamic_axes for t in (*spec.inputs, *spec.outputs) if t.dynamic_axes}

    def export(self, path: str | Path | None = None, opset: int | None = None) -> bytes:
        """Export to ONNX, check it, write it to ``path`` when given, and return its bytes."""
        import torch

        spec = self.io_spec()
        buffer = io.BytesIO()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            # The TorchScript exporter is the one the official ML-Agents files come from;
            # using it reproduces their graphs node for node.
            torch.onnx.export(
                self.build_torch(),
                self.export_inputs(),
                buffer,
                opset_version=opset or self.default_opset,
                input_names=self.export_input_names(),
                output_names=spec.output_names,
                dynamic_axes=self.export_dynamic_axes(),
                **_torchscript_exporter(),
            )
        data = buffer.getvalue()
        check_export(data, spec, where=path or self.source)
        if path is not None:
            write_bytes(Path(path), data)
        return data


def _torchscript_exporter() -> dict:
    """``dynamo=False`` where torch.onnx.export has the switch (torch >= 2.5); older
    releases, which many NPU hosts run, only have the TorchScript exporter."""
    import inspect

    import torch

    return {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}


def check_export(data: bytes, spec: IOSpec, where: str | Path) -> None:
    """onnx's checker and shape inference, then the graph's I/O against the IOSpec."""
    import onnx

    model = onnx.load_from_string(data)
    try:
        onnx.checker.check_model(model, full_check=True)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise RuntimeError(f"export of {where} failed onnx's checks: {e}") from e
    got_in = [i.name for i in model.graph.input]
    got_out = [o.name for o in model.graph.output]
    if got_in != spec.input_names or got_out != spec.output_names:
        raise RuntimeError(
            f"export of {where} has I/O {got_in} -> {got_out}, "
            f"expected {spec.input_names} -> {spec.output_names}"
        )


def load_weights(module, state: dict, where: str | Path):
    """``module`` with ``state`` loaded (strict) and frozen. A tensor whose shape does not fit
    the layer rebuilt from the rest of the checkpoint is the file's fault: one clear line."""
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        found = re.search(r"size mismatch for (\S+): copying a param with shape torch\.Size\((\[.*?\])\) from "
                          r"checkpoint, the shape in current model is torch\.Size\((\[.*?\])\)", str(e))
        detail = (f"layer {found[1]} has shape {found[2]}, but the architecture read from the other layers needs {found[3]}"
                  if found else " ".join(str(e).split())[:200])
        raise UserError(detail, where) from None
    return module.requires_grad_(False)


def write_bytes(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}", path) from None
