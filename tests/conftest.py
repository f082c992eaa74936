"""Shared test helpers: where the real fixtures are, and running the CLI in-process."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SAMPLES = REPO / "rlparity" / "samples"
# The large real checkpoints live beside the checkout (../shared/fixtures) and in CI.
FIXTURES = Path(os.environ.get("RLPARITY_FIXTURES", REPO.parent / "shared" / "fixtures"))

TINYWALKER = SAMPLES / "mlagents" / "TinyWalker"
TINYBRANCHES = SAMPLES / "mlagents" / "TinyBranches"
TINYHOPPER = SAMPLES / "decision_transformer" / "TinyHopper"


def fixture_path(relative: str) -> Path:
    """A file under ../shared/fixtures, or skip the test when the fixtures are absent."""
    path = FIXTURES / relative
    if not path.exists():
        pytest.skip(f"fixture {relative} not present (expected under {FIXTURES})")
    return path


@pytest.fixture
def run_cli():
    """Run `rlparity ARGS...` in-process; returns the click Result (exit_code, output)."""
    from rlparity.cli import main

    def run(*args: str):
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)

    return run
