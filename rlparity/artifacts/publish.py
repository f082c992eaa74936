"""`rlparity publish`: push a package folder to a model repository, as one commit.

Targets:
  hf://OWNER/NAME      a Hugging Face Hub model repo (or a mirror: HF_ENDPOINT), through
                       huggingface_hub's create_commit; the Hub stores binaries as LFS/Xet.
  a git URL or path    any git host (Hugging Face, GitCode, a company server, a local bare
                       repository): cloned into a temporary folder, one commit, pushed. Where
                       the host is a Hub (or with --lfs), large and binary files go to LFS with
                       a .gitattributes as the Hub writes it.

The package is checked against its MANIFEST.sha256 before anything is sent, and is never
written to. Credentials come from the environment only (RLPARITY_GIT_TOKEN, or
HF_TOKEN / `hf auth login` for Hub hosts); a token found in a URL is moved out of it. git
receives the token through a GIT_ASKPASS helper that reads it from git's environment, so
it is never on a command line, in a file, or in what rlparity prints. Transient network
failures are retried a few times with a growing delay.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit, urlunsplit

from rlparity.artifacts.package import verify_package
from rlparity.errors import UsageError, UserError

# The .gitattributes a new Hugging Face Hub model repository starts with.
HUB_LFS_PATTERNS = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*",
    "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb",
    "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*",
    "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*",
)
LFS_ATTRIBUTES = "filter=lfs diff=lfs merge=lfs -text"
HUB_GITATTRIBUTES = "".join(f"{p} {LFS_ATTRIBUTES}\n" for p in HUB_LFS_PATTERNS)
# The Hub stores as LFS any file over 10 MB, and any binary file, whatever .gitattributes says.
HUB_LFS_MIN_SIZE = 10 * 1024 * 1024
SAMPLE_BYTES = 512  # what huggingface_hub sends the Hub to decide (UploadInfo.sample)
HUB_HOSTS = ("huggingface.co", "hf.co")

TOKEN_ENV = "RLPARITY_GIT_TOKEN"
USER_ENV = "RLPARITY_GIT_USER"
RETRY_ATTEMPTS = 3
RETRY_FIRST_DELAY_S = 1.0
# git's words for failures that may pass if tried again (lower case).
TRANSIENT_GIT = (
    "could not resolve host", "temporary failure in name resolution", "failed to connect",
    "couldn't connect to server", "connection refused", "connection timed out", "operation timed out",
    "connection reset", "the remote end hung up unexpectedly", "early eof", "rpc failed",
    "returned error: 429", "returned error: 500", "returned error: 502", "returned error: 503",
    "returned error: 504", "empty reply from server", "ssl_read", "gnutls_handshake",
)
TRANSIENT_HTTP_ERRORS = {"ConnectionError", "ConnectError", "Timeout", "TimeoutException", "ConnectTimeout",
                         "ReadTimeout", "NetworkError", "RemoteProtocolError", "ProtocolError"}
TRANSIENT_STATUS = {429, 500, 502, 503, 504}


@dataclass
class Target:
    kind: str            # "hub" (hf://) or "git"
    location: str        # the repo id (hub), or the URL / absolute path without credentials (git)
    shown: str           # how messages name it: never holds a credential
    hub_host: bool       # the remote is a Hugging Face Hub (or its HF_ENDPOINT mirror)
    lfs: bool            # binaries go to LFS, as the Hub stores them
    username: str | None = None
    password: str | None = None  # found in the URL; moved out of it, used like a token


@dataclass
class PlannedFile:
    path: str
    size: int
    sha256: str
    lfs: bool
    why: str = ""        # why LFS (or what the file is), for the listing

    def to_json(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "lfs": self.lfs, "why": self.why}


@dataclass
class Published:
    target: Target
    files: list[PlannedFile]
    dry_run: bool
    commit: str | None = None
    branch: str | None = None
    unchanged: bool = False


class TransientError(Exception):
    """A failure worth retrying (network); its message is already free of secrets."""


# -- targets -------------------------------------------------------------------------
def parse_target(text: str, lfs: bool | None = None) -> Target:
    """``hf://owner/name``, a git URL (https, ssh, git@host:path, file) or a local path."""
    if text.startswith("hf://"):
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        repo_id = text[len("hf://"):].strip("/")
        try:
            validate_repo_id(repo_id)
        except HFValidationError:
            repo_id = ""
        if repo_id.count("/") != 1:
            raise UsageError(f"--repo {text!r}: expected hf://OWNER/NAME")
        endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/")
        shown = f"hf://{repo_id}" + (f" at {_without_credentials(endpoint)}" if endpoint else "")
        return Target("hub", repo_id, shown, hub_host=True, lfs=True)
    if "://" in text:
        try:
            parts = urlsplit(text)
        except ValueError as e:  # e.g. "Invalid IPv6 URL"; the message never holds the URL
            raise UsageError(f"--repo: not a URL git can use: {e}") from None
        clean = _without_credentials(text)
        hub = _is_hub_host(parts.hostname or "")
        return Target("git", clean, clean, hub, hub if lfs is None else lfs,
                      username=parts.username or None, password=parts.password or None)
    scp = re.fullmatch(r"(?:[\w.-]+@)?([\w.-]+):(?!//)(.+)", text)
    if scp and not Path(text).exists():  # git@host:owner/name.git
        hub = _is_hub_host(scp.group(1))
        return Target("git", text, text, hub, hub if lfs is None else lfs)
    path = str(Path(text).expanduser().resolve())  # the clone runs in another folder
    return Target("git", path, text, False, bool(lfs))


def _is_hub_host(host: str) -> bool:
    hosts = set(HUB_HOSTS)
    endpoint = os.environ.get("HF_ENDPOINT")
    if endpoint:
        hosts.add(urlsplit(endpoint).hostname or "")
    return host.lower() in hosts


def _without_credentials(url: str) -> str:
    """``url`` without its ``user:password@``; host and port as written (an IPv6 host keeps
    its brackets, a bad port is left for git to refuse)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


# -- what would be pushed ------------------------------------------------------------
def plan(folder: str | Path, target: Target) -> list[PlannedFile]:
    """Every file that would be pushed, with its size, sha256 and LFS decision."""
    folder = Path(folder)
    files = []
    for rel, (size, sha256) in verify_package(folder).items():
        lfs, why = lfs_decision(rel, size, _sample(folder / rel)) if target.lfs else (False, "")
        files.append(PlannedFile(rel, size, sha256, lfs, why))
    if target.kind == "git" and target.lfs:
        text = gitattributes(None, files).encode()
        files.append(PlannedFile(".gitattributes", len(text), hashlib.sha256(text).hexdigest(), False,
                                 "the Hub's, extended for these files (merged into the remote's if it has one)"))
    return sorted(files, key=lambda f: f.path)


def lfs_decision(path: str, size: int, sample: bytes) -> tuple[bool, str]:
    """LFS or a plain git blob, by the Hub's rules: its .gitattributes, size, binary content."""
    if size == 0:
        return False, "empty"  # LFS cannot hold an empty file; the Hub commits it as is
    pattern = _matching_pattern(path, HUB_LFS_PATTERNS)
    if pattern:
        return True, f".gitattributes: {pattern}"
    if size >= HUB_LFS_MIN_SIZE:
        return True, "10 MB or larger"
    if _is_binary(sample):
        return True, "binary"
    return False, ""


def _matching_pattern(path: str, patterns) -> str | None:
    """The first .gitattributes pattern matching ``path`` (a pattern without '/' matches the name)."""
    name = path.rsplit("/", 1)[-1]
    for pattern in patterns:
        if fnmatch.fnmatchcase(path if "/" in pattern else name, pattern.replace("**/", "")):
            return pattern
    return None


def _sample(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(SAMPLE_BYTES)


def _is_binary(sample: bytes) -> bool:
    if b"\x00" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start < len(sample) - 3  # a character cut by the sample's end is still text
    return False


def gitattributes(existing: str | None, files: list[PlannedFile]) -> str:
    """The Hub's .gitattributes (or the remote's), plus a line for each LFS file it misses."""
    text = existing if existing is not None else HUB_GITATTRIBUTES
    patterns = [line.split()[0] for line in text.splitlines()
                if line.strip() and not line.startswith("#") and "filter=lfs" in line]
    missing = [f.path for f in files if f.lfs and not _matching_pattern(f.path, patterns)]
    if missing and text and not text.endswith("\n"):
        text += "\n"
    return text + "".join(f"{p.replace(' ', '[[:space:]]')} {LFS_ATTRIBUTES}\n" for p in missing)


# -- publishing ----------------------------------------------------------------------
def publish(folder: str | Path, target: Target, message: str, dry_run: bool = False,
            say: Callable[[str], None] = lambda _: None) -> Published:
    folder = Path(folder)
    files = plan(folder, target)
    result = Published(target, files, dry_run)
    if dry_run:
        return result
    retry = _Retry(say, RETRY_ATTEMPTS, RETRY_FIRST_DELAY_S)
    if target.kind == "hub":
        _push_to_hub(folder, target, files, message, result, retry)
    else:
        _push_with_git(folder, target, files, message, result, retry)
    return result


@dataclass
class _Retry:
    say: Callable[[str], None]
    attempts: int
    first_delay_s: float

    def __call__(self, what: str, action: Callable, shown: str):
        delay = self.first_delay_s
        for attempt in range(1, self.attempts + 1):
            try:
                return action()
            except TransientError as e:
                if attempt == self.attempts:
                    raise UserError(f"{what} failed {self.attempts} times, giving up: {e}", shown) from None
                self.say(f"{what} failed ({e}); retrying in {delay:g} s (attempt {attempt + 1} of {self.attempts})")
                time.sleep(delay)
                delay *= 2


# -- git -----------------------------------------------------------------------------
# Answers git's prompts from its environment: the token never touches a file or argv.
ASKPASS = """#!/bin/sh
case "$1" in
  Username*|username*) printf '%s\\n' "$RLPARITY_ASKPASS_USER" ;;
  *) printf '%s\\n' "$RLPARITY_ASKPASS_SECRET" ;;
esac
"""


class _Git:
    """git in a subprocess, with credentials in its environment and secrets kept out of messages."""

    def __init__(self, target: Target, scratch: Path):
        self.secrets = [s for s in (target.password,) if s]
        self.env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_LFS_SKIP_SMUDGE": "1", "LC_ALL": "C"}
        self.config: list[str] = []
        token = target.password or os.environ.get(TOKEN_ENV) or (_hub_token() if target.hub_host else None)
        if token:
            askpass = scratch / "askpass.sh"
            askpass.write_text(ASKPASS)
            askpass.chmod(0o700)
            self.secrets.append(token)
            self.env.update(GIT_ASKPASS=str(askpass), RLPARITY_ASKPASS_SECRET=token,
                            RLPARITY_ASKPASS_USER=os.environ.get(USER_ENV) or target.username or "git")
            # no credential helper may store (or offer another) password for this push
            self.config += ["-c", "credential.helper="]

    def __call__(self, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(["git", *self.config, *args], cwd=cwd, env=self.env, capture_output=True, text=True)
        if check and done.returncode != 0:
            reason = self.redact(_reason(done.stderr) or f"git {args[0]} exited with {done.returncode}")
            if re.search(r"authentication failed|could not read username|permission denied", reason, re.I):
                reason += f" (set {TOKEN_ENV}, or HF_TOKEN for a Hub, to the token of an account that may push)"
            if any(word in done.stderr.lower() for word in TRANSIENT_GIT):
                raise TransientError(reason)
            raise _Failed(reason)
        return done

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


class _Failed(Exception):
    """A failure that retrying will not cure; its message is already free of secrets."""


def _reason(stderr: str) -> str:
    """The line of git's stderr that says what went wrong."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for prefix in ("fatal:", "error:", "remote: error:", "! ["):
        chosen = [line for line in lines if line.lower().startswith(prefix)]
        if chosen:
            return chosen[-1]
    return lines[-1] if lines else ""


def _hub_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()


def _push_with_git(folder: Path, target: Target, files: list[PlannedFile], message: str,
                   result: Published, retry: _Retry) -> None:
    if shutil.which("git") is None:
        raise UserError("git is not installed; it is needed to publish to a git remote", target.shown)
    with tempfile.TemporaryDirectory(prefix="rlparity-publish-") as scratch:
        scratch = Path(scratch)
        git = _Git(target, scratch)
        work = scratch / "repo"
        try:
            if target.lfs:
                _require_git_lfs(git, files, target)
            local = not re.match(r"^[\w+.-]+://|^[\w.-]+@", target.location)
            depth = [] if local else ["--depth", "1"]

            def clone():
                shutil.rmtree(work, ignore_errors=True)  # what a failed attempt may have left
                git("clone", "--quiet", *depth, "--", target.location, str(work))

            retry("cloning", clone, target.shown)
            branch = git("symbolic-ref", "--short", "HEAD", cwd=work).stdout.strip() or "main"
            if target.lfs:
                git("lfs", "install", "--local", cwd=work)
                existing = _in_clone(work, ".gitattributes")
                text = gitattributes(existing.read_text() if existing.is_file() else None, files)
                existing.write_text(text)
            for f in files:
                if f.path != ".gitattributes":
                    shutil.copyfile(folder / f.path, _in_clone(work, f.path))
            git("add", "--all", "--", *[f.path for f in files], cwd=work)
            if git("diff", "--cached", "--quiet", cwd=work, check=False).returncode == 0:
                result.unchanged, result.branch = True, branch
                result.commit = git("rev-parse", "HEAD", cwd=work, check=False).stdout.strip() or None
                return
            identity = [] if git("config", "user.email", cwd=work, check=False).stdout.strip() else [
                "-c", "user.name=rlparity", "-c", "user.email=rlparity@localhost"]
            git(*identity, "commit", "--quiet", "-m", message, cwd=work)
            retry("pushing", lambda: git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=work),
                  target.shown)
            result.commit = git("rev-parse", "HEAD", cwd=work).stdout.strip()
            result.branch = branch
        except _Failed as e:
            raise UserError(str(e), target.shown) from None


def _in_clone(work: Path, relative: str) -> Path:
    """Where ``relative`` goes in the clone, safe to read and write: a symbolic link the remote
    holds there, or on the way there, is removed first, so that nothing outside the clone is
    read or overwritten (the file then replaces the link in the commit)."""
    path = work
    for part in relative.split("/"):
        path = path / part
        if path.is_symlink():
            path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _require_git_lfs(git: _Git, files: list[PlannedFile], target: Target) -> None:
    if git("lfs", "version", check=False).returncode != 0:
        big = ", ".join(f.path for f in files if f.lfs)
        raise UserError(f"git-lfs is not installed; a Hub repository over git needs it for {big} "
                        f"(install git-lfs, publish with hf://OWNER/NAME, or pass --no-lfs)", target.shown)


# -- the Hugging Face Hub ------------------------------------------------------------
def hub_operations(folder: str | Path, files: list[PlannedFile]):
    """The CommitOperationAdd list create_commit sends: one per file, paths as in the repo."""
    from huggingface_hub import CommitOperationAdd

    return [CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=str(Path(folder) / f.path)) for f in files]


def _push_to_hub(folder: Path, target: Target, files: list[PlannedFile], message: str,
                 result: Published, retry: _Retry) -> None:
    from huggingface_hub import HfApi

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)

    def create_repo():
        _hub_call(lambda: api.create_repo(target.location, repo_type="model", exist_ok=True))

    def commit():
        # create_commit mutates its operations, so each attempt builds its own
        return _hub_call(lambda: api.create_commit(target.location, hub_operations(folder, files),
                                                   commit_message=message, repo_type="model"))

    try:
        retry("creating the repository", create_repo, target.shown)
        info = retry("committing", commit, target.shown)
    except _Failed as e:
        raise UserError(str(e), target.shown) from None
    result.commit = getattr(info, "oid", None)
    result.branch = "main"


def _hub_call(action: Callable):
    """Run one huggingface_hub call; network failures become TransientError, refusals _Failed."""
    try:
        return action()
    except Exception as e:
        names = {cls.__name__ for cls in type(e).__mro__}
        status = getattr(getattr(e, "response", None), "status_code", None)
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        token = _hub_token()
        if token:
            reason = reason.replace(token, "***")
        if names & TRANSIENT_HTTP_ERRORS or status in TRANSIENT_STATUS:
            raise TransientError(reason) from None
        if "HfHubHTTPError" in names or "HFValidationError" in names or isinstance(e, (OSError, ValueError)):
            raise _Failed(reason) from None
        raise


def default_message(folder: Path) -> str:
    """'Publish TinyWalker-1000 (ONNX, rlparity: pass)' from the package's report."""
    from rlparity.artifacts.card import model_name
    from rlparity.artifacts.report import Report

    report = Report.read(folder / "report.json").to_json()
    return f"Publish {model_name(report)} (ONNX, rlparity validation: {report['verdict']})"

