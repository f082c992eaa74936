"""Hugging Face Decision Transformers (e.g. edbeeching/decision-transformer-gym-hopper-medium).

The story of one model folder, top to bottom:

1. ``config_path`` / ``weights_path``: a folder laid out as transformers' ``save_pretrained`` writes it:
   ``config.json`` (``model_type: decision_transformer``) and ``model.safetensors`` or
   ``pytorch_model.bin``. When both weight files are there the safetensors one is read
   (no pickle at all) and the note says so.
2. ``load``: config.json read as JSON, with transformers' own defaults for missing keys;
   weights read with safetensors, or ``torch.load(weights_only=True)``; every tensor's
   shape is checked against the config before anything is built, so a config that does
   not match its weights is one clear line, not a traceback from load_state_dict.
3. ``_build_module``: DecisionTransformerModel rebuilt in pure PyTorch with transformers'
   parameter names: timestep / return / state / action embeddings, embed_ln over the
   stacked (R_t, s_t, a_t) tokens, GPT-2 blocks (Conv1D weights stored [in, out], the
   configured activation, layer-norm epsilon and attention scaling), GPT-2's ``wpe[0]``
   added to every token (the model passes position 0 everywhere), a causal plus padding
   mask, and the state / action (tanh) / return heads.
4. ``io_spec``: optimum's ONNX names and order, dynamic batch and sequence axes.
5. ``DecisionTransformerController``: the autoregressive control loop of the Hugging Face
   example (normalized states, returns scaled by 1/1000, left-padded context window),
   driven by any runtime's ``run(feeds)``.

transformers is never imported.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rlparity.converters.family import Family, load_weights
from rlparity.converters.safe_load import load_torch_file, require_file
from rlparity.errors import NotSupportedYet, UserError
from rlparity.spec import IOSpec, TensorSpec

MODEL_TYPE = "decision_transformer"
CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
PICKLE_WEIGHTS = "pytorch_model.bin"
ROLLOUT_SETTINGS = "rollout.json"  # optional, beside config.json: see RolloutSettings
DEFAULT_CONTEXT = 20  # K of the Hugging Face example (the legacy config.max_length default)

# DecisionTransformerConfig's defaults, used where config.json omits a key (as transformers does).
CONFIG_DEFAULTS: dict[str, Any] = {
    "state_dim": 17, "act_dim": 4, "hidden_size": 128, "max_ep_len": 4096, "action_tanh": True,
    "vocab_size": 1, "n_positions": 1024, "n_layer": 3, "n_head": 1, "n_inner": None,
    "activation_function": "relu", "layer_norm_epsilon": 1e-5, "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, "add_cross_attention": False,
}
# transformers' attribute_map: a config may use either name.
CONFIG_ALIASES = {"num_attention_heads": "n_head", "num_hidden_layers": "n_layer", "max_position_embeddings": "n_positions"}

# The state normalization and target of the public hopper-medium model (Hugging Face example).
HOPPER_MEDIUM_MEAN = (1.311279, -0.08469521, -0.5382719, -0.07201576, 0.04932366, 2.1066856,
                      -0.15017354, 0.00878345, -0.2848186, -0.18540096, -0.28461286)
HOPPER_MEDIUM_STD = (0.17790751, 0.05444621, 0.21297139, 0.14530419, 0.6124444, 0.85174465,
                     1.4515252, 0.6751696, 1.536239, 1.6160746, 5.6072536)
HOPPER_TARGET_RETURN = 3600.0  # environment reward units; 3.6 once scaled
RETURN_SCALE = 1000.0

# Keys transformers ignores on load: GPT-2's old causal-mask buffers.
_IGNORED_KEY = re.compile(r"^encoder\.h\.\d+\.(attn|crossattention)\.(bias|masked_bias)$")
_LAYER_KEY = re.compile(r"^encoder\.h\.(\d+)\.")
_OUTPUTS = ("state_preds", "action_preds", "return_preds")


class DecisionTransformer(Family):
    name = "decision_transformer"
    title = "Hugging Face Decision Transformer"
    looks_for = f"a Hugging Face Decision Transformer folder ({CONFIG} + {SAFETENSORS} or {PICKLE_WEIGHTS})"
    default_opset = 17
    excluded_from_comparison = "positions where attention_mask is 0 (left padding), whose outputs are never used"

    def __init__(self, source: Path, source_note: str, folder: Path, config: dict, state: dict, weights_note: str):
        super().__init__(source, source_note)
        self.folder = folder
        self.config = config        # config.json with transformers' defaults filled in
        self.state = state          # the checked float32 state dict, transformers' names
        self.weights_note = weights_note
        self._settings: RolloutSettings | None = None  # rollout.json or the defaults, read once

    # -- finding and reading the model ------------------------------------------------
    @classmethod
    def sniff(cls, path: Path) -> bool:
        """A transformers folder: config.json naming a model_type, or beside HF weights."""
        folder = path if path.is_dir() else path.parent
        if path.is_file() and path.name not in (CONFIG, SAFETENSORS, PICKLE_WEIGHTS):
            return False
        config = folder / CONFIG
        if not config.is_file():
            return False
        if (folder / SAFETENSORS).exists() or (folder / PICKLE_WEIGHTS).exists():
            return True
        try:
            data = json.loads(config.read_text())
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and "model_type" in data

    @classmethod
    def config_path(cls, path: Path) -> Path:
        """config.json of the folder ``path`` is, or is in (a config or weights file)."""
        if not path.exists():
            raise UserError("no such file or folder", path)
        folder = path if path.is_dir() else path.parent
        if not (folder / CONFIG).is_file():
            raise UserError(f"no {CONFIG} in this folder: a Decision Transformer needs its config beside the weights",
                            folder)
        return folder / CONFIG

    @classmethod
    def weights_path(cls, path: Path) -> tuple[Path, str]:
        """The weights file to read for ``path``, and a note on the choice."""
        if path.is_file() and path.name in (SAFETENSORS, PICKLE_WEIGHTS):
            return path, ""
        folder = path if path.is_dir() else path.parent
        safetensors, pickled = folder / SAFETENSORS, folder / PICKLE_WEIGHTS
        if safetensors.exists():
            note = f"read {SAFETENSORS} ({PICKLE_WEIGHTS} is also there and was not read)" if pickled.exists() else ""
            return safetensors, note
        if pickled.exists():
            return pickled, ""
        for index in (f"{SAFETENSORS}.index.json", f"{PICKLE_WEIGHTS}.index.json"):
            if (folder / index).exists():
                raise NotSupportedYet(f"sharded weights ({index})", folder / index)
        raise UserError(f"no weights: neither {SAFETENSORS} nor {PICKLE_WEIGHTS} is beside {CONFIG}", folder)

    @classmethod
    def load(cls, path: Path, **_: Any) -> "DecisionTransformer":
        config_path = cls.config_path(path)
        config = read_config(config_path)  # a folder of another model type is named as such first
        weights, note = cls.weights_path(path)
        state, weights_note = check_weights(read_weights(weights), config, weights)
        return cls(weights, note, config_path.parent, config, state, weights_note)

    # -- the rebuild -------------------------------------------------------------------
    def _build_module(self):
        return load_weights(_decision_transformer(self.config), self.state, self.source)

    @property
    def context_length(self) -> int:
        """K, the steps the control loop feeds: rollout.json, config.json's max_length, or 20."""
        return self._stored_settings().context_length

    def io_spec(self) -> IOSpec:
        c = self.config
        s, a = c["state_dim"], c["act_dim"]
        # optimum's DecisionTransformerOnnxConfig: these names, in this order.
        inputs = (
            TensorSpec("states", "float32", ("batch", "sequence", s), "observation",
                       description="states, normalized with the training set's mean and std"),
            TensorSpec("actions", "float32", ("batch", "sequence", a), "observation",
                       description="actions taken, in [-1, 1]; zeros for the step being decided"),
            TensorSpec("timesteps", "int64", ("batch", "sequence"), "index", value_range=(0, c["max_ep_len"]),
                       description=f"episode step of each position, below max_ep_len {c['max_ep_len']}"),
            TensorSpec("returns_to_go", "float32", ("batch", "sequence", 1), "observation",
                       description="return still to collect, scaled (1/1000 for the gym models)"),
            TensorSpec("attention_mask", "int64", ("batch", "sequence"), "mask",
                       description="1 = a real step, 0 = left padding"),
        )
        outputs = (
            TensorSpec("state_preds", "float32", ("batch", "sequence", s), "deterministic",
                       description="next state, predicted from each action token"),
            TensorSpec("action_preds", "float32", ("batch", "sequence", a), "deterministic",
                       description="action, predicted from each state token" + (" (tanh)" if c["action_tanh"] else "")),
            TensorSpec("return_preds", "float32", ("batch", "sequence", 1), "deterministic",
                       description="return-to-go, predicted from each action token"),
        )
        return IOSpec(inputs, outputs, axes={"batch": 2, "sequence": self.context_length})

    def tolerances(self) -> dict[str, tuple[float, float]]:
        return {name: (1e-5, 1e-5) for name in _OUTPUTS}

    def validation_shapes(self, batch: int) -> list[dict[str, int]]:
        """The context window (the export's trace length), shorter windows, and batch 1."""
        k = self.context_length
        shapes = [{"batch": batch, "sequence": n} for n in dict.fromkeys((k, 5, 1))]
        if batch != 1:
            shapes.append({"batch": 1, "sequence": k})  # what the control loop feeds
        return shapes

    def make_feeds(self, batch: int, seed: int, **axes: int):
        return decision_feeds(self.config, batch, axes.get("sequence", self.context_length), seed)

    def valid_elements(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        real = np.asarray(feeds["attention_mask"]) != 0  # [batch, sequence]
        return {name: real[:, :, None] for name in _OUTPUTS}

    # -- facts -------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        c = self.config
        settings = self._stored_settings()
        return {
            "family": self.name,
            "title": self.title,
            "config": str(self.folder / CONFIG),
            "weights": self.source.name + (f" ({self.weights_note})" if self.weights_note else ""),
            "state_dim": c["state_dim"],
            "act_dim": c["act_dim"],
            "transformer": (f"GPT-2, {c['n_layer']} layers x {c['n_head']} heads, hidden {c['hidden_size']}, "
                            f"inner {c['n_inner'] or 4 * c['hidden_size']}, {c['activation_function']}"),
            "max_ep_len": c["max_ep_len"],
            "action_tanh": c["action_tanh"],
            "context_length": self.context_length,
            "parameters": int(sum(t.numel() for t in self.state.values())),
            "rollout_settings": (settings.source if settings.state_mean is not None
                                 else f"none (add {ROLLOUT_SETTINGS} for the control loop)"),
            "transformers_version": c.get("transformers_version"),
        }

    def graph_contents(self) -> dict[str, str]:
        c = self.config
        return {
            "tokens": "inside: (R_t, s_t, a_t) per step, each embedding plus the timestep embedding, then embed_ln",
            "position embedding": "inside: GPT-2's wpe[0] added to every token (the model passes position 0 everywhere)",
            "attention mask": ("inside: causal over the tokens plus attention_mask on the keys; a query with no key "
                               "to attend to (left padding) gets zeros, as torch's scaled_dot_product_attention gives"),
            "action squash": "inside: tanh on action_preds" if c["action_tanh"] else "none: action_preds are not squashed",
            "state normalization": "not inside: the control loop normalizes states with mean/std before the model",
            "return scaling": "not inside: the control loop scales returns-to-go (1/1000) before the model",
            "last_hidden_state": "not exported: optimum's export also outputs it; rlparity exports the three predictions",
        }

    # -- the control loop's settings ---------------------------------------------------
    def rollout_settings(self, settings_file: Path | None = None, **overrides: Any) -> "RolloutSettings":
        """Normalization, target return and context for the control loop.

        From ``settings_file``, else ``rollout.json`` beside config.json when present, else
        hopper-medium's (for 11-dimensional states); ``overrides`` (e.g. from command-line
        options) win.
        """
        if settings_file is not None:
            settings = _read_rollout_settings(self.folder, self.config, Path(settings_file))
        else:
            settings = self._stored_settings()
        values = {k: v for k, v in overrides.items() if v is not None}
        if values:
            settings = RolloutSettings(**{**settings.__dict__, **values, "source": settings.source + " with overrides"})
            settings.check(self.config["state_dim"], self.folder / ROLLOUT_SETTINGS)
        if settings.state_mean is None:
            raise UserError(
                f"no state normalization for state_dim {self.config['state_dim']}: add {ROLLOUT_SETTINGS} "
                "(state_mean, state_std) beside config.json", self.folder)
        return settings

    def _stored_settings(self) -> "RolloutSettings":
        if self._settings is None:
            self._settings = _read_rollout_settings(self.folder, self.config)
        return self._settings

    def controller(self, settings_file: Path | None = None, **overrides: Any) -> "DecisionTransformerController":
        c = self.config
        return DecisionTransformerController(c["state_dim"], c["act_dim"], c["max_ep_len"],
                                             self.rollout_settings(settings_file, **overrides))

    def rollout_controller(self, settings_file: Path | None = None, **overrides: Any) -> "DecisionTransformerController":
        return self.controller(settings_file, **overrides)


# -- reading config.json and the weights -----------------------------------------------------

def read_config(path: Path) -> dict[str, Any]:
    require_file(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError("not a JSON config: the file is not UTF-8 text", path) from None
    except json.JSONDecodeError as e:
        raise UserError(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})", path) from None
    if not isinstance(raw, dict):
        raise UserError(f"not a transformers config: expected a JSON object, found {type(raw).__name__}", path)
    model_type = raw.get("model_type")
    if model_type != MODEL_TYPE:
        found = f"model_type {model_type!r}" if model_type else "no model_type"
        raise UserError(f"{found}: rlparity reads Hugging Face models of model_type {MODEL_TYPE!r} only", path)
    config = dict(CONFIG_DEFAULTS)
    for key, value in raw.items():
        config[CONFIG_ALIASES.get(key, key)] = value

    def positive_int(key: str) -> int:
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{key} must be a positive integer, found {value!r}", path)
        return value

    for key in ("state_dim", "act_dim", "hidden_size", "max_ep_len", "vocab_size", "n_positions", "n_layer", "n_head"):
        positive_int(key)
    if config["n_inner"] is not None:
        positive_int("n_inner")
    if config["hidden_size"] % config["n_head"]:
        raise UserError(f"hidden_size {config['hidden_size']} is not divisible by n_head {config['n_head']}", path)
    eps = config["layer_norm_epsilon"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise UserError(f"layer_norm_epsilon must be a positive number, found {eps!r}", path)
    for key in ("action_tanh", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                "reorder_and_upcast_attn", "add_cross_attention"):
        if not isinstance(config[key], bool):
            raise UserError(f"{key} must be true or false, found {config[key]!r}", path)
    if config["activation_function"] not in ACTIVATIONS:
        raise NotSupportedYet(f"activation_function {config['activation_function']!r} "
                              f"(supported: {', '.join(ACTIVATIONS)})", path)
    max_length = config.get("max_length")
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise UserError(f"max_length must be a positive integer, found {max_length!r}", path)
    return config


def read_weights(path: Path) -> dict:
    """A flat {name: tensor} from model.safetensors or pytorch_model.bin, never running code."""
    require_file(path)
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            detail = " ".join(str(e).split())[:160] or type(e).__name__
            raise UserError(f"not a readable safetensors file: truncated or corrupt ({detail})", path) from None
    state = load_torch_file(path)
    if not isinstance(state, dict) or not state:
        raise UserError(f"not a transformers weights file: expected a dict of tensors, found {type(state).__name__}",
                        path)
    return state


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every weight of DecisionTransformerModel and its shape, from the config."""
    h, s, a = config["hidden_size"], config["state_dim"], config["act_dim"]
    inner = config["n_inner"] or 4 * h
    shapes = {
        "embed_timestep.weight": (config["max_ep_len"], h),
        "embed_return.weight": (h, 1), "embed_return.bias": (h,),
        "embed_state.weight": (h, s), "embed_state.bias": (h,),
        "embed_action.weight": (h, a), "embed_action.bias": (h,),
        "embed_ln.weight": (h,), "embed_ln.bias": (h,),
        "encoder.wte.weight": (config["vocab_size"], h),
        "encoder.wpe.weight": (config["n_positions"], h),
        "encoder.ln_f.weight": (h,), "encoder.ln_f.bias": (h,),
        "predict_state.weight": (s, h), "predict_state.bias": (s,),
        "predict_action.0.weight": (a, h), "predict_action.0.bias": (a,),
        "predict_return.weight": (1, h), "predict_return.bias": (1,),
    }
    for i in range(config["n_layer"]):
        p = f"encoder.h.{i}"
        shapes.update({
            f"{p}.ln_1.weight": (h,), f"{p}.ln_1.bias": (h,),
            f"{p}.attn.c_attn.weight": (h, 3 * h), f"{p}.attn.c_attn.bias": (3 * h,),
            f"{p}.attn.c_proj.weight": (h, h), f"{p}.attn.c_proj.bias": (h,),
            f"{p}.ln_2.weight": (h,), f"{p}.ln_2.bias": (h,),
            f"{p}.mlp.c_fc.weight": (h, inner), f"{p}.mlp.c_fc.bias": (inner,),
            f"{p}.mlp.c_proj.weight": (inner, h), f"{p}.mlp.c_proj.bias": (h,),
        })
    return shapes


# Which config.json entry sets a weight's shape, for messages that point at the cause.
_SHAPE_FROM = (("embed_state", "state_dim"), ("predict_state", "state_dim"), ("embed_action", "act_dim"),
               ("predict_action", "act_dim"), ("embed_timestep", "max_ep_len"), ("wpe", "n_positions"),
               ("wte", "vocab_size"), ("c_fc", "n_inner"), ("mlp.c_proj", "n_inner"))


def check_weights(state: dict, config: dict, path: Path) -> tuple[dict, str]:
    """The state dict as float32 with transformers' names, or a UserError naming the first problem."""
    import torch

    bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise UserError(f"not a weights file: entry {bad[0]!r} is not a tensor", path)
    prefix = "decision_transformer."  # how a model wrapped by another saves it
    if state and all(k.startswith(prefix) for k in state):
        state = {k[len(prefix):]: v for k, v in state.items()}
    wanted = expected_shapes(config)
    state = {k: v for k, v in state.items() if not _IGNORED_KEY.match(k)}
    if config["add_cross_attention"]:  # never used by the Decision Transformer's forward
        state = {k: v for k, v in state.items() if ".crossattention." not in k and ".ln_cross_attn." not in k}
    layers_found = {int(m.group(1)) for k in state if (m := _LAYER_KEY.match(k))}
    if layers_found and max(layers_found) + 1 != config["n_layer"]:
        raise UserError(f"{path.name} holds {max(layers_found) + 1} transformer layers (encoder.h.*), but "
                        f"config.json says n_layer {config['n_layer']}", path)
    unexpected = [k for k in state if k not in wanted]
    if unexpected:
        raise UserError(f"unexpected weight {unexpected[0]}: not part of a Decision Transformer with this "
                        f"config.json ({len(unexpected)} such weight(s))", path)
    if "encoder.wte.weight" not in state:  # unused: the model feeds embeddings, never token ids
        state["encoder.wte.weight"] = torch.zeros(wanted["encoder.wte.weight"])
    missing = [k for k in wanted if k not in state]
    if missing:
        raise UserError(f"missing weight {missing[0]} ({len(missing)} missing)", path)
    for key, shape in wanted.items():
        got = tuple(state[key].shape)
        if got != shape:
            field = next((f for part, f in _SHAPE_FROM if part in key), "hidden_size")
            cause = f"{field} {config[field] if config[field] is not None else 'unset'}"
            if field != "hidden_size":
                cause += f", hidden_size {config['hidden_size']}"
            raise UserError(f"{key} has shape {list(got)}, but config.json ({cause}) implies {list(shape)}", path)
    dtypes = {str(v.dtype).removeprefix("torch.") for v in state.values()}
    if any(not v.is_floating_point() for v in state.values()):
        key = next(k for k, v in state.items() if not v.is_floating_point())
        raise UserError(f"weight {key} is {str(state[key].dtype).removeprefix('torch.')}, expected floating point", path)
    state = {k: v.to(torch.float32).contiguous() for k, v in state.items()}
    for key, value in state.items():
        if not bool(value.isfinite().all()):
            raise UserError(f"weight {key} holds NaN or infinite values", path)
    note = "" if dtypes == {"float32"} else f"stored as {', '.join(sorted(dtypes))}, computed in float32"
    return state, note


# -- validation inputs ---------------------------------------------------------------------------

def decision_feeds(config: dict, batch: int, sequence: int, seed: int):
    """Inputs shaped like the control loop's: one trajectory window per row.

    States ~ N(0, 1) (they are normalized), actions in [-1, 1], returns-to-go decreasing,
    timesteps increasing below max_ep_len, and left padding on some rows. Padded
    positions hold random values, not zeros: the model must ignore them, and does.
    Edge rows first: a full window, the first step of an episode (one real step), half
    padded, a window ending at max_ep_len - 1, all zeros, actions at the +-1 bounds and
    states far outside the training distribution.
    """
    from rlparity.validators.feeds import Feeds

    if batch < 1 or sequence < 1:
        raise ValueError("batch and sequence must be at least 1")
    s, a, max_ep_len = config["state_dim"], config["act_dim"], config["max_ep_len"]
    rng = np.random.default_rng(seed)
    states = rng.standard_normal((batch, sequence, s))
    actions = rng.uniform(-1.0, 1.0, (batch, sequence, a))
    start = rng.uniform(0.0, 4.0, (batch, 1))
    returns = start - np.cumsum(rng.uniform(0.0, 0.006, (batch, sequence)), axis=1)
    first_step = rng.integers(0, max(1, max_ep_len - sequence + 1), (batch, 1))
    timesteps = np.minimum(first_step + np.arange(sequence), max_ep_len - 1)
    padding = np.where(rng.random(batch) < 1 / 3, rng.integers(1, max(2, sequence), batch), 0)
    edges = ["full window", "first step", "half padded", "ends at max_ep_len - 1", "zeros",
             "actions at +-1", "states x10"]
    rows = []
    for row in range(batch):
        kind = edges[row] if row < len(edges) else "random"
        if kind == "full window":
            padding[row] = 0
        elif kind == "first step":
            padding[row] = sequence - 1
        elif kind == "half padded":
            padding[row] = sequence // 2
        elif kind == "ends at max_ep_len - 1":
            timesteps[row] = np.maximum(max_ep_len - sequence + np.arange(sequence), 0)
        elif kind == "zeros":
            states[row], actions[row], returns[row] = 0.0, 0.0, 0.0
        elif kind == "actions at +-1":
            actions[row] = np.where(rng.random((sequence, a)) < 0.5, -1.0, 1.0)
        elif kind == "states x10":
            states[row] *= 10.0
        padding[row] = min(padding[row], sequence - 1)  # at least one real step per row
        rows.append("random, left-padded" if kind == "random" and padding[row] else kind)
    mask = (np.arange(sequence)[None, :] >= padding[:, None]).astype(np.int64)
    arrays = {
        "states": states.astype(np.float32),
        "actions": actions.astype(np.float32),
        "timesteps": timesteps.astype(np.int64),
        "returns_to_go": returns[:, :, None].astype(np.float32),
        "attention_mask": mask,
    }
    return Feeds(arrays, rows, seed)


# -- the pure-PyTorch DecisionTransformerModel ---------------------------------------------------
# Parameter names follow transformers exactly, so its state dict loads with strict=True and
# the ONNX initializers carry the names users know.

def _gelu_tanh(x):
    import torch

    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _activation(name: str) -> Callable:
    import torch
    from torch.nn import functional as F

    return {
        "relu": F.relu,
        "gelu": F.gelu,  # exact (erf), as transformers' GELUActivation
        "gelu_new": _gelu_tanh,
        "gelu_python_tanh": _gelu_tanh,
        "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_fast": lambda x: 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))),
        "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
        "silu": F.silu,
        "swish": F.silu,
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
    }[name]


ACTIVATIONS = ("relu", "gelu", "gelu_new", "gelu_python_tanh", "gelu_pytorch_tanh", "gelu_fast", "quick_gelu",
               "silu", "swish", "tanh", "sigmoid")


def _decision_transformer(config: dict):
    import torch
    from torch import nn

    h, heads = config["hidden_size"], config["n_head"]
    head_dim = h // heads
    eps = config["layer_norm_epsilon"]
    act = _activation(config["activation_function"])

    class Conv1D(nn.Module):
        """GPT-2's linear layer: weight stored [in, out]; y = bias + x @ weight (addmm, as transformers)."""

        def __init__(self, n_out: int, n_in: int):
            super().__init__()
            self.n_out = n_out
            self.weight = nn.Parameter(torch.empty(n_in, n_out))
            self.bias = nn.Parameter(torch.empty(n_out))

        def forward(self, x):
            size_out = x.size()[:-1] + (self.n_out,)
            return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)

    class Attention(nn.Module):
        def __init__(self, layer_idx: int):
            super().__init__()
            self.c_attn = Conv1D(3 * h, h)
            self.c_proj = Conv1D(h, h)
            scaling = head_dim ** -0.5 if config["scale_attn_weights"] else 1.0
            if config["scale_attn_by_inverse_layer_idx"]:
                scaling /= float(layer_idx + 1)
            self.scaling = scaling
            # reorder_and_upcast_attn only changes the order of float32 operations for
            # half-precision training; in float32 inference it is the same product.

        def forward(self, x, allowed, has_key):
            query, key, value = self.c_attn(x).split(h, dim=2)
            shape = (*x.shape[:-1], -1, head_dim)
            query, key, value = (t.view(shape).transpose(1, 2) for t in (query, key, value))
            scores = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
            # The dtype's lowest finite value, not -inf: a fully masked row stays NaN-free in
            # any precision (a NaN there would leak into real positions through 0 * NaN).
            scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
            # A query that may attend to nothing (a padded position with only padding before
            # it) gets zeros, as torch's scaled_dot_product_attention returns for it.
            weights = torch.softmax(scores, dim=-1) * has_key
            out = torch.matmul(weights, value).transpose(1, 2)
            out = out.reshape(*out.shape[:-2], -1).contiguous()
            return self.c_proj(out)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            inner = config["n_inner"] or 4 * h
            self.c_fc = Conv1D(inner, h)
            self.c_proj = Conv1D(h, inner)

        def forward(self, x):
            return self.c_proj(act(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, layer_idx: int):
            super().__init__()
            self.ln_1 = nn.LayerNorm(h, eps=eps)
            self.attn = Attention(layer_idx)
            self.ln_2 = nn.LayerNorm(h, eps=eps)
            self.mlp = MLP()

        def forward(self, x, allowed, has_key):
            x = self.attn(self.ln_1(x), allowed, has_key) + x
            return x + self.mlp(self.ln_2(x))

    class GPT2Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(config["vocab_size"], h)  # unused: the inputs are embeddings
            self.wpe = nn.Embedding(config["n_positions"], h)
            self.h = nn.ModuleList(Block(i) for i in range(config["n_layer"]))
            self.ln_f = nn.LayerNorm(h, eps=eps)

        def forward(self, tokens, token_mask):
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            causal = positions[None, :] <= positions[:, None]             # [query, key]
            allowed = causal[None, None] & token_mask[:, None, None, :]   # [batch, 1, query, key]
            has_key = allowed.any(dim=-1, keepdim=True).to(tokens.dtype)
            # The Decision Transformer passes position_ids = 0 for every token: wpe[0] everywhere.
            x = tokens + self.wpe.weight[0]
            for block in self.h:
                x = block(x, allowed, has_key)
            return self.ln_f(x)

    class DecisionTransformerModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = GPT2Encoder()
            self.embed_timestep = nn.Embedding(config["max_ep_len"], h)
            self.embed_return = nn.Linear(1, h)
            self.embed_state = nn.Linear(config["state_dim"], h)
            self.embed_action = nn.Linear(config["act_dim"], h)
            self.embed_ln = nn.LayerNorm(h)  # transformers leaves this one at the default eps
            self.predict_state = nn.Linear(h, config["state_dim"])
            self.predict_action = nn.Sequential(nn.Linear(h, config["act_dim"]),
                                                *([nn.Tanh()] if config["action_tanh"] else []))
            self.predict_return = nn.Linear(h, 1)

        def forward(self, states, actions, timesteps, returns_to_go, attention_mask):
            batch, steps = states.shape[0], states.shape[1]
            time = self.embed_timestep(timesteps)
            state_tokens = self.embed_state(states) + time
            action_tokens = self.embed_action(actions) + time
            return_tokens = self.embed_return(returns_to_go) + time
            # (R_1, s_1, a_1, R_2, s_2, a_2, ...): states predict actions autoregressively.
            tokens = (torch.stack((return_tokens, state_tokens, action_tokens), dim=1)
                      .permute(0, 2, 1, 3).reshape(batch, 3 * steps, h))
            tokens = self.embed_ln(tokens)
            token_mask = (torch.stack((attention_mask, attention_mask, attention_mask), dim=1)
                          .permute(0, 2, 1).reshape(batch, 3 * steps)) != 0
            x = self.encoder(tokens, token_mask)
            x = x.reshape(batch, steps, 3, h).permute(0, 2, 1, 3)  # x[:, 1, t] is the token of s_t
            return self.predict_state(x[:, 2]), self.predict_action(x[:, 1]), self.predict_return(x[:, 2])

    return DecisionTransformerModel()


# -- the control loop ---------------------------------------------------------------------------

@dataclass
class RolloutSettings:
    """What the control loop needs beyond the model: ``rollout.json`` beside config.json.

    ``rollout.json`` (every key optional)::

        {"state_mean": [11 floats], "state_std": [11 floats],
         "target_return": 3600, "return_scale": 1000, "context_length": 20}

    ``target_return`` is in the environment's reward units; the model sees
    ``target_return / return_scale`` (3.6 for hopper-medium).
    """

    state_mean: np.ndarray | None
    state_std: np.ndarray | None
    target_return: float = HOPPER_TARGET_RETURN
    return_scale: float = RETURN_SCALE
    context_length: int = DEFAULT_CONTEXT
    source: str = field(default="hopper-medium defaults")

    def check(self, state_dim: int, where: Path) -> None:
        for key in ("state_mean", "state_std"):
            value = getattr(self, key)
            if value is None:
                continue
            try:
                value = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise UserError(f"{key} must be a list of {state_dim} numbers, found {str(value)[:60]}", where) from None
            if value.shape != (state_dim,):
                raise UserError(f"{key} has {value.size} values, the model's state_dim is {state_dim}", where)
            if not np.isfinite(value).all():
                raise UserError(f"{key} holds NaN or infinite values", where)
            setattr(self, key, value)
        if self.state_std is not None and not (self.state_std > 0).all():
            raise UserError("state_std must be positive everywhere", where)
        for key in ("target_return", "return_scale"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UserError(f"{key} must be a number, found {value!r}", where)
        if not self.return_scale > 0:
            raise UserError(f"return_scale must be positive, found {self.return_scale}", where)
        k = self.context_length
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise UserError(f"context_length must be a positive integer, found {k!r}", where)


def _read_rollout_settings(folder: Path, config: dict, path: Path | None = None) -> RolloutSettings:
    """Settings from ``path`` (which must exist), else from rollout.json beside the model if any."""
    state_dim = config["state_dim"]
    hopper = state_dim == len(HOPPER_MEDIUM_MEAN)
    settings = RolloutSettings(
        np.array(HOPPER_MEDIUM_MEAN) if hopper else None,
        np.array(HOPPER_MEDIUM_STD) if hopper else None,
        context_length=config.get("max_length") or DEFAULT_CONTEXT,
        source="hopper-medium defaults" if hopper else "none",
    )
    if path is not None:
        require_file(path)
    path = path or folder / ROLLOUT_SETTINGS
    if path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(f"not valid JSON ({e})", path) from None
        if not isinstance(raw, dict):
            raise UserError(f"expected a JSON object, found {type(raw).__name__}", path)
        known = {"state_mean", "state_std", "target_return", "return_scale", "context_length"}
        unknown = sorted(set(raw) - known - {"env_id", "comment"})
        if unknown:
            raise UserError(f"unknown key {unknown[0]!r}; expected some of {', '.join(sorted(known))}", path)
        values = {k: raw[k] for k in known if k in raw}
        if ("state_mean" in values) != ("state_std" in values):
            raise UserError("state_mean and state_std go together: give both or neither", path)
        settings = RolloutSettings(**{**settings.__dict__, **values, "source": str(path)})
    settings.check(state_dim, path)
    return settings


class DecisionTransformerController:
    """The autoregressive control loop of the Hugging Face Decision Transformer example.

    It is a rollout Controller (validators/rollout.py): per episode ``reset(first_observation)``,
    then per step ``act(observation, run)`` and ``observe(reward)`` with the reward that
    action earned. ``observation`` is the one to act on (the first observation at the first
    step); ``run(feeds) -> outputs`` is any runtime: the torch rebuild, onnxruntime, an
    accelerator.

    As in the example: states are normalized ((s - mean) / std in float64, then float32),
    the return-to-go starts at target_return / return_scale and drops by reward / scale
    (in float32), timesteps count up from 0, the last K steps are fed left-padded with
    zeros to K (attention_mask 0 there), the action slot of the step being decided is
    zeros, and the action applied is action_preds[0, -1]. Timesteps stop at max_ep_len - 1
    (the model has no embedding past it).
    """

    def __init__(self, state_dim: int, act_dim: int, max_ep_len: int, settings: RolloutSettings):
        self.state_dim, self.act_dim, self.max_ep_len = state_dim, act_dim, max_ep_len
        self.settings = settings
        self.context = settings.context_length
        self.mean = np.asarray(settings.state_mean, dtype=np.float64)
        self.std = np.asarray(settings.state_std, dtype=np.float64)
        self.scale = float(settings.return_scale)
        self.target = np.float32(settings.target_return / settings.return_scale)
        self.reset_needed = True

    def normalize(self, observation: np.ndarray) -> np.ndarray:
        observation = np.asarray(observation, dtype=np.float64).reshape(self.state_dim)
        return ((observation - self.mean) / self.std).astype(np.float32)

    def reset(self, first_observation: np.ndarray) -> None:
        self.first_observation = np.asarray(first_observation).reshape(self.state_dim).copy()
        self.states = [self.normalize(first_observation)]
        self.actions: list[np.ndarray] = []
        self.returns = [self.target]
        self.timesteps = [0]
        self.last_reward = 0.0
        self.reset_needed = False

    def observe(self, reward: float) -> None:
        """The reward the last action earned: the return-to-go drops by it at the next step."""
        self.last_reward = float(reward)

    def check_env(self, env: Any, env_id: str) -> None:
        """The environment observes state_dim values and takes act_dim continuous actions."""
        obs_shape = tuple(getattr(env.observation_space, "shape", None) or ())
        act_shape = tuple(getattr(env.action_space, "shape", None) or ())
        if obs_shape != (self.state_dim,) or act_shape != (self.act_dim,) or getattr(env.action_space, "n", None):
            raise UserError(f"the environment observes {list(obs_shape)} and acts in {env.action_space}; the model "
                            f"takes {self.state_dim} states and gives {self.act_dim} continuous actions", env_id)

    def feeds(self) -> dict[str, np.ndarray]:
        """The model inputs for the next decision: the last K steps, left-padded to K."""
        k = self.context
        states = np.stack(self.states[-k:])
        actions = np.stack([*self.actions, np.zeros(self.act_dim, np.float32)][-k:])
        returns = np.array(self.returns[-k:], dtype=np.float32)
        timesteps = np.array(self.timesteps[-k:], dtype=np.int64)
        n, pad = len(states), k - len(states)
        return {
            "states": np.concatenate([np.zeros((pad, self.state_dim), np.float32), states])[None],
            "actions": np.concatenate([np.zeros((pad, self.act_dim), np.float32), actions])[None],
            "timesteps": np.concatenate([np.zeros(pad, np.int64), timesteps])[None],
            "returns_to_go": np.concatenate([np.zeros(pad, np.float32), returns])[None, :, None],
            "attention_mask": np.concatenate([np.zeros(pad, np.int64), np.ones(n, np.int64)])[None],
        }

    def act(self, observation: np.ndarray,
            run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]) -> np.ndarray:
        if self.reset_needed:
            raise RuntimeError("call reset(first_observation) before act()")
        if self.actions:  # the previous action's outcome: a new state, less return to go
            self.states.append(self.normalize(observation))
            reward = np.float32(self.last_reward / self.scale)
            self.returns.append(np.float32(self.returns[-1] - reward))
            self.timesteps.append(min(self.timesteps[-1] + 1, self.max_ep_len - 1))
        elif not np.array_equal(np.asarray(observation).reshape(self.state_dim), self.first_observation):
            raise ValueError("the first act() of an episode takes the observation given to reset()")
        outputs = run(self.feeds())
        action = np.asarray(outputs["action_preds"], dtype=np.float32)[0, -1].copy()
        self.actions.append(action)
        return action
