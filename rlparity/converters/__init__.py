"""The model families rlparity knows, and how a path is matched to one."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rlparity import samples
from rlparity.converters.decision_transformer import DecisionTransformer
from rlparity.converters.family import Family
from rlparity.converters.mlagents import MLAgentsPolicy
from rlparity.converters.sb3 import SB3Policy
from rlparity.errors import UsageError, UserError

# Most specific first: sniff() is tried in this order.
FAMILIES: dict[str, type[Family]] = {
    DecisionTransformer.name: DecisionTransformer,
    SB3Policy.name: SB3Policy,
    MLAgentsPolicy.name: MLAgentsPolicy,
}


def detect(path: Path) -> type[Family]:
    if not path.exists():
        raise UserError("no such file or folder", path)
    for family in FAMILIES.values():
        if family.sniff(path):
            return family
    looked_for = "; ".join(cls.looks_for for cls in FAMILIES.values())
    if path.is_dir():
        raise UserError(f"no checkpoint rlparity can read in this folder (looked for {looked_for})", path)
    raise UserError(f"cannot tell which model family this file is; rlparity reads {looked_for}", path)


def load(path: str | Path, family: str | None = None, **options: Any) -> Family:
    """Load ``path`` (or ``sample:NAME``) as ``family`` (default: detected).

    ``options`` go to the family's loader (e.g. ``obs_sizes`` for ML-Agents).
    """
    path = samples.expand(path)
    if family is None:
        cls = detect(path)
    elif family in FAMILIES:
        cls = FAMILIES[family]
    else:
        raise UsageError(f"unknown family {family!r}: expected one of {', '.join(FAMILIES)}")
    return cls.load(path, **options)
