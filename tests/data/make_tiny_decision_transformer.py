"""Write the bundled TinyHopper Decision Transformer sample and its transformers oracle.

    python tests/data/make_tiny_decision_transformer.py

A DecisionTransformerModel with Hopper's state and action sizes (11, 3) and max_ep_len
1000, but tiny (hidden 16, 2 layers, 2 heads) and configured unlike the hopper-medium
model where transformers allows it (gelu_new, n_inner 24, attention scaled by the inverse
layer index), so that the sample exercises what the large fixture does not. Every weight
is redrawn from a seeded N(0, 0.3^2) so that layer norms and biases are not trivial. The
oracle holds left-padded inputs and transformers' outputs for them.

Needs transformers (the test extra); rlparity itself never imports it.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from transformers import DecisionTransformerConfig, DecisionTransformerModel

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "rlparity" / "samples" / "decision_transformer" / "TinyHopper"
ORACLE = REPO / "tests" / "data" / "TinyHopper.oracle.npz"
HOPPER_MEDIUM = {  # the normalization of the public hopper-medium model
    "state_mean": [1.311279, -0.08469521, -0.5382719, -0.07201576, 0.04932366, 2.1066856,
                   -0.15017354, 0.00878345, -0.2848186, -0.18540096, -0.28461286],
    "state_std": [0.17790751, 0.05444621, 0.21297139, 0.14530419, 0.6124444, 0.85174465,
                  1.4515252, 0.6751696, 1.536239, 1.6160746, 5.6072536],
    "target_return": 3600.0,
    "return_scale": 1000.0,
    "context_length": 20,
}


def main() -> None:
    torch.manual_seed(0)
    config = DecisionTransformerConfig(
        state_dim=11, act_dim=3, hidden_size=16, n_layer=2, n_head=2, n_inner=24, max_ep_len=1000,
        n_positions=64, activation_function="gelu_new", scale_attn_by_inverse_layer_idx=True, action_tanh=True,
    )
    model = DecisionTransformerModel(config).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    SAMPLE.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(SAMPLE, safe_serialization=True)
    (SAMPLE / "rollout.json").write_text(json.dumps({"env_id": "Hopper-v5", **HOPPER_MEDIUM}, indent=2) + "\n")

    rng = np.random.default_rng(0)
    batch, steps = 3, 20
    padding = np.array([0, 5, 19])  # full window, padded by 5, the first step of an episode
    inputs = {
        "states": rng.standard_normal((batch, steps, 11)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (batch, steps, 3)).astype(np.float32),
        "returns_to_go": (3.6 - np.cumsum(rng.uniform(0, 0.005, (batch, steps)), axis=1))[:, :, None].astype(np.float32),
        "timesteps": (rng.integers(0, 980, (batch, 1)) + np.arange(steps)).astype(np.int64),
        "attention_mask": (np.arange(steps)[None] >= padding[:, None]).astype(np.int64),
    }
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in inputs.items()}, return_dict=True)
    outputs = {k: out[k].numpy() for k in ("state_preds", "action_preds", "return_preds")}
    np.savez(ORACLE, **inputs, **outputs)
    sizes = {p.name: p.stat().st_size for p in SAMPLE.iterdir()}
    print(f"wrote {SAMPLE.relative_to(REPO)} {sizes} and {ORACLE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
