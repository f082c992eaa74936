"""Unity ML-Agents policies (PPO / SAC actors, e.g. Huggy the dog).

The story of one checkpoint, top to bottom:

1. ``resolve``: a run or published-repo folder holds many checkpoints (``Huggy-1999925.pt``,
   ``checkpoint.pt``, ...); the final one (highest step) is used and the note says which.
2. ``load``: ``torch.load(weights_only=True)``; the architecture is read from the shapes of
   the ``Policy`` state dict, and every tensor is checked before anything is built.
3. ``_build_module``: ``SimpleActor`` rebuilt in pure PyTorch with the same module names as
   mlagents, so the TorchScript exporter reproduces the official graph node for node:
   normalizer clamp((x-mean)/sqrt(var/steps), -5, 5), Linear+Swish body, Gaussian head
   (clip(mu,-3,3)/3, sampled with RandomNormalLike) and masked categorical branches
   (Multinomial for sampled, ArgMax for deterministic actions).
4. ``io_spec``: the exact I/O of mlagents' ModelSerializer at opset 9.

No mlagents import is needed at any point.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from rlparity.converters.family import Family, load_weights
from rlparity.converters.safe_load import load_torch_file
from rlparity.errors import NotSupportedYet, UserError
from rlparity.spec import IOSpec, TensorSpec

MODEL_EXPORT_VERSION = 3.0  # ModelApiVersion.MLAgents2_0
NORMALIZER_CLIP = 5.0
ACTION_CLIP = 3.0

_OBS = "network_body.observation_encoder.processors"
_BODY = "network_body._body_endoder.seq_layers"
_CONT = "action_model._continuous_distribution"
_DISC = "action_model._discrete_distribution.branches"
_STEP_IN_NAME = re.compile(r"-(\d+)\.pt$")
# Constant vectors the actor carries for the export; older or hand-made checkpoints may
# lack some, and their values follow from the layers.
_DERIVED_CONSTANTS = {
    "version_number", "is_continuous_int_deprecated", "continuous_act_size_vector",
    "discrete_act_size_vector", "act_size_vector_deprecated", "memory_size_vector",
}


class MLAgentsPolicy(Family):
    name = "mlagents"
    title = "Unity ML-Agents policy"
    looks_for = "an ML-Agents checkpoint (*.pt) or run folder"
    default_opset = 9  # what mlagents' ModelSerializer writes

    def __init__(self, source: Path, source_note: str, policy: dict, arch: dict, step: int | None,
                 reference: Path | None = None):
        super().__init__(source, source_note)
        self.policy = policy  # the checkpoint's "Policy" state dict, already checked
        self.arch = arch
        self.step = step
        self._reference = reference  # mlagents' own export of this checkpoint, when beside it

    # -- finding and reading the checkpoint ----------------------------------------
    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_file():
            return path.suffix == ".pt"
        return path.is_dir() and next(path.rglob("*.pt"), None) is not None

    @classmethod
    def resolve(cls, path: Path) -> tuple[Path, str]:
        """The checkpoint to read for ``path``, and a note on how it was chosen."""
        if not path.exists():
            raise UserError("no such file or folder", path)
        if path.is_file():
            return path, ""
        found = sorted(path.rglob("*.pt"))
        if not found:
            onnx_files = sorted(path.rglob("*.onnx"))
            hint = (
                f" (it holds {onnx_files[0].name}: compare exports with `rlparity diff`)"
                if onnx_files else ""
            )
            raise UserError(f"no ML-Agents checkpoint (*.pt) in this folder{hint}", path)

        def step_of(p: Path) -> int:
            named = _STEP_IN_NAME.search(p.name)
            if named:
                return int(named.group(1))
            try:  # checkpoint.pt carries its step only inside
                return _global_step(load_torch_file(p)) or -1
            except UserError:
                return -1

        # Highest step wins; at equal steps prefer the named file (Huggy-N.pt) over
        # checkpoint.pt, since the official export beside it carries the same name.
        ranked = sorted(found, key=lambda p: (step_of(p), _STEP_IN_NAME.search(p.name) is not None))
        chosen = ranked[-1]
        step = step_of(chosen)
        note = (
            f"{path} holds {len(found)} checkpoint(s); using the final one, "
            f"{chosen.relative_to(path)}" + (f" (step {step:,})" if step >= 0 else "")
        )
        return chosen, note

    @classmethod
    def load(cls, path: Path, obs_sizes: list[int] | None = None, **_: Any) -> "MLAgentsPolicy":
        file, note = cls.resolve(path)
        checkpoint = load_torch_file(file)
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("Policy"), dict):
            keys = list(checkpoint)[:5] if isinstance(checkpoint, dict) else type(checkpoint).__name__
            raise UserError(
                f"not an ML-Agents checkpoint: expected a dict with a 'Policy' state dict, found {keys}",
                file,
            )
        policy = checkpoint["Policy"]
        bad = [k for k, v in policy.items() if not _is_tensor(v)]
        if bad:
            raise UserError(f"not an ML-Agents checkpoint: Policy entry {bad[0]!r} is not a tensor", file)
        reference = _official_export_beside(file)
        if obs_sizes is None and reference is not None:
            obs_sizes = _obs_sizes_of_onnx(reference)
        arch = _read_architecture(policy, file, obs_sizes)
        return cls(file, note, policy, arch, _global_step(checkpoint), reference)

    # -- the rebuild -----------------------------------------------------------------
    def _build_module(self):
        module = _simple_actor(self.arch)
        wanted = module.state_dict()
        state = {}
        for key in wanted:
            # Older checkpoints lack the network_body.processors alias of the normalizers.
            alias = key.replace("network_body.processors.", f"{_OBS}.")
            state[key] = self.policy.get(key, self.policy.get(alias))
            if state[key] is None and key in _DERIVED_CONSTANTS:
                state[key] = wanted[key]  # follows from the architecture already read
        missing = [k for k, v in state.items() if v is None]
        if missing:
            raise UserError(f"missing layer {missing[0]}", self.source)
        return load_weights(module, state, self.source)

    def io_spec(self) -> IOSpec:
        arch = self.arch
        inputs = [
            TensorSpec(f"obs_{i}", "float32", ("batch", n), "observation", description=f"vector observation {i}")
            for i, n in enumerate(arch["obs_sizes"])
        ]
        branches = tuple(arch["branches"])
        if branches:
            inputs.append(
                TensorSpec("action_masks", "float32", ("batch", sum(branches)), "mask", segments=branches,
                           description="1 = action allowed, per branch")
            )
        outputs = [
            TensorSpec("version_number", "float32", (1,), "constant"),
            TensorSpec("memory_size", "float32", (1,), "constant"),
        ]
        if arch["continuous"]:
            n = arch["continuous"]
            outputs += [
                TensorSpec("continuous_actions", "float32", ("batch", n), "stochastic",
                           description="clip(mu + sigma*N(0,1), -3, 3)/3"),
                TensorSpec("continuous_action_output_shape", "float32", (1,), "constant"),
                TensorSpec("deterministic_continuous_actions", "float32", ("batch", n), "deterministic",
                           description="clip(mu, -3, 3)/3"),
            ]
        if branches:
            outputs += [
                TensorSpec("discrete_actions", "int64", ("batch", len(branches)), "stochastic",
                           segments=branches, description="sampled per branch from the masked softmax"),
                TensorSpec("discrete_action_output_shape", "float32", (1, len(branches)), "constant"),
                TensorSpec("deterministic_discrete_actions", "int64", ("batch", len(branches)), "deterministic",
                           segments=branches, scores="action_probabilities",
                           description="argmax of the masked softmax, per branch"),
            ]
        return IOSpec(tuple(inputs), tuple(outputs))

    # The export traces exactly what mlagents' ModelSerializer traces: every observation,
    # the action masks and the recurrent input, whether used or not (unused ones drop out
    # of the graph). Tracing the same inputs keeps even the exporter's generated constant
    # names (onnx::Div_56) identical to the official file's.
    def export_inputs(self) -> tuple:
        import torch

        obs = [torch.zeros(1, n) for n in self.arch["obs_sizes"]]
        return (*obs, torch.ones(1, sum(self.arch["branches"])), torch.zeros(1, 1, 0))

    def export_input_names(self) -> list[str]:
        return [f"obs_{i}" for i in range(len(self.arch["obs_sizes"]))] + ["action_masks", "recurrent_in"]

    def export_dynamic_axes(self) -> dict[str, dict[int, str]]:
        # As ModelSerializer declares them: every input and the sampled outputs; the
        # exporter itself names the deterministic outputs' batch axes.
        spec = self.io_spec()
        names = self.export_input_names() + [t.name for t in spec.outputs if t.role == "stochastic"]
        return {name: {0: "batch"} for name in names}

    def scores(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self.arch["branches"]:
            return {}
        import torch

        module = self.build_torch()
        with torch.no_grad():
            args = [torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in self.io_spec().input_names]
            probs = module.action_probabilities(*args)
        return {"action_probabilities": probs.numpy()}

    def float32_modules(self) -> list[str]:
        # running_variance is a sum of squared deviations over every step the trainer saw
        # (millions on a trained policy, beyond float16's 65504), and var / steps promotes
        # the int64 step count to the input's dtype: both must stay float32.
        return [f"{_OBS}.{i}.normalizer" for i, stats in enumerate(self.arch["normalizers"]) if stats is not None]

    # -- facts -------------------------------------------------------------------------
    def reference_export(self) -> Path | None:
        return self._reference

    def summary(self) -> dict[str, Any]:
        arch = self.arch
        hidden = arch["hidden"]
        module = self.build_torch()
        normalizers = []
        for i, stats in enumerate(arch["normalizers"]):
            if stats is None:
                continue
            std = np.sqrt(stats["variance"] / stats["steps"])
            normalizers.append({
                "observation": f"obs_{i}",
                "steps": stats["steps"],
                "mean_range": [_round(stats["mean"].min()), _round(stats["mean"].max())],
                "std_range": [_round(std.min()), _round(std.max())],
            })
        return {
            "family": self.name,
            "title": self.title,
            "observations": [f"obs_{i}: {n}" for i, n in enumerate(arch["obs_sizes"])],
            "observation_split": arch["obs_split_source"],
            # mlagents gives every layer hidden_units; a hand-made body may not.
            "hidden_layers": (f"{len(hidden)} x {hidden[0]}" if len(set(hidden)) == 1 else f"widths {hidden}")
                             + " (Linear + Swish)",
            "continuous_actions": arch["continuous"],
            "discrete_branches": list(arch["branches"]),
            "sigma": "state-dependent (SAC)" if arch["conditional_sigma"] else "learned constant",
            "normalize": bool(normalizers),
            "normalizers": normalizers,
            "parameters": int(sum(p.numel() for n, p in module.named_parameters() if n not in _DERIVED_CONSTANTS)),
            "training_step": self.step,
            "reference_export": str(self.reference_export()) if self.reference_export() else None,
        }

    def graph_contents(self) -> dict[str, str]:
        arch = self.arch
        inside = {
            "observation normalizer": (
                "inside: clamp((x - mean) / sqrt(var / steps), -5, 5), statistics frozen"
                if any(arch["normalizers"]) else "none: the policy was trained without normalize"
            ),
        }
        if arch["continuous"]:
            inside["continuous actions"] = (
                "inside: tanh squash of the sampled action" if arch["tanh_squash"]
                else "inside: clip(action, -3, 3) / 3, sampled with RandomNormalLike"
            )
        if arch["branches"]:
            inside["discrete actions"] = "inside: action masks, softmax, Multinomial sampling and ArgMax"
        inside["value function"] = "not inside: the critic is not part of the exported actor"
        inside["memory"] = "none: recurrent policies are not supported yet"
        return inside


# -- reading the architecture from the state dict ---------------------------------------

def _round(x: float) -> float:
    return float(f"{x:.4g}")


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _global_step(checkpoint: Any) -> int | None:
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("global_step"), dict):
        return None
    try:
        return int(checkpoint["global_step"]["_GlobalSteps__global_step"].reshape(-1)[0])
    except (KeyError, TypeError, IndexError, AttributeError, ValueError):
        return None


def _official_export_beside(file: Path) -> Path | None:
    """mlagents writes ``Name-N.onnx`` beside ``Name-N.pt``, and ``Name.onnx`` one folder up."""
    candidates = [file.with_suffix(".onnx")]
    stem = _STEP_IN_NAME.sub("", file.name)
    if stem != file.name:
        candidates += [file.parent / f"{stem}.onnx", file.parent.parent / f"{stem}.onnx"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None


def _obs_sizes_of_onnx(path: Path) -> list[int] | None:
    """The split of the observation vector, from the obs_i inputs of an official export."""
    try:
        import onnx

        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # an unreadable reference is reported by `validate`, not here
        return None
    sizes = []
    for i in range(len(graph.input)):
        match = [v for v in graph.input if v.name == f"obs_{i}"]
        if not match:
            break
        dims = match[0].type.tensor_type.shape.dim
        if len(dims) != 2 or not dims[1].dim_value:
            return None
        sizes.append(dims[1].dim_value)
    return sizes or None


def _read_architecture(policy: dict, file: Path, obs_sizes: list[int] | None) -> dict:
    def shape(key: str) -> tuple[int, ...] | None:
        return tuple(policy[key].shape) if key in policy else None

    def fail(message: str) -> UserError:
        return UserError(message, file)

    _refuse_unsupported(policy, file)

    # Body: seq_layers.0, .2, .4 ... (odd indices are the Swish activations).
    hidden, widths_in = [], []
    index = 0
    while f"{_BODY}.{index}.weight" in policy:
        w, b = shape(f"{_BODY}.{index}.weight"), shape(f"{_BODY}.{index}.bias")
        if b is None:
            raise fail(f"missing layer {_BODY}.{index}.bias")
        if len(w) != 2 or b != (w[0],):
            raise fail(f"layer {_BODY}.{index} is mis-shaped: weight {list(w or [])}, bias {list(b or [])}")
        if hidden and w[1] != hidden[-1]:
            raise fail(
                f"layer {_BODY}.{index}.weight has shape {list(w)}, expected [{w[0]}, {hidden[-1]}] "
                f"(its input is the output of the layer before)"
            )
        hidden.append(w[0])
        widths_in.append(w[1])
        index += 2
    if not hidden:
        raise fail(f"not an ML-Agents actor: missing layer {_BODY}.0.weight")
    layer_index = re.compile(rf"^{re.escape(_BODY)}\.(\d+)\.")
    stray = [k for k in policy if (m := layer_index.match(k)) and int(m.group(1)) >= index]
    if stray:
        raise fail(f"missing layer {_BODY}.{index}.weight (found {stray[0]} without it)")
    encoding = hidden[-1]
    total_obs = widths_in[0]

    # Normalizers, one per observation, when the run used normalize: true.
    normalizers: list[dict | None] = []
    i = 0
    while f"{_OBS}.{i}.normalizer.running_mean" in policy:
        normalizers.append(_read_normalizer(policy, i, file))
        i += 1
    if normalizers:
        normalized_sizes = [len(s["mean"]) for s in normalizers]
        if obs_sizes is not None and list(obs_sizes) != normalized_sizes:
            raise fail(f"observation sizes {list(obs_sizes)} do not match the normalizers' {normalized_sizes}")
        obs_sizes, split_source = normalized_sizes, "normalizer statistics"
    elif obs_sizes is not None:
        split_source = "official export beside the checkpoint (or --obs-sizes)"
        normalizers = [None] * len(obs_sizes)
    else:
        obs_sizes, split_source = [total_obs], "unknown: one observation assumed (pass --obs-sizes)"
        normalizers = [None]
    if sum(obs_sizes) != total_obs:
        raise fail(
            f"observations {list(obs_sizes)} sum to {sum(obs_sizes)}, but the first layer "
            f"{_BODY}.0.weight takes {total_obs} inputs"
        )

    # Continuous head.
    continuous, conditional_sigma = 0, False
    mu = shape(f"{_CONT}.mu.weight")
    if mu is not None:
        if f"{_CONT}.mu.bias" not in policy:
            raise fail(f"missing layer {_CONT}.mu.bias")
        if len(mu) != 2 or mu[1] != encoding or shape(f"{_CONT}.mu.bias") != (mu[0],):
            raise fail(f"layer {_CONT}.mu is mis-shaped: weight {list(mu)}, expected [n, {encoding}]")
        continuous = mu[0]
        if f"{_CONT}.log_sigma.weight" in policy:
            conditional_sigma = True
            if shape(f"{_CONT}.log_sigma.weight") != (continuous, encoding):
                raise fail(f"layer {_CONT}.log_sigma.weight is mis-shaped: {list(shape(f'{_CONT}.log_sigma.weight'))}")
        elif shape(f"{_CONT}.log_sigma") != (1, continuous):
            raise fail(f"missing or mis-shaped {_CONT}.log_sigma: expected [1, {continuous}]")

    # Discrete branches.
    branches = []
    b = 0
    while f"{_DISC}.{b}.weight" in policy:
        w = shape(f"{_DISC}.{b}.weight")
        if f"{_DISC}.{b}.bias" not in policy:
            raise fail(f"missing layer {_DISC}.{b}.bias")
        if len(w) != 2 or w[1] != encoding or shape(f"{_DISC}.{b}.bias") != (w[0],):
            raise fail(f"layer {_DISC}.{b} is mis-shaped: weight {list(w)}, expected [n, {encoding}]")
        branches.append(w[0])
        b += 1
    if not continuous and not branches:
        raise fail("missing action heads: neither action_model._continuous_distribution nor discrete branches")

    # The constants the export carries must agree with the layers.
    declared_cont = policy.get("continuous_act_size_vector")
    if declared_cont is not None and int(declared_cont.reshape(-1)[0]) != continuous:
        raise fail(f"continuous_act_size_vector says {int(declared_cont.reshape(-1)[0])}, the head has {continuous}")
    declared_disc = policy.get("discrete_act_size_vector")
    if declared_disc is not None and [int(x) for x in declared_disc.reshape(-1)] != branches:
        raise fail(f"discrete_act_size_vector says {[int(x) for x in declared_disc.reshape(-1)]}, the branches are {branches}")

    for key, value in policy.items():
        if value.is_floating_point() and not bool(value.isfinite().all()):
            raise fail(f"layer {key} holds NaN or infinite values")

    return {
        "obs_sizes": list(obs_sizes),
        "obs_split_source": split_source,
        "normalizers": normalizers,
        "hidden": hidden,
        "continuous": continuous,
        "conditional_sigma": conditional_sigma,
        # mlagents pairs a state-dependent sigma with tanh squashing (SAC) and a learned
        # constant sigma with clipping (PPO, POCA).
        "tanh_squash": conditional_sigma,
        "branches": branches,
    }


def _read_normalizer(policy: dict, i: int, file: Path) -> dict:
    prefix = f"{_OBS}.{i}.normalizer"
    try:
        mean = policy[f"{prefix}.running_mean"]
        variance = policy[f"{prefix}.running_variance"]
        steps = policy[f"{prefix}.normalization_steps"]
    except KeyError as missing:
        raise UserError(f"incomplete normalizer of observation {i}: missing {missing.args[0]}", file) from None
    if mean.ndim != 1 or variance.shape != mean.shape or steps.numel() != 1:
        raise UserError(
            f"normalizer of observation {i} is mis-shaped: mean {list(mean.shape)}, "
            f"variance {list(variance.shape)}, steps {list(steps.shape)}", file)
    steps_value = int(steps.reshape(-1)[0])
    if steps_value <= 0:
        raise UserError(f"normalizer of observation {i} has normalization_steps = {steps_value}; it must be positive", file)
    var = variance.double().numpy()
    bad = np.flatnonzero(~(var > 0))
    if bad.size:
        raise UserError(
            f"normalizer of observation {i} has zero or negative variance at {bad.size} of {var.size} "
            f"features (first: index {bad[0]}); its running statistics are corrupt", file)
    return {"mean": mean.double().numpy(), "variance": var, "steps": steps_value}


def _refuse_unsupported(policy: dict, file: Path) -> None:
    """Clear "not supported yet" errors for real ML-Agents features we do not rebuild."""
    keys = list(policy)
    memory = policy.get("memory_size_vector")
    if any(".lstm." in k for k in keys) or (memory is not None and float(memory.reshape(-1)[0]) > 0):
        raise NotSupportedYet("recurrent (memory) policies", file)
    for k in keys:
        if k.startswith(f"{_OBS}.") and ".normalizer." not in k:
            if any(part in k for part in ("conv_layers", "dense", "conv", "resnet", "sequential")):
                raise NotSupportedYet("visual observations", file)
            raise NotSupportedYet(f"observation encoder {k.rsplit('.', 2)[0]} (variable-length or custom input)", file)
        if k.startswith("network_body.observation_encoder.rsa") or "entity" in k:
            raise NotSupportedYet("variable-length (attention) observations", file)
        if k.startswith("network_body._body_endoder.") and not k.startswith(f"{_BODY}."):
            raise NotSupportedYet("goal-conditioned (hypernetwork) policies", file)


# -- the pure-PyTorch SimpleActor ---------------------------------------------------------
# Module and attribute names follow mlagents exactly: they become the ONNX initializer and
# node names, which is what makes our export identical to the official one.

def _simple_actor(arch: dict):
    import torch
    from torch import nn

    class Swish(nn.Module):
        def forward(self, data):
            return torch.mul(data, torch.sigmoid(data))

    class Normalizer(nn.Module):
        def __init__(self, size: int):
            super().__init__()
            self.register_buffer("normalization_steps", torch.tensor(1))
            self.register_buffer("running_mean", torch.zeros(size))
            self.register_buffer("running_variance", torch.ones(size))

        def forward(self, inputs):
            return torch.clamp(
                (inputs - self.running_mean) / torch.sqrt(self.running_variance / self.normalization_steps),
                -NORMALIZER_CLIP, NORMALIZER_CLIP,
            )

    class VectorInput(nn.Module):
        def __init__(self, size: int, normalize: bool):
            super().__init__()
            self.normalizer = Normalizer(size) if normalize else None

        def forward(self, inputs):
            return self.normalizer(inputs) if self.normalizer is not None else inputs

    class ObservationEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.processors = nn.ModuleList(
                VectorInput(n, stats is not None) for n, stats in zip(arch["obs_sizes"], arch["normalizers"])
            )

        def forward(self, inputs):
            return torch.cat([p(x) for p, x in zip(self.processors, inputs)], dim=1)

    class LinearEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            layers, width = [], sum(arch["obs_sizes"])
            for h in arch["hidden"]:
                layers += [nn.Linear(width, h), Swish()]
                width = h
            self.seq_layers = nn.Sequential(*layers)

        def forward(self, x):
            return self.seq_layers(x)

    class NetworkBody(nn.Module):
        def __init__(self):
            super().__init__()
            self.observation_encoder = ObservationEncoder()
            self.processors = self.observation_encoder.processors  # alias kept by mlagents
            self._body_endoder = LinearEncoder()  # sic: mlagents' spelling

        def forward(self, inputs):
            return self._body_endoder(self.observation_encoder(inputs))

    class GaussianDistribution(nn.Module):
        def __init__(self, hidden: int, n: int):
            super().__init__()
            self.mu = nn.Linear(hidden, n)
            if arch["conditional_sigma"]:
                self.log_sigma = nn.Linear(hidden, n)
            else:
                self.log_sigma = nn.Parameter(torch.zeros(1, n))

        def forward(self, inputs):
            mu = self.mu(inputs)
            if arch["conditional_sigma"]:
                log_sigma = torch.clamp(self.log_sigma(inputs), min=-20, max=2)
            else:
                log_sigma = mu * 0 + self.log_sigma  # mlagents broadcasts to the batch this way
            return mu, torch.exp(log_sigma)

    class MultiCategoricalDistribution(nn.Module):
        def __init__(self, hidden: int, sizes: list[int]):
            super().__init__()
            self.act_sizes = sizes
            self.branches = nn.ModuleList(nn.Linear(hidden, n) for n in sizes)

        def forward(self, inputs, masks):
            bounds = np.cumsum([0, *self.act_sizes])
            split_masks = [masks[:, int(a):int(b)] for a, b in zip(bounds[:-1], bounds[1:])]
            probabilities = []
            for allow, branch in zip(split_masks, self.branches):
                logits = branch(inputs)
                block = -1.0 * allow + 1.0
                logits = logits * allow - 1e8 * block
                probabilities.append(torch.softmax(logits, dim=-1))
            return probabilities

    class ActionModel(nn.Module):
        def __init__(self, hidden: int):
            super().__init__()
            self._continuous_distribution = GaussianDistribution(hidden, arch["continuous"]) if arch["continuous"] else None
            self._discrete_distribution = MultiCategoricalDistribution(hidden, arch["branches"]) if arch["branches"] else None

    class SimpleActor(nn.Module):
        def __init__(self):
            super().__init__()
            hidden = arch["hidden"][-1]
            branches = arch["branches"]
            self.n_obs = len(arch["obs_sizes"])
            self.version_number = nn.Parameter(torch.Tensor([MODEL_EXPORT_VERSION]), requires_grad=False)
            self.is_continuous_int_deprecated = nn.Parameter(
                torch.Tensor([int(bool(arch["continuous"]))]), requires_grad=False)
            self.continuous_act_size_vector = nn.Parameter(torch.Tensor([arch["continuous"]]), requires_grad=False)
            self.discrete_act_size_vector = nn.Parameter(torch.Tensor([branches]), requires_grad=False)
            self.act_size_vector_deprecated = nn.Parameter(
                torch.Tensor([arch["continuous"] + sum(branches)]), requires_grad=False)
            self.network_body = NetworkBody()
            self.memory_size_vector = nn.Parameter(torch.Tensor([0]), requires_grad=False)
            self.action_model = ActionModel(hidden)

        def _encode(self, args):
            encoding = self.network_body(list(args[: self.n_obs]))
            masks = args[self.n_obs] if len(args) > self.n_obs else None
            return encoding, masks

        def action_probabilities(self, *args):
            """The masked softmax of every branch side by side (the scores behind argmax)."""
            encoding, masks = self._encode(args)
            return torch.cat(self.action_model._discrete_distribution(encoding, masks), dim=1)

        def forward(self, *args):
            encoding, masks = self._encode(args)
            out = [self.version_number, self.memory_size_vector]
            model = self.action_model
            if model._continuous_distribution is not None:
                mu, sigma = model._continuous_distribution(encoding)
                sampled = mu + torch.randn_like(mu) * sigma
                if arch["tanh_squash"]:
                    sampled, deterministic = torch.tanh(sampled), mu
                else:
                    sampled = torch.clamp(sampled, -ACTION_CLIP, ACTION_CLIP) / ACTION_CLIP
                    deterministic = torch.clamp(mu, -ACTION_CLIP, ACTION_CLIP) / ACTION_CLIP
                out += [sampled, self.continuous_act_size_vector, deterministic]
            if model._discrete_distribution is not None:
                probabilities = model._discrete_distribution(encoding, masks)
                out += [
                    torch.cat([torch.multinomial(p, 1) for p in probabilities], dim=1),
                    self.discrete_act_size_vector,
                    torch.cat([torch.argmax(p, dim=1, keepdim=True) for p in probabilities], dim=1),
                ]
            return tuple(out)

    return SimpleActor()
