"""Helpers for the package / card / publish tests: real reports, real packages, real repos."""
from __future__ import annotations

import json
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from tests.conftest import TINYWALKER


def png(width: int = 4, height: int = 3) -> bytes:
    """A small valid PNG image (a grey gradient), standing in for a bench plot."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes((x * 60) % 256 for x in range(width)) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def bench_section(plot: str | None = "bench.png") -> dict:
    """extra["bench"] in the agreed shape, with distinct figures the card must show."""
    results = []
    for i, (runtime, batch) in enumerate([("ort-cpu", 1), ("ort-cpu", 64), ("torch-cpu", 1), ("torch-cpu", 64)]):
        p50 = 0.0123 * (i + 1) * (1 + batch / 64)
        results.append({"runtime": runtime, "device": "cpu", "dtype": "float32", "batch": batch, "graph": False,
                        "first_call_ms": 3.25 + i, "min_ms": p50 * 0.9, "p50_ms": p50, "p90_ms": p50 * 1.1,
                        "p95_ms": p50 * 1.2, "p99_ms": p50 * 1.5, "max_ms": p50 * 3.0,
                        "decisions_per_s": batch / p50 * 1e3})
    section = {"runs": 200, "warmup": 20, "overhead_ms": 0.000417, "results": results}
    if plot:
        section["plot"] = plot
    return section


def rollout_section(env_id: str = "seals/CartPole-v0", identical: bool = True) -> dict:
    results = [{"runtime": name, "mean_return": 487.25 - i, "std_return": 12.5 + i, "mean_length": 487.25 - i,
                "std_length": 12.5 + i, "returns": [500.0, 474.5 - i], "fingerprint": "sha256:" + f"{i + 10:x}" * 32}
               for i, name in enumerate(["torch-cpu", "ort-cpu"])]
    return {"env_id": env_id, "episodes": 2, "seed": 7, "results": results, "identical_actions": identical,
            "first_divergence": None if identical else {"episode": 1, "step": 42, "runtimes": ["torch-cpu", "ort-cpu"],
                                                        "max_abs": 2.5e-07}}


@pytest.fixture(scope="session")
def walker_report(tmp_path_factory) -> dict:
    """A real `rlparity validate` report of the TinyWalker sample (JSON form)."""
    from click.testing import CliRunner

    from rlparity.cli import main

    path = tmp_path_factory.mktemp("validate") / "report.json"
    result = CliRunner().invoke(main, ["validate", str(TINYWALKER), "--json", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(path.read_text())


def write_section_report(base: dict, folder: Path, name: str, sections: dict, command: str) -> Path:
    """A report as `bench` / `rollout` write it: the base facts plus their own sections."""
    data = json.loads(json.dumps(base))
    data["comparisons"], data["extra"], data["command"] = [], dict(sections), command
    data["host"] = {**data["host"], "processor": "measuring-host"}
    data.pop("verdict", None)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(data, indent=2))
    return path


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes), .git excluded."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(folder).parts}


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def bare_repo(path: Path) -> Path:
    git("init", "--quiet", "--bare", str(path))
    return path
