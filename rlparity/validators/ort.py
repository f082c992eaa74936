"""onnxruntime on the CPU: our export (``ort-cpu``) or the library's own (``ort-ref``)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from rlparity.errors import UserError
from rlparity.validators.runtimes import Runtime


class OrtRuntime(Runtime):
    kind = "onnxruntime"

    def __init__(self, name: str = "ort-cpu", provider: str = "CPUExecutionProvider", optimize: bool = True):
        self.name = name
        self.provider = provider
        self.device = "cpu" if provider == "CPUExecutionProvider" else provider
        self.optimize = optimize
        self.session = None
        self.source = None

    def available(self) -> tuple[bool, str]:
        import onnxruntime

        if self.provider not in onnxruntime.get_available_providers():
            return False, f"onnxruntime here has no {self.provider}"
        return True, ""

    def prepare(self, model: bytes | str | Path) -> None:
        """``model``: the ONNX bytes, or the path of an .onnx file."""
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        if not self.optimize:
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.source = None if isinstance(model, bytes) else str(model)
        try:
            payload = model if isinstance(model, bytes) else str(model)
            self.session = onnxruntime.InferenceSession(payload, options, providers=[self.provider])
        except Exception as e:  # onnxruntime raises its own exception types for bad files
            detail = " ".join(str(e).split())
            # "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from X failed:<why>"
            detail = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", detail)
            detail = re.sub(r"^Load model from .*? failed:", "", detail).strip()[:200]
            raise UserError(f"onnxruntime cannot load this model: {detail}", self.source or self.name) from None
        # Read once: run() is timed by `bench`, where microseconds count.
        self._input_names = [i.name for i in self.session.get_inputs()]
        self._output_names = [o.name for o in self.session.get_outputs()]

    @property
    def input_names(self) -> list[str]:
        return self._input_names

    @property
    def output_names(self) -> list[str]:
        return self._output_names

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            wanted = {name: feeds[name] for name in self._input_names}
        except KeyError:
            missing = [name for name in self._input_names if name not in feeds]
            raise ValueError(f"the model needs input(s) {missing} that the validation inputs do not have") from None
        return dict(zip(self._output_names, self.session.run(None, wanted)))

    def close(self) -> None:
        self.session = None

    def info(self) -> dict[str, Any]:
        import onnxruntime

        info = super().info()
        info["onnxruntime"] = onnxruntime.__version__
        info["provider"] = self.provider
        if self.source:
            info["model"] = self.source
        return info
