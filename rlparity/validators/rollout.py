"""`rlparity rollout`: the policy in a closed loop in a real environment, once per runtime.

Element-wise agreement on fixed inputs (validate) can hide what matters in deployment: a
tiny difference that flips one action changes every state after it. Here each runtime plays
the same episodes (episode i is reset with seed S+i) and every action it takes is recorded.
A deterministic policy in a deterministic environment must then act identically, step for
step, on every runtime; the report gives each runtime's returns and episode lengths, a
sha256 fingerprint of its action sequence, and the first step where two runtimes diverge.

Families plug in through ``Family.rollout_controller()``, which returns a ``Controller``:

    controller.check_env(env, env_id)   the environment's spaces fit the policy, or a UserError
    controller.reset(observation)       a new episode begins with this observation
    controller.act(observation, run)    the action to take; ``run(feeds) -> outputs`` is the
                                        runtime, called as often as the controller needs
    controller.observe(reward)          the reward the last action earned

A stateless policy (Stable-Baselines3) maps each observation to one call. A stateful one, such
as a Decision Transformer keeping a context of past states, actions and returns-to-go, builds
its feeds from what reset, act and observe told it, and resets that context in ``reset``.
gymnasium (and seals, for ``seals/...`` ids) is imported only here, only when a rollout runs.
"""
from __future__ import annotations

import hashlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from rlparity.artifacts.report import Report, RuntimeResult, installed_versions
from rlparity.converters.family import Family
from rlparity.errors import UsageError, UserError
from rlparity.validators.compare import DEFAULT_TOLERANCES, Comparison, OutputComparison
from rlparity.validators.runtimes import OFFICIAL, OURS, REFERENCE, choose_runtimes
from rlparity.validators.validate import make_runtime, new_report

Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
# Where continuous actions first differ, histories were identical: float32's element-wise rule.
ACTION_ATOL, ACTION_RTOL = DEFAULT_TOLERANCES["float32"]
# Environment namespaces whose package registers them on import.
ENV_PACKAGES = {"seals": "seals"}
ENVS_EXTRA = "pip install 'rlparity[envs]'"


class Controller:
    """How a policy acts in a closed loop; see the module docstring."""

    def check_env(self, env: Any, env_id: str) -> None:
        pass

    def reset(self, observation: Any) -> None:
        pass

    def act(self, observation: Any, run: Run) -> np.ndarray:
        raise NotImplementedError

    def observe(self, reward: float) -> None:
        pass


class StatelessController(Controller):
    """One observation in (input ``obs``), the ``actions`` output's single row out."""

    def __init__(self, obs_shape: tuple[int, ...], discrete_actions: int | None, action_shape: tuple[int, ...] = ()):
        self.obs_shape = tuple(obs_shape)
        self.discrete_actions = discrete_actions
        self.action_shape = tuple(action_shape)

    def check_env(self, env: Any, env_id: str) -> None:
        obs_shape = tuple(getattr(env.observation_space, "shape", None) or ())
        if obs_shape != self.obs_shape:
            raise UserError(f"the environment observes shape {list(obs_shape)}, the policy takes "
                            f"{list(self.obs_shape)}", env_id)
        space = env.action_space
        if self.discrete_actions is not None:
            n = getattr(space, "n", None)
            if n is None or int(n) != self.discrete_actions:
                raise UserError(f"the environment's action space is {space}, the policy chooses among "
                                f"{self.discrete_actions} discrete actions", env_id)
        elif tuple(getattr(space, "shape", None) or ()) != self.action_shape or getattr(space, "n", None) is not None:
            raise UserError(f"the environment's action space is {space}, the policy acts in Box{list(self.action_shape)}",
                            env_id)

    def act(self, observation: Any, run: Run) -> np.ndarray:
        obs = np.asarray(observation, dtype=np.float32).reshape(1, *self.obs_shape)
        return run({"obs": obs})["actions"][0]


@dataclass
class RolloutOptions:
    env_id: str
    episodes: int = 10
    seed: int = 0
    runtimes: list[str] | None = None  # None: torch-cpu, ort-cpu, and --device's
    device: str | None = None
    max_steps: int | None = None       # cut episodes longer than this (default: the env's limit)
    opset: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # the family's loop options (target return...)


@dataclass
class Episodes:
    """What one runtime did: per episode its actions, return and length."""
    actions: list[list[np.ndarray]] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    policy_s: float = 0.0  # time spent inside the runtime
    total_s: float = 0.0   # time of the whole loop, environment included

    @property
    def steps(self) -> int:
        return int(sum(self.lengths))


def runtime_names(options: RolloutOptions) -> list[str]:
    names = choose_runtimes(options.runtimes, options.device, [REFERENCE, OURS])
    if OFFICIAL in names:
        raise UsageError("runtime ort-ref cannot play rollouts: they run the rebuild and our export "
                         "(torch-cpu, ort-cpu, torch-<device>)")
    return names


def make_env(env_id: str):
    """``gymnasium.make(env_id)``, importing the package of a namespaced id (seals/...) first."""
    import importlib

    try:
        import gymnasium
    except ImportError:
        raise UserError(f"rollouts need gymnasium: {ENVS_EXTRA}", env_id) from None
    namespace = env_id.split("/", 1)[0] if "/" in env_id and ":" not in env_id else None
    if namespace in ENV_PACKAGES:
        try:
            importlib.import_module(ENV_PACKAGES[namespace])
        except ImportError:
            raise UserError(f"{namespace}/ environments need the {ENV_PACKAGES[namespace]} package: {ENVS_EXTRA}",
                            env_id) from None
    try:
        with warnings.catch_warnings():  # the environment's own set-up chatter (e.g. Box precision)
            warnings.simplefilter("ignore")
            return gymnasium.make(env_id)
    except gymnasium.error.Error as e:  # NameNotFound, NamespaceNotFound, VersionNotFound, ...
        raise UserError(f"unknown or unusable environment id: {' '.join(str(e).split())[:200]}", env_id) from None
    except (ImportError, TypeError, ValueError, AttributeError) as e:
        raise UserError(f"cannot create the environment: {type(e).__name__}: {' '.join(str(e).split())[:200]}",
                        env_id) from None


def play(env: Any, controller: Controller, run: Run, episodes: int, seed: int, max_steps: int | None,
         on_episode: Callable[[int, float, int], None] = lambda *_: None) -> Episodes:
    """Play ``episodes`` episodes, episode i reset with seed ``seed + i``."""
    record = Episodes()
    policy_s = 0.0

    def timed_run(feeds):
        nonlocal policy_s
        start = time.perf_counter()
        out = run(feeds)
        policy_s += time.perf_counter() - start
        return out

    start_all = time.perf_counter()
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode)
        controller.reset(observation)
        actions, total, done = [], 0.0, False
        while not done and (max_steps is None or len(actions) < max_steps):
            action = np.asarray(controller.act(observation, timed_run))
            actions.append(action)
            to_env = action.item() if action.ndim == 0 and action.dtype.kind in "iu" else action
            observation, reward, terminated, truncated, _ = env.step(to_env)
            controller.observe(float(reward))
            total += float(reward)
            done = terminated or truncated
        record.actions.append(actions)
        record.returns.append(total)
        record.lengths.append(len(actions))
        on_episode(episode, total, len(actions))
    record.total_s = time.perf_counter() - start_all
    record.policy_s = policy_s
    return record


def fingerprint(actions: list[list[np.ndarray]]) -> str:
    """sha256 of every action taken, episode by episode (lengths, dtypes and shapes included)."""
    digest = hashlib.sha256()
    for episode, steps in enumerate(actions):
        if steps:
            block = np.ascontiguousarray(np.stack(steps))
            digest.update(f"episode {episode}|{len(steps)}|{block.dtype.str}|{block.shape[1:]}|".encode())
            digest.update(block.tobytes())
        else:
            digest.update(f"episode {episode}|0|".encode())
    return "sha256:" + digest.hexdigest()


def first_divergence(reference: Episodes, candidate: Episodes) -> dict[str, Any] | None:
    """The first (episode, step) where the two runtimes acted differently, and by how much."""
    for episode, (ref, cand) in enumerate(zip(reference.actions, candidate.actions)):
        for step, (a, b) in enumerate(zip(ref, cand)):
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.shape == b.shape else np.array([np.inf])
                return {"episode": episode, "step": step, "max_abs": float(diff.max()),
                        "within_tolerance": a.dtype.kind == "f" and _within_tolerance(a, b),
                        "reference_action": a.tolist(), "candidate_action": b.tolist()}
        if len(ref) != len(cand):  # same actions, yet one episode ended sooner: the environment differed
            return {"episode": episode, "step": min(len(ref), len(cand)), "max_abs": 0.0,
                    "note": "same actions, but the episode ended at a different step"}
    return None


def rollout(family: Family, options: RolloutOptions,
            on_progress: Callable[[str, int, int, float], None] = lambda *_: None) -> Report:
    """Play the episodes on every runtime; the Report holds the results in ``extra["rollout"]``.

    ``on_progress(runtime, episodes_done, episodes, last_return)`` is called after each episode.
    """
    if options.episodes < 1:
        raise UsageError("--episodes must be at least 1")
    spec = family.io_spec()
    controller = family.rollout_controller(**options.settings)
    names = runtime_names(options)
    runtimes = {name: make_runtime(name, spec, options.seed) for name in names}  # usage errors first
    env = make_env(options.env_id)
    try:
        controller.check_env(env, options.env_id)
    finally:
        env.close()

    ours = family.export(opset=options.opset) if any(r.kind == "onnxruntime" for r in runtimes.values()) else None
    report = new_report(family, ours, options.opset, inputs={
        "env_id": options.env_id, "episodes": options.episodes, "seed": options.seed,
        "seeds": f"{options.seed}..{options.seed + options.episodes - 1}", "max_steps": options.max_steps})
    report.versions.update(installed_versions(("gymnasium", "seals")))

    played: dict[str, Episodes] = {}
    for name, runtime in runtimes.items():
        result = RuntimeResult(name, runtime.kind, runtime.device)
        report.runtimes.append(result)
        result.available, result.reason = runtime.available()
        if not result.available:
            continue
        env = make_env(options.env_id)  # a fresh environment per runtime: nothing carries over
        try:
            runtime.prepare(ours if runtime.kind == "onnxruntime" else family.build_torch())
            result.info = runtime.info()
            record = play(env, controller, runtime.run, options.episodes, options.seed, options.max_steps,
                          on_episode=lambda i, ret, _n, name=name: on_progress(name, i + 1, options.episodes, ret))
            played[name] = record
            result.timing = {
                "steps": record.steps,
                "steps_per_s": record.steps / record.total_s if record.total_s else None,
                "policy_ms_per_step": 1e3 * record.policy_s / record.steps if record.steps else None,
                "wall_s": record.total_s,
            }
        except Exception as e:  # recorded, so that the other runtimes' results survive
            result.error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        finally:
            runtime.close()
            env.close()

    # Every runtime against the reference (torch-cpu, else the first that played).
    reference_name = REFERENCE if REFERENCE in played else next(iter(played), None)
    divergences = {name: first_divergence(played[reference_name], record)
                   for name, record in played.items() if name != reference_name}
    report.comparisons = [c.to_json() for c in _compare(played, reference_name, divergences)]
    report.extra["rollout"] = _rollout_section(options, played, reference_name, divergences)
    return report


def _compare(played: dict[str, Episodes], reference_name: str | None,
             divergences: dict[str, dict[str, Any] | None]) -> list[Comparison]:
    """Every runtime's action sequence against the reference's.

    Actions must be identical, with one allowance for continuous actions: where two runtimes
    first act differently their histories were still identical, so that first difference is
    an element-wise comparison of the same inputs and passes within float tolerance. Every
    later difference is closed-loop drift (the states themselves differ by then); its size
    and where it first exceeded tolerance are reported, never hidden.
    """
    comparisons = []
    for name, divergence in divergences.items():
        reference, record = played[reference_name], played[name]
        identical_episodes = sum(
            1 for a, b in zip(reference.actions, record.actions)
            if len(a) == len(b) and all(x.tobytes() == y.tobytes() for x, y in zip(a, b))
        )
        metrics = {"episodes": len(record.actions), "steps": record.steps, "identical_episodes": identical_episodes,
                   "first_divergence": divergence}
        passed = divergence is None
        if divergence is None:
            note = f"identical actions at all {record.steps:,} steps"
        else:
            note = (f"first divergence: episode {divergence['episode']}, step {divergence['step']} "
                    f"(max_abs {divergence['max_abs']:.3g}); {identical_episodes} of {len(record.actions)} episodes identical")
            if _continuous(reference):
                drift = closed_loop_drift(reference, record)
                metrics.update(drift)
                passed = divergence.get("within_tolerance", False)
                note += (f"; first difference {'within' if passed else 'beyond'} tolerance; closed-loop drift: "
                         f"max_abs {drift['max_abs']:.3g}, returns differ by up to {drift['max_return_diff']:.3g}")
                if drift["beyond_tolerance"]:
                    where = drift["beyond_tolerance"]
                    note += f", beyond tolerance from episode {where['episode']} step {where['step']}"
        output = OutputComparison("actions", "closed-loop", passed, metrics, note=note,
                                  atol=ACTION_ATOL, rtol=ACTION_RTOL,
                                  scope=f"{len(record.actions)} episodes, {record.steps:,} steps")
        comparisons.append(Comparison(reference_name, name, [output]))
    return comparisons


def _continuous(record: Episodes) -> bool:
    first = next((steps[0] for steps in record.actions if steps), None)
    return first is not None and first.dtype.kind == "f"


def _within_tolerance(a: np.ndarray, b: np.ndarray) -> bool:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return a.shape == b.shape and bool((np.abs(a64 - b64) <= ACTION_ATOL + ACTION_RTOL * np.abs(a64)).all())


def closed_loop_drift(reference: Episodes, candidate: Episodes) -> dict[str, Any]:
    """How far two runtimes' continuous actions drift apart over the aligned steps."""
    max_abs, beyond, per_episode = 0.0, None, []
    for episode, (ref, cand) in enumerate(zip(reference.actions, candidate.actions)):
        worst = 0.0
        for step, (a, b) in enumerate(zip(ref, cand)):
            if a.shape != b.shape:
                continue
            diff = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0
            worst = max(worst, diff)
            if beyond is None and not _within_tolerance(a, b):
                beyond = {"episode": episode, "step": step, "max_abs": diff}
        per_episode.append(worst)
        max_abs = max(max_abs, worst)
    return_diffs = [abs(a - b) for a, b in zip(reference.returns, candidate.returns)]
    return {"max_abs": max_abs, "max_abs_per_episode": per_episode, "beyond_tolerance": beyond,
            "max_return_diff": max(return_diffs, default=0.0),
            "length_diffs": [b - a for a, b in zip(reference.lengths, candidate.lengths)]}


def _rollout_section(options: RolloutOptions, played: dict[str, Episodes], reference_name: str | None,
                     divergences: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    results = []
    for name, record in played.items():
        returns = np.array(record.returns, dtype=np.float64)
        lengths = np.array(record.lengths, dtype=np.float64)
        results.append({
            "runtime": name,
            "mean_return": float(returns.mean()),
            "std_return": float(returns.std()),
            "mean_length": float(lengths.mean()),
            "std_length": float(lengths.std()),
            "returns": [float(r) for r in record.returns],
            "lengths": [int(n) for n in record.lengths],
            "fingerprint": fingerprint(record.actions),
            "steps_per_s": record.steps / record.total_s if record.total_s else None,
        })
    found = sorted(({"episode": d["episode"], "step": d["step"], "runtimes": [reference_name, name],
                     "max_abs": d["max_abs"], "within_tolerance": d.get("within_tolerance", False)}
                    for name, d in divergences.items() if d is not None),
                   key=lambda d: (d["episode"], d["step"]))
    return {
        "env_id": options.env_id,
        "episodes": options.episodes,
        "seed": options.seed,
        "max_steps": options.max_steps,
        "results": results,
        "identical_actions": len(played) > 1 and not found,  # established only by comparing two
        "first_divergence": found[0] if found else None,
    }
