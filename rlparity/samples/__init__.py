"""Small real checkpoints shipped with rlparity, addressed as ``sample:NAME`` on the CLI.

ML-Agents samples were trained with mlagents 1.1.0 and exported by its own
ModelSerializer, so each comes with its official ONNX export beside it. The
Stable-Baselines3 sample is a PPO policy saved by ``model.save``. TinyHopper is a
Decision Transformer that transformers' save_pretrained wrote (tests/data/
make_tiny_decision_transformer.py makes it).
"""
from __future__ import annotations

from pathlib import Path

from rlparity.errors import UserError

ROOT = Path(__file__).parent
SAMPLES: dict[str, str] = {
    "tinywalker": "mlagents/TinyWalker",      # 2 vector observations, normalizer, 4 continuous actions
    "tinybranches": "mlagents/TinyBranches",  # 3 observations, discrete branches [3, 3, 2] with masks
    "cartpole": "sb3/ppo-seals-CartPole-v0.zip",  # SB3 PPO, Discrete(2), pi/vf [64, 64]: plays seals/CartPole-v0
    "tinyhopper": "decision_transformer/TinyHopper",  # Decision Transformer, Hopper sizes, seeded weights
}
DEFAULT = "tinywalker"
PREFIX = "sample:"


def expand(path: str | Path) -> Path:
    """``sample:tinywalker`` -> the bundled folder; any other path is returned unchanged."""
    text = str(path)
    if not text.startswith(PREFIX):
        return Path(path)
    name = text[len(PREFIX):].lower() or DEFAULT
    if name not in SAMPLES:
        raise UserError(f"no bundled sample {name!r}; samples: {', '.join(SAMPLES)}", text)
    return ROOT / SAMPLES[name]
