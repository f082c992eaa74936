"""Two kinds of failure: the user's (bad input, clean message) and ours (a bug, traceback).

A ``UserError`` is caught by the CLI, printed as one line and turned into an exit code.
Anything else escaping the CLI is a bug in rlparity and keeps its traceback.
"""
from __future__ import annotations

from pathlib import Path

# Exit codes, shared by every command (DESIGN.md, "Comparison rules").
EXIT_OK = 0
EXIT_USER_ERROR = 1
EXIT_USAGE = 2
EXIT_MISMATCH = 3
EXIT_ACCELERATOR_UNAVAILABLE = 4


class UserError(Exception):
    """Bad input: printed as ``error: <path>: <message>`` and exits with ``exit_code``."""

    exit_code = EXIT_USER_ERROR

    def __init__(self, message: str, path: str | Path | None = None):
        self.path = None if path is None else str(path)
        self.message = " ".join(str(message).split())  # always one line
        super().__init__(self.message if self.path is None else f"{self.path}: {self.message}")


class UsageError(UserError):
    """A command line that cannot mean anything (unknown runtime, bad option value)."""

    exit_code = EXIT_USAGE


class NotSupportedYet(UserError):
    """A real feature of a model family that rlparity cannot convert yet."""

    def __init__(self, feature: str, path: str | Path | None = None):
        super().__init__(f"{feature} is not supported yet", path)


class AcceleratorUnavailable(UserError):
    """The requested device cannot be used on this host (exit 4)."""

    exit_code = EXIT_ACCELERATOR_UNAVAILABLE
