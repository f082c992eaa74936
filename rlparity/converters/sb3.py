"""Stable-Baselines3 policies: PPO and A2C (ActorCriticPolicy) and DQN (QNetwork).

The story of one model, top to bottom:

1. ``resolve``: what ``model.save`` writes (a .zip), the same unzipped (a folder holding
   ``data`` and ``policy.pth``), or a model folder (a Hub repo, an rl-zoo log folder) holding
   the .zip. VecNormalize statistics (``vec_normalize.pkl``) found beside it are used too.
2. ``_read_members``: the zip is read in memory, never extracted; an archive with a member
   whose path would escape its folder is refused as a whole.
3. ``data`` is read as JSON, and only as JSON. SB3 writes every object there twice: as
   ':serialized:' (a base64 cloudpickle, which would run code when loaded: never decoded
   here) and as human-readable fields (net_arch, activation_fn, the spaces' _shape, n, low,
   high, dtype), which are all rlparity reads. ``policy.pth`` is read with weights_only=True;
   the layers' widths come from its shapes and are checked against the data.
4. ``read_vec_normalize``: VecNormalize statistics are a pickle of the whole wrapper. A
   restricted unpickler admits only what such a file holds (numpy arrays and dtypes, the
   RunningMeanStd and VecNormalize fields, gymnasium spaces, numpy RNG state), all as inert
   data, and refuses any other import. The observation normalization is folded into the graph.
5. ``_build_module``: the policy in pure PyTorch under SB3's own module names (so the ONNX
   initializers read ``mlp_extractor.policy_net.0.weight``), returning what
   ``model.predict(obs, deterministic=True)`` returns, the scores behind it and the critic.

No stable_baselines3 (nor gymnasium) import is needed at any point.
"""
from __future__ import annotations

import json
import re
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from rlparity.converters.family import Family, load_weights
from rlparity.converters.safe_load import (
    PickleRefused,
    load_restricted_pickle,
    load_torch_bytes,
    require_file,
    sha256_file,
)
from rlparity.errors import NotSupportedYet, UsageError, UserError
from rlparity.spec import IOSpec, TensorSpec

try:  # zipfile's lzma codec is optional, as the module is
    from lzma import LZMAError
except ImportError:
    LZMAError = zlib.error
# What reading a corrupt compressed member raises beyond zipfile's own errors.
_CODEC_ERRORS = (zlib.error, LZMAError)

VEC_NORMALIZE_FILE = "vec_normalize.pkl"
# Declared sizes above these are refused before reading (a zip bomb, or not a model at all).
MAX_DATA_BYTES = 64 << 20
MAX_POLICY_BYTES = 4 << 30

# torch.nn activations that SB3 policies name in activation_fn, all element-wise and
# constructed without arguments, as SB3 constructs them.
ACTIVATIONS = (
    "ReLU", "Tanh", "ELU", "LeakyReLU", "Sigmoid", "SiLU", "GELU", "Softplus", "Mish", "SELU",
    "CELU", "Hardtanh", "Hardswish", "Hardsigmoid", "ReLU6", "LogSigmoid", "Softsign", "Tanhshrink",
    "Identity",
)
# What SB3 uses when policy_kwargs does not name an activation.
DEFAULT_ACTIVATION = {"actor_critic": "Tanh", "dqn": "ReLU"}
# policy_class modules whose policies are rebuilt here, and those that are known but not yet.
_OUR_POLICY_MODULES = {"stable_baselines3.common.policies": "actor_critic", "stable_baselines3.dqn.policies": "dqn"}
_LATER = {
    "stable_baselines3.sac.policies": "SAC policies",
    "stable_baselines3.td3.policies": "TD3 / DDPG policies",
}


class SB3Policy(Family):
    name = "sb3"
    title = "Stable-Baselines3 policy"
    looks_for = "a Stable-Baselines3 model (.zip from model.save, or a folder with data + policy.pth)"
    default_opset = 17

    def __init__(self, source: Path, source_note: str, state: dict, arch: dict, facts: dict):
        super().__init__(source, source_note)
        self.state = state  # policy.pth, already checked against the architecture
        self.arch = arch
        self.facts = facts  # SB3 version, algorithm, timesteps: for inspect and the report
        self.step = facts.get("num_timesteps")

    # -- finding the model ---------------------------------------------------------------
    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_file():
            return path.suffix.lower() == ".zip"  # no other family reads zips: errors stay precise
        if not path.is_dir():
            return False
        return _is_unzipped_model(path) or any(_is_sb3_zip(p) for p in sorted(path.glob("*.zip")))

    @classmethod
    def resolve(cls, path: Path) -> tuple[Path, str]:
        """The model to read for ``path`` (a .zip or an unzipped folder) and how it was chosen."""
        if not path.exists():
            raise UserError("no such file or folder", path)
        if path.is_file() or _is_unzipped_model(path):
            return path, ""
        found = [p for p in sorted(path.glob("*.zip")) if _is_sb3_zip(p)]
        if not found:
            raise UserError("no Stable-Baselines3 model in this folder (a .zip from model.save, or data + policy.pth)", path)
        # An rl-zoo log folder also holds checkpoints and the best model of evaluation: the
        # final model is the one named after the environment.
        final = [p for p in found if not (p.name == "best_model.zip" or re.match(r"rl_model_\d+_steps\.zip$", p.name))]
        if len(final) == 1:
            chosen = final[0]
        elif len(found) == 1:
            chosen = found[0]
        else:
            names = ", ".join(p.name for p in (final or found))
            raise UserError(f"this folder holds several Stable-Baselines3 models ({names}); pass the one to use", path)
        note = f"{path} holds {len(found)} model(s); using {chosen.name}" if len(found) > 1 else f"using {chosen.relative_to(path)}"
        return chosen, note

    @classmethod
    def load(cls, path: Path, vec_normalize: str | Path | None = None, **_: Any) -> "SB3Policy":
        source, note = cls.resolve(Path(path))
        members = _read_members(source)
        data = _parse_data(members["data"], source)
        state = load_torch_bytes(members["policy.pth"], source, "policy.pth")
        if not isinstance(state, dict) or not all(_is_tensor(v) for v in state.values()):
            found = type(state).__name__ if not isinstance(state, dict) else "a dict holding non-tensors"
            raise UserError(f"policy.pth is not a state dict of tensors (found {found})", source)
        arch = _read_architecture(data, state, source)

        stats_path = Path(vec_normalize) if vec_normalize is not None else _vec_normalize_beside(source)
        if stats_path is not None:
            arch["normalization"] = read_vec_normalize(stats_path, arch["obs_shape"])
            used = "used" if arch["normalization"]["norm_obs"] else "found (observation normalization off)"
            note = "; ".join(filter(None, [note, f"VecNormalize statistics {used}: {stats_path}"]))

        version = members.get("_stable_baselines3_version", b"").decode("utf-8", "replace").strip()
        facts = {
            "sb3_version": version or None,
            "algorithm": _algorithm(data, arch),
            "num_timesteps": data.get("num_timesteps") if isinstance(data.get("num_timesteps"), int) else None,
            "system_info": _system_info(members.get("system_info.txt", b"")),
        }
        return cls(source, note, state, arch, facts)

    # -- the rebuild -------------------------------------------------------------------
    def _build_module(self):
        module = _sb3_policy(self.arch)
        own = module.state_dict()
        state = {}
        for key in own:
            if key in self.state:
                state[key] = self.state[key]
            elif key.startswith(("preprocess.", "action_bounds.")):
                state[key] = own[key]  # filled from the data and the statistics, not policy.pth
            else:
                raise UserError(f"policy.pth: missing layer {key}", self.source)
        return load_weights(module, state, self.source)

    def io_spec(self) -> IOSpec:
        arch = self.arch
        obs = TensorSpec("obs", "float32", ("batch", *arch["obs_shape"]), "observation",
                         description="raw observation" + (", normalized inside" if _normalizes(arch) else ""))
        action = arch["action"]
        if action["type"] == "Discrete":
            n = action["n"]
            scores = "q_values" if arch["kind"] == "dqn" else "logits"
            outputs = [
                TensorSpec("actions", "int64", ("batch",), "deterministic", segments=(n,), scores=scores,
                           description=f"argmax of the {'Q-values' if scores == 'q_values' else 'softmax'}, "
                                       "as model.predict(obs, deterministic=True)"),
                TensorSpec(scores, "float32", ("batch", n), "deterministic",
                           description="Q-value per action" if scores == "q_values" else
                           "normalized logits (log-probabilities), as the policy's Categorical holds them"),
            ]
        else:
            shape = tuple(action["shape"])
            squash = arch["squash_output"]
            outputs = [
                TensorSpec("actions", "float32", ("batch", *shape), "deterministic",
                           description=("low + (tanh(mean) + 1) / 2 * (high - low)" if squash else "clip(mean, low, high)")
                           + ", as model.predict(obs, deterministic=True)"),
                TensorSpec("mean", "float32", ("batch", int(np.prod(shape))), "deterministic",
                           description="mean of the Gaussian, before " + ("squashing" if squash else "clipping")),
            ]
        if arch["kind"] == "actor_critic":
            outputs.append(TensorSpec("values", "float32", ("batch", 1), "deterministic", description="the critic's value"))
        return IOSpec((obs,), tuple(outputs))

    # -- facts ---------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        arch = self.arch
        action = arch["action"]
        if action["type"] == "Discrete":
            actions = f"Discrete({action['n']})"
        else:
            actions = (f"Box{list(action['shape'])} {action['dtype']}, low {_short(action['low'])}, "
                       f"high {_short(action['high'])}")
        layers = {}
        if arch["kind"] == "actor_critic":
            if arch["shared"]:
                layers["shared layers"] = arch["shared"]
            layers["policy layers (pi)"] = arch["pi"] or "none"
            layers["value layers (vf)"] = arch["vf"] or "none"
        else:
            layers["Q-network layers"] = arch["q"] or "none"
        module = self.build_torch()
        parameters = sum(p.numel() for name, p in module.named_parameters())
        norm = arch.get("normalization")
        facts = {
            "family": self.name,
            "title": self.title,
            "algorithm": self.facts["algorithm"],
            "policy_class": arch["policy_class"],
            "stable_baselines3": self.facts["sb3_version"],
            "observations": f"Box{list(arch['obs_shape'])} {arch['obs_dtype']}",
            "actions": actions,
            **layers,
            "activation": f"{arch['activation']} ({arch['activation_source']})",
            "gSDE": arch["use_sde"],
            "squash_output": arch["squash_output"],
            "parameters": int(parameters),
            "training_step": self.step,
            "vec_normalize": None if norm is None else {
                "file": norm["path"], "norm_obs": norm["norm_obs"], "clip_obs": norm["clip_obs"],
                "epsilon": norm["epsilon"], "count": norm["count"],
            },
        }
        if self.facts["system_info"]:
            facts["trained_with"] = self.facts["system_info"]
        return facts

    def graph_contents(self) -> dict[str, str]:
        arch = self.arch
        norm = arch.get("normalization")
        if _normalizes(arch):
            inside = {"observation normalization": (
                f"inside: clip((obs - mean) / sqrt(var + {norm['epsilon']:g}), -{norm['clip_obs']:g}, "
                f"{norm['clip_obs']:g}) with the VecNormalize statistics of {Path(norm['path']).name} "
                f"(sha256 {norm['sha256'][:16]}...), in float32 (SB3 computes it in float64)")}
        elif norm is not None:
            inside = {"observation normalization": "none: the VecNormalize statistics have norm_obs off"}
        else:
            inside = {"observation normalization": "none: no VecNormalize statistics (pass --vec-normalize FILE if the "
                                                   "policy was trained with them)"}
        inside["preprocessing"] = "inside: cast to float32" + (", flatten" if len(arch["obs_shape"]) > 1 else "")
        action = arch["action"]
        if arch["kind"] == "dqn":
            inside["actions"] = "inside: argmax of the Q-values (greedy; no epsilon exploration)"
        elif action["type"] == "Discrete":
            inside["actions"] = "inside: softmax and argmax (the deterministic action); no sampling"
        elif arch["squash_output"]:
            inside["actions"] = "inside: tanh, then unscaled from [-1, 1] to [low, high] as predict does; no sampling"
        else:
            inside["actions"] = "inside: clip(mean, low, high) as predict does; no sampling (log_std is not exported)"
        inside["value function"] = "inside: the critic's value (values)" if arch["kind"] == "actor_critic" else \
            "not inside: the target Q-network is not exported"
        return inside

    def decision_view(self, feeds, outputs: dict[str, dict[str, np.ndarray]]) -> dict[str, Any] | None:
        if not outputs:
            return None
        rows = feeds.batch
        reference = next(iter(outputs.values()))
        obs = feeds.arrays["obs"].reshape(rows, -1)
        columns = ["row", "input"] + (["obs"] if obs.shape[1] <= 8 else [])
        action = self.arch["action"]
        if action["type"] == "Discrete":
            scores = "q_values" if self.arch["kind"] == "dqn" else "logits"
            columns += [scores] + (["probabilities"] if scores == "logits" else [])
            columns += [f"action {name}" for name in outputs]
        else:
            columns += ["mean", "actions", "max |diff| across runtimes"]
        table = []
        for r in range(rows):
            row: list[Any] = [r, feeds.rows[r]] + ([obs[r].tolist()] if obs.shape[1] <= 8 else [])
            if action["type"] == "Discrete":
                values = reference[scores][r].astype(np.float64)
                row.append(values.tolist())
                if scores == "logits":  # log-probabilities: softmax of them is exp
                    e = np.exp(values - values.max())
                    row.append((e / e.sum()).tolist())
                row += [int(out["actions"][r]) for out in outputs.values()]
            else:
                actions = [out["actions"][r].astype(np.float64) for out in outputs.values()]
                spread = max(float(np.abs(a - actions[0]).max()) for a in actions)
                row += [reference["mean"][r].tolist(), actions[0].reshape(-1).tolist(), spread]
            table.append(row)
        what = ("Q-values and greedy action" if self.arch["kind"] == "dqn" else
                "logits, softmax probabilities and argmax" if action["type"] == "Discrete" else "mean and action")
        return {"title": f"Decisions on the first {rows} inputs: {what}", "columns": columns, "rows": table}

    def rollout_controller(self, **settings: Any):
        from rlparity.validators.rollout import StatelessController

        if any(value is not None for value in settings.values()):
            raise UsageError(f"{', '.join(sorted(settings))}: a Stable-Baselines3 policy's rollout takes no such setting")

        action = self.arch["action"]
        return StatelessController(
            obs_shape=tuple(self.arch["obs_shape"]),
            discrete_actions=action["n"] if action["type"] == "Discrete" else None,
            action_shape=tuple(action.get("shape", ())),
        )


# -- reading the files -----------------------------------------------------------------------

def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _is_unzipped_model(path: Path) -> bool:
    return path.is_dir() and (path / "data").is_file() and (path / "policy.pth").is_file()


def _is_sb3_zip(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError, EOFError):
        return False
    return "data" in names


def _escapes(name: str) -> bool:
    """Whether an archive member's path would land outside the folder it was extracted to."""
    posix = name.replace("\\", "/")
    return posix.startswith("/") or re.match(r"^[A-Za-z]:", posix) is not None or ".." in PurePosixPath(posix).parts


def _read_members(source: Path) -> dict[str, bytes]:
    """``data``, ``policy.pth`` and the small text members, read in memory."""
    wanted = {"data": MAX_DATA_BYTES, "policy.pth": MAX_POLICY_BYTES,
              "_stable_baselines3_version": 1 << 10, "system_info.txt": 1 << 16}
    if source.is_dir():
        members = {}
        for name, limit in wanted.items():
            file = source / name
            if file.is_file():
                if file.stat().st_size > limit:
                    raise UserError(f"{name} is {file.stat().st_size:,} bytes, more than a model's {limit:,}", source)
                members[name] = file.read_bytes()
        return members

    require_file(source)
    try:
        with zipfile.ZipFile(source) as archive:
            infos = archive.infolist()
            # A cut-short save loses its directory, and zipfile may then find the directory of
            # the torch archive stored inside it (policy.pth is itself a zip): a real model's
            # first member starts at byte 0.
            if not infos or min(i.header_offset for i in infos) != 0:
                raise UserError("truncated or corrupt zip archive (its directory is missing: is the file cut short?)",
                                source)
            escaping = [i.filename for i in infos if _escapes(i.filename)]
            if escaping:
                raise UserError(
                    f"archive member {escaping[0]!r} has a path that escapes the archive's folder "
                    "(absolute or '..'); refusing the whole archive", source)
            by_name = {i.filename: i for i in infos}
            for required in ("data", "policy.pth"):
                if required not in by_name:
                    listed = ", ".join(sorted(by_name)[:6]) or "nothing"
                    raise UserError(f"not a Stable-Baselines3 model: the archive has no {required} (it holds {listed})", source)
            members = {}
            for name, limit in wanted.items():
                info = by_name.get(name)
                if info is None:
                    continue
                if info.file_size > limit:
                    raise UserError(f"archive member {name} declares {info.file_size:,} bytes, more than a model's {limit:,}", source)
                members[name] = archive.read(info)
            return members
    except zipfile.BadZipFile as e:
        raise UserError(f"truncated or corrupt zip archive ({e})", source) from None
    except (OSError, EOFError, zipfile.LargeZipFile, NotImplementedError, RuntimeError, *_CODEC_ERRORS) as e:
        # RuntimeError: encrypted members; NotImplementedError: unknown compression.
        detail = " ".join(str(e).split())[:160] or type(e).__name__
        raise UserError(f"truncated or corrupt zip archive ({detail})", source) from None


def _parse_data(raw: bytes, source: Path) -> dict:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"member data is not JSON ({' '.join(str(e).split())[:120]})", source) from None
    if not isinstance(data, dict):
        raise UserError(f"member data is JSON but not an object (found {type(data).__name__})", source)
    return data


def _vec_normalize_beside(source: Path) -> Path | None:
    """Hub repos keep vec_normalize.pkl beside the model; rl-zoo in a folder named after it."""
    folder = source if source.is_dir() else source.parent
    candidates = [folder / VEC_NORMALIZE_FILE]
    if source.is_file():
        candidates.append(folder / source.stem / VEC_NORMALIZE_FILE)
    return next((c for c in candidates if c.is_file()), None)


def _system_info(raw: bytes) -> str:
    """"Python 3.11.7, Stable-Baselines3 2.9.2, PyTorch 2.13.0+cpu, ..." from system_info.txt."""
    lines = raw.decode("utf-8", "replace").splitlines()
    keep = ("Python", "PyTorch", "Numpy", "Gymnasium", "Gym")
    parts = []
    for line in lines:
        key, _, value = line.strip().lstrip("- ").partition(":")
        if key.strip() in keep and value.strip():
            parts.append(f"{key.strip()} {value.strip()}")
    return ", ".join(parts)


# -- the architecture, from the data's readable fields and the state dict's shapes ----------

def _class_name(text: Any) -> str | None:
    """``"<class 'torch.nn.modules.activation.ReLU'>"`` -> ``"torch.nn.modules.activation.ReLU"``."""
    if not isinstance(text, str):
        return None
    found = re.fullmatch(r"<class '([\w.]+)'>", text.strip())
    return found.group(1) if found else None


def _space(data: dict, key: str, source: Path) -> tuple[str, dict]:
    """The type name of a space (``Box``, ``Discrete``, ...) and its readable fields."""
    space = data.get(key)
    if not isinstance(space, dict):
        raise UserError(f"data has no {key}", source)
    type_name = _class_name(space.get(":type:")) or ""
    return type_name.rsplit(".", 1)[-1], space


def _shape(space: dict, key: str, source: Path) -> tuple[int, ...]:
    shape = space.get("_shape", space.get("shape"))
    if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
        raise UserError(f"data: {key} has no readable _shape (found {shape!r})", source)
    return tuple(shape)


def _parse_array_text(value: Any, shape: tuple[int, ...], what: str, source: Path) -> np.ndarray:
    """A space's bound as SB3 writes it, e.g. ``"[-1. -1.  2.]"`` (numpy's str of the array)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return np.full(shape, value, dtype=np.float32)
    if isinstance(value, list):
        value = json.dumps(value)
    if not isinstance(value, str):
        raise UserError(f"data: {what} is missing or not readable (found {value!r})", source)
    if "..." in value:
        raise NotSupportedYet(f"action spaces so large that the data abbreviates their bounds ({what})", source)
    try:
        numbers = [float(token) for token in value.replace("[", " ").replace("]", " ").replace(",", " ").split()]
    except ValueError:
        raise UserError(f"data: {what} is not a list of numbers ({value[:80]!r})", source) from None
    if len(numbers) == 1:
        numbers = numbers * int(np.prod(shape))
    if len(numbers) != int(np.prod(shape)):
        raise UserError(f"data: {what} holds {len(numbers)} numbers for a space of shape {list(shape)}", source)
    return np.array(numbers, dtype=np.float32).reshape(shape)


def _read_spaces(data: dict, source: Path) -> dict:
    obs_type, obs = _space(data, "observation_space", source)
    if obs_type == "Dict":
        raise NotSupportedYet("dict observations (MultiInputPolicy)", source)
    if obs_type != "Box":
        raise NotSupportedYet(f"{obs_type or 'unknown'} observation spaces (only Box observations are)", source)
    obs_shape = _shape(obs, "observation_space", source)
    obs_dtype = str(obs.get("dtype", "float32"))
    if len(obs_shape) == 3 and obs_dtype == "uint8":
        raise NotSupportedYet("image observations (CnnPolicy)", source)

    act_type, act = _space(data, "action_space", source)
    if act_type == "Discrete":
        try:
            n = int(act.get("n"))
            start = int(act.get("start", 0) or 0)
        except (TypeError, ValueError):
            raise UserError(f"data: action_space has no readable n (found {act.get('n')!r})", source) from None
        if n < 1:
            raise UserError(f"data: action_space has n = {n}", source)
        if start != 0:
            raise NotSupportedYet(f"Discrete action spaces starting at {start}", source)
        action = {"type": "Discrete", "n": n}
    elif act_type == "Box":
        shape = _shape(act, "action_space", source)
        low = _parse_array_text(act.get("low", act.get("low_repr")), shape, "action_space low", source)
        high = _parse_array_text(act.get("high", act.get("high_repr")), shape, "action_space high", source)
        if np.isnan(low).any() or np.isnan(high).any() or (low > high).any():
            raise UserError("data: action_space has NaN bounds or low above high", source)
        action = {"type": "Box", "shape": shape, "low": low, "high": high, "dtype": str(act.get("dtype", "float32"))}
    elif act_type in ("MultiDiscrete", "MultiBinary"):
        raise NotSupportedYet(f"{act_type} action spaces", source)
    else:
        raise NotSupportedYet(f"{act_type or 'unknown'} action spaces", source)
    return {"obs_shape": obs_shape, "obs_dtype": obs_dtype, "action": action}


def _policy_kind(data: dict, state: dict, source: Path) -> tuple[str, str]:
    """``("actor_critic" | "dqn", policy class name)``, refusing what is not rebuilt here."""
    policy_class = data.get("policy_class") if isinstance(data.get("policy_class"), dict) else {}
    module = str(policy_class.get("__module__", ""))
    init = re.match(r"<function (\w+)\.__init__", str(policy_class.get("__init__", "")))
    class_name = init.group(1) if init else None
    if module.startswith("sb3_contrib"):
        raise NotSupportedYet(f"sb3-contrib policies ({class_name or module})", source)
    if module in _LATER:
        raise NotSupportedYet(_LATER[module], source)
    if any(k.startswith("actor.") for k in state):
        raise NotSupportedYet("SAC / TD3 / DDPG policies", source)
    if module and module not in _OUR_POLICY_MODULES:
        raise NotSupportedYet(f"custom policy classes ({module}.{class_name or '?'})", source)
    if "action_net.weight" in state:
        kind = "actor_critic"
    elif "q_net.q_net.0.weight" in state:
        kind = "dqn"
    else:
        raise UserError("policy.pth holds neither an actor-critic (action_net: PPO, A2C) nor a Q-network "
                        "(q_net: DQN)", source)
    if module and _OUR_POLICY_MODULES[module] != kind:
        raise UserError(f"data names a policy from {module}, but policy.pth holds a "
                        f"{'Q-network' if kind == 'dqn' else 'actor-critic'}", source)
    if class_name in ("ActorCriticCnnPolicy", "CnnPolicy"):
        raise NotSupportedYet("image observations (CnnPolicy)", source)
    if class_name in ("MultiInputActorCriticPolicy", "MultiInputPolicy"):
        raise NotSupportedYet("dict observations (MultiInputPolicy)", source)
    default_name = {"actor_critic": "ActorCriticPolicy", "dqn": "DQNPolicy"}[kind]
    return kind, class_name or default_name


def _activation(policy_kwargs: dict, kind: str, source: Path) -> tuple[str, str]:
    if "activation_fn" not in policy_kwargs:
        return DEFAULT_ACTIVATION[kind], "SB3's default"
    full = _class_name(policy_kwargs["activation_fn"])
    name = full.rsplit(".", 1)[-1] if full else None
    if full is None or not full.startswith("torch.nn.") or name not in ACTIVATIONS:
        raise NotSupportedYet(f"activation {policy_kwargs['activation_fn']!r}", source)
    return name, "from the data"


def _linear_stack(state: dict, prefix: str, width_in: int, source: Path, last_is_output: bool = False) -> list[int]:
    """Widths of ``prefix.0``, ``prefix.2``, ... (Linear layers, activations between them)."""
    widths, index = [], 0
    while f"{prefix}.{index}.weight" in state:
        w, b = state[f"{prefix}.{index}.weight"], state.get(f"{prefix}.{index}.bias")
        if b is None:
            raise UserError(f"policy.pth: missing layer {prefix}.{index}.bias", source)
        if w.ndim != 2 or tuple(b.shape) != (w.shape[0],) or w.shape[1] != width_in:
            raise UserError(
                f"policy.pth: layer {prefix}.{index} is mis-shaped: weight {list(w.shape)}, bias {list(b.shape)}, "
                f"expected [n, {width_in}] (its input is the output of the layer before)", source)
        widths.append(int(w.shape[0]))
        width_in = int(w.shape[0])
        index += 2
    expected = {f"{prefix}.{i}.{p}" for i in range(0, index, 2) for p in ("weight", "bias")}
    stray = sorted(k for k in state if k.startswith(prefix + ".") and k not in expected)
    if stray:
        raise NotSupportedYet(f"layer {stray[0]} (normalization or dropout layers, or a custom network)", source)
    if last_is_output and not widths:
        raise UserError(f"policy.pth: missing layer {prefix}.0.weight", source)
    return widths


def _stack_keys(prefix: str, layers: int) -> set[str]:
    return {f"{prefix}.{2 * i}.{p}" for i in range(layers) for p in ("weight", "bias")}


def _net_arch_matches(net_arch: Any, shared: list[int], pi: list[int], vf: list[int]) -> bool:
    """Whether the data's net_arch describes the layers found (all SB3 versions' spellings)."""
    if net_arch is None:
        return True
    if isinstance(net_arch, dict):
        return net_arch.get("pi", []) == pi and net_arch.get("vf", []) == vf and not shared
    if isinstance(net_arch, list):
        ints = [x for x in net_arch if isinstance(x, int)]
        dicts = [x for x in net_arch if isinstance(x, dict)]
        if not dicts:  # since SB3 1.8 a list means separate pi and vf; before it, shared layers
            return (ints == pi == vf and not shared) or (ints == shared and not pi and not vf)
        tail = dicts[0]
        return ints == shared and tail.get("pi", []) == pi and tail.get("vf", []) == vf
    return False


def _read_architecture(data: dict, state: dict, source: Path) -> dict:
    arch = _read_spaces(data, source)
    kind, policy_class = _policy_kind(data, state, source)
    policy_kwargs = data.get("policy_kwargs") if isinstance(data.get("policy_kwargs"), dict) else {}
    extractor = _class_name(policy_kwargs.get("features_extractor_class"))
    if extractor and not extractor.endswith(".FlattenExtractor"):
        raise NotSupportedYet(f"features extractor {extractor}", source)
    for key in state:
        if "features_extractor." in key:
            raise NotSupportedYet(f"features extractors with weights ({key})", source)
    for key, value in state.items():
        if value.is_floating_point() and value.dtype != _float32():
            raise NotSupportedYet(f"{str(value.dtype).removeprefix('torch.')} weights ({key})", source)
        if value.is_floating_point() and not bool(value.isfinite().all()):
            raise UserError(f"policy.pth: layer {key} holds NaN or infinite values", source)

    features = int(np.prod(arch["obs_shape"]))
    arch.update(kind=kind, policy_class=policy_class, features=features,
                use_sde=bool(data.get("use_sde", False)), squash_output=bool(policy_kwargs.get("squash_output", False)))
    arch["activation"], arch["activation_source"] = _activation(policy_kwargs, kind, source)
    action = arch["action"]
    n_out = action["n"] if action["type"] == "Discrete" else int(np.prod(action["shape"]))

    if kind == "dqn":
        if action["type"] != "Discrete":
            raise UserError("a DQN policy needs a Discrete action space", source)
        widths = _linear_stack(state, "q_net.q_net", features, source, last_is_output=True)
        if widths[-1] != n_out:
            raise UserError(f"policy.pth: the Q-network's last layer has {widths[-1]} outputs for {n_out} actions", source)
        arch["q"] = widths[:-1]
        net_arch = policy_kwargs.get("net_arch")
        if isinstance(net_arch, list) and all(isinstance(x, int) for x in net_arch) and net_arch != arch["q"]:
            raise UserError(f"data says net_arch {net_arch}, but policy.pth has layers {arch['q']}", source)
        expected = _stack_keys("q_net.q_net", len(widths))
        ignored = {k for k in state if k.startswith("q_net_target.")}
    else:
        shared = _linear_stack(state, "mlp_extractor.shared_net", features, source)
        latent = shared[-1] if shared else features
        pi = _linear_stack(state, "mlp_extractor.policy_net", latent, source)
        vf = _linear_stack(state, "mlp_extractor.value_net", latent, source)
        if not _net_arch_matches(policy_kwargs.get("net_arch"), shared, pi, vf):
            raise UserError(f"data says net_arch {policy_kwargs.get('net_arch')}, but policy.pth has layers "
                            f"shared {shared}, pi {pi}, vf {vf}", source)
        arch.update(shared=shared, pi=pi, vf=vf)
        latent_pi, latent_vf = (pi or [latent])[-1], (vf or [latent])[-1]
        for name, shape in (("action_net", (n_out, latent_pi)), ("value_net", (1, latent_vf))):
            w, b = state.get(f"{name}.weight"), state.get(f"{name}.bias")
            if w is None or b is None:
                raise UserError(f"policy.pth: missing layer {name}.{'weight' if w is None else 'bias'}", source)
            if tuple(w.shape) != shape or tuple(b.shape) != (shape[0],):
                raise UserError(f"policy.pth: layer {name} is mis-shaped: weight {list(w.shape)}, expected {list(shape)}", source)
        if action["type"] == "Box" and "log_std" not in state:
            raise UserError("policy.pth: missing log_std (a Gaussian policy's spread)", source)
        expected = (_stack_keys("mlp_extractor.shared_net", len(shared)) | _stack_keys("mlp_extractor.policy_net", len(pi))
                    | _stack_keys("mlp_extractor.value_net", len(vf))
                    | {f"{n}.{p}" for n in ("action_net", "value_net") for p in ("weight", "bias")})
        ignored = {"log_std"}  # the spread of the Gaussian: the deterministic action does not use it
    stray = sorted(set(state) - expected - ignored)
    if stray:
        raise NotSupportedYet(f"layer {stray[0]} (a custom policy or features extractor)", source)
    if arch["squash_output"] and action["type"] == "Box" and not (np.isfinite(action["low"]).all() and np.isfinite(action["high"]).all()):
        raise UserError("squash_output needs finite action bounds", source)
    arch["normalization"] = None
    return arch


def _float32():
    import torch

    return torch.float32


def _algorithm(data: dict, arch: dict) -> str | None:
    """PPO, A2C or DQN, from the hyperparameters only each of them saves."""
    if arch["kind"] == "dqn":
        return "DQN"
    if "clip_range" in data:
        return "PPO"
    if "n_steps" in data:
        return "A2C"
    return None


def _normalizes(arch: dict) -> bool:
    norm = arch.get("normalization")
    return norm is not None and norm["norm_obs"]


def _short(values: np.ndarray) -> str:
    flat = values.reshape(-1)
    if np.all(flat == flat[0]):
        return f"{flat[0]:g}"
    return "[" + ", ".join(f"{v:g}" for v in flat[:6]) + (", ..." if flat.size > 6 else "") + "]"


# -- VecNormalize statistics: a pickle, read by a restricted unpickler -----------------------

class _Pickled:
    """An object from the pickle kept as inert data: its state, never its behaviour."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.args = args

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}  # (dict, slots) form
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state

    def __reduce__(self):  # never pickled again
        raise TypeError("inert pickle data")


class _VecNormalize(_Pickled):
    pass


class _RunningMeanStd(_Pickled):
    pass


class _Space(_Pickled):
    pass


class _RandomState(_Pickled):
    pass


# What a statistic, a bound or a generator state can be: booleans, integers, floats, complex.
_PLAIN_KINDS = "biufc"


class _DType:
    """``numpy.dtype(...)`` from the pickle, checked here before numpy sees it: numpy's own
    dtype.__setstate__ trusts its state (a timedelta dtype given a float's state crashes the
    interpreter; a float dtype given fields becomes a structured one, even one of objects)."""

    def __init__(self, spec: Any, align: Any = False, copy: Any = True):
        if not isinstance(spec, str):  # a list or tuple would describe a structured dtype
            raise PickleRefused(f"builds a numpy dtype from a {type(spec).__name__}")
        try:
            value = np.dtype(spec)
        except Exception:
            raise PickleRefused(f"declares an unknown numpy dtype {spec[:40]!r}") from None
        if value.hasobject:
            raise PickleRefused("holds an array of Python objects")
        if value.kind not in _PLAIN_KINDS:
            raise PickleRefused(f"declares a numpy dtype of {value.name} values, which no statistic is")
        self.value = value

    def __setstate__(self, state: Any) -> None:
        # (version, byte order, subarray, names, fields, ...): a plain dtype has none of the three.
        if not (isinstance(state, tuple) and len(state) >= 5 and state[1] in ("<", ">", "|", "=")
                and state[2:5] == (None, None, None)):
            raise PickleRefused("declares a structured or malformed numpy dtype")
        if state[1] in ("<", ">"):
            self.value = self.value.newbyteorder(state[1])

    def __reduce__(self):  # never pickled again
        raise TypeError("inert pickle data")


def _checked_dtype(value: Any) -> np.dtype:
    if not isinstance(value, _DType):
        raise PickleRefused(f"gives numpy a {type(value).__name__} where a dtype belongs")
    return value.value


class _Array(np.ndarray):
    """``numpy.ndarray`` from the pickle: numpy rebuilds it from the raw bytes only once its
    dtype is a checked plain one."""

    def __setstate__(self, state: Any) -> None:
        if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[4], bytes)):
            raise PickleRefused("holds a numpy array in a layout no statistic has")
        version, shape, dtype, fortran, raw = state
        super().__setstate__((version, shape, _checked_dtype(dtype), fortran, raw))


def _numpy_globals() -> dict[tuple[str, str], Any]:
    """numpy's array and scalar reconstructors (numpy 1 and 2 module names), every dtype
    they are given checked first."""
    reconstruct = np.zeros(1).__reduce__()[0]
    numpy_frombuffer = np.zeros(1).__reduce_ex__(5)[0]
    numpy_scalar = np.float64(0).__reduce__()[0]

    def frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
        return numpy_frombuffer(buffer, _checked_dtype(dtype), shape, order)

    def scalar(dtype: Any, data: Any) -> Any:
        return numpy_scalar(_checked_dtype(dtype), data)

    found = {("numpy", "dtype"): _DType, ("numpy", "ndarray"): _Array}
    for core in ("numpy.core", "numpy._core"):
        found[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        found[(f"{core}.multiarray", "scalar")] = scalar
        found[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return found


def _vec_normalize_globals() -> dict[tuple[str, str], Any]:
    allowed = _numpy_globals()
    allowed[("stable_baselines3.common.vec_env.vec_normalize", "VecNormalize")] = _VecNormalize
    allowed[("stable_baselines3.common.running_mean_std", "RunningMeanStd")] = _RunningMeanStd
    for lib in ("gymnasium", "gym"):
        for module, name in (("box", "Box"), ("discrete", "Discrete"), ("multi_discrete", "MultiDiscrete"),
                             ("multi_binary", "MultiBinary"), ("dict", "Dict"), ("tuple", "Tuple")):
            allowed[(f"{lib}.spaces.{module}", name)] = _Space
    # The spaces' random generators: their state is kept inert, no generator is built.
    for module, name in (("numpy.random._pickle", "__generator_ctor"), ("numpy.random._pickle", "__bit_generator_ctor"),
                         ("numpy.random._pickle", "__randomstate_ctor"), ("numpy.random._pcg64", "PCG64"),
                         ("numpy.random._pcg64", "PCG64DXSM"), ("numpy.random._mt19937", "MT19937"),
                         ("numpy.random._philox", "Philox"), ("numpy.random._sfc64", "SFC64"),
                         ("numpy.random.bit_generator", "SeedSequence"),
                         ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence")):
        allowed[(module, name)] = _RandomState
    return allowed


def read_vec_normalize(path: str | Path, obs_shape: tuple[int, ...]) -> dict[str, Any]:
    """The observation statistics of a VecNormalize save, checked against the policy's input."""
    path = Path(path)
    if not path.exists():
        raise UserError("no such file (VecNormalize statistics)", path)
    saved = load_restricted_pickle(path, _vec_normalize_globals(), "VecNormalize statistics")
    if not isinstance(saved, _VecNormalize):
        raise UserError(f"not VecNormalize statistics (the pickle holds a {type(saved).__name__})", path)
    fields = saved.__dict__
    norm_obs = fields.get("norm_obs", True)
    rms = fields.get("obs_rms")
    if isinstance(rms, dict):
        raise NotSupportedYet("VecNormalize statistics of dict observations", path)
    if not isinstance(rms, _RunningMeanStd):
        raise UserError("VecNormalize statistics without obs_rms (RunningMeanStd)", path)
    mean, var = rms.__dict__.get("mean"), rms.__dict__.get("var")
    epsilon, clip_obs = fields.get("epsilon", 1e-8), fields.get("clip_obs", 10.0)
    for name, value in (("mean", mean), ("var", var)):
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
            raise UserError(f"VecNormalize obs_rms.{name} is not a float array", path)
        if tuple(value.shape) != tuple(obs_shape):
            raise UserError(f"VecNormalize obs_rms.{name} has shape {list(value.shape)}, the policy observes "
                            f"{list(obs_shape)}: statistics of another environment?", path)
        if not np.isfinite(value).all():
            raise UserError(f"VecNormalize obs_rms.{name} holds NaN or infinite values", path)
    if (var < 0).any():
        raise UserError("VecNormalize obs_rms.var is negative: the running statistics are corrupt", path)
    for name, value in (("epsilon", epsilon), ("clip_obs", clip_obs)):
        if not isinstance(value, (float, int, np.floating, np.integer)) or isinstance(value, bool) or not value > 0:
            raise UserError(f"VecNormalize {name} must be a positive number (found {value!r})", path)
    count = rms.__dict__.get("count")
    return {
        "path": str(path),
        "sha256": sha256_file(path),
        "norm_obs": bool(norm_obs),
        "mean": np.array(mean, dtype=np.float64),
        "var": np.array(var, dtype=np.float64),
        "epsilon": float(epsilon),
        "clip_obs": float(clip_obs),
        "count": float(count) if isinstance(count, (float, int, np.number)) else None,
    }


# -- the pure-PyTorch policies -----------------------------------------------------------------
# Module names follow SB3 (mlp_extractor.policy_net.0, action_net, value_net, q_net.q_net.0),
# so policy.pth loads as it is and the ONNX initializers carry SB3's names.

def _sb3_policy(arch: dict):
    import torch
    from torch import nn

    def mlp(widths: list[int], width_in: int, output: int | None = None) -> nn.Sequential:
        layers = []
        for width in widths:
            layers += [nn.Linear(width_in, width), getattr(nn, arch["activation"])()]
            width_in = width
        if output is not None:
            layers.append(nn.Linear(width_in, output))
        return nn.Sequential(*layers)

    class VecNormalizeObs(nn.Module):
        """VecNormalize.normalize_obs: clip((obs - mean) / sqrt(var + eps), -clip, clip)."""

        def __init__(self, stats: dict):
            super().__init__()
            shape = arch["obs_shape"]
            # sqrt(var + eps) in float64, as SB3 computes it, then float32 for the graph.
            self.register_buffer("obs_mean", torch.from_numpy(stats["mean"].astype(np.float32)).reshape(shape))
            self.register_buffer("obs_std", torch.from_numpy(
                np.sqrt(stats["var"] + stats["epsilon"]).astype(np.float32)).reshape(shape))
            self.clip = stats["clip_obs"]

        def forward(self, obs):
            return torch.clamp((obs - self.obs_mean) / self.obs_std, -self.clip, self.clip)

    class ActionBounds(nn.Module):
        def __init__(self, action: dict):
            super().__init__()
            self.register_buffer("low", torch.from_numpy(action["low"].reshape(-1)))
            self.register_buffer("high", torch.from_numpy(action["high"].reshape(-1)))
            # (high - low) in float32, as predict's numpy arithmetic on the float32 bounds.
            self.register_buffer("span", torch.from_numpy((action["high"] - action["low"]).reshape(-1)))

    class Preprocess(nn.Module):
        def __init__(self):
            super().__init__()
            self.vec_normalize = VecNormalizeObs(arch["normalization"]) if _normalizes(arch) else None

        def forward(self, obs):
            if self.vec_normalize is not None:
                obs = self.vec_normalize(obs)
            return torch.flatten(obs, 1) if len(arch["obs_shape"]) > 1 else obs  # FlattenExtractor

    action = arch["action"]

    class MlpExtractor(nn.Module):
        def __init__(self):
            super().__init__()
            width = arch["features"]
            if arch["shared"]:  # SB3 before 1.8: layers shared by the actor and the critic
                self.shared_net = mlp(arch["shared"], width)
                width = arch["shared"][-1]
            else:
                self.shared_net = None
            self.policy_net = mlp(arch["pi"], width)
            self.value_net = mlp(arch["vf"], width)

        def forward(self, features):
            if self.shared_net is not None:
                features = self.shared_net(features)
            return self.policy_net(features), self.value_net(features)

    class ActorCriticPolicy(nn.Module):
        def __init__(self):
            super().__init__()
            self.preprocess = Preprocess()
            self.mlp_extractor = MlpExtractor()
            latent_pi = (arch["pi"] or arch["shared"] or [arch["features"]])[-1]
            latent_vf = (arch["vf"] or arch["shared"] or [arch["features"]])[-1]
            n_out = action["n"] if action["type"] == "Discrete" else int(np.prod(action["shape"]))
            self.action_net = nn.Linear(latent_pi, n_out)
            self.value_net = nn.Linear(latent_vf, 1)
            self.action_bounds = ActionBounds(action) if action["type"] == "Box" else None

        def forward(self, obs):
            latent_pi, latent_vf = self.mlp_extractor(self.preprocess(obs))
            scores = self.action_net(latent_pi)
            values = self.value_net(latent_vf)
            if action["type"] == "Discrete":
                # torch's Categorical(logits=...) keeps the logits normalized (log-probabilities)
                # and mode() takes the argmax of their softmax: the same arithmetic here keeps
                # even near-ties deciding as model.predict decides them.
                logits = scores - torch.logsumexp(scores, dim=1, keepdim=True)
                actions = torch.argmax(torch.softmax(logits, dim=1), dim=1)
                return actions, logits, values
            else:
                bounds = self.action_bounds
                if arch["squash_output"]:  # gSDE's tanh bijector, then predict's unscale_action
                    actions = bounds.low + 0.5 * (torch.tanh(scores) + 1.0) * bounds.span
                else:  # predict's np.clip to the action space
                    actions = torch.min(torch.max(scores, bounds.low), bounds.high)
                actions = actions.reshape(-1, *action["shape"])
            return actions, scores, values

    class QNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_net = mlp(arch["q"], arch["features"], output=action["n"])

    class DQNPolicy(nn.Module):
        def __init__(self):
            super().__init__()
            self.preprocess = Preprocess()
            self.q_net = QNetwork()

        def forward(self, obs):
            q_values = self.q_net.q_net(self.preprocess(obs))
            return torch.argmax(q_values, dim=1), q_values

    return DQNPolicy() if arch["kind"] == "dqn" else ActorCriticPolicy()
