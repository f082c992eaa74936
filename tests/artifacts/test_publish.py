"""`rlparity publish`: real git remotes (a bare repository, a git server over HTTP with
authentication), read back byte for byte; the Hub path through its dry run and the commit
operations huggingface_hub would send; a canary token that must appear nowhere."""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile

import pytest

from rlparity import samples
from rlparity.artifacts import publish as publishing
from rlparity.artifacts.publish import (
    HUB_GITATTRIBUTES,
    gitattributes,
    hub_operations,
    parse_target,
    plan,
)
from tests.artifacts.conftest import (
    bare_repo,
    bench_section,
    git,
    png,
    tree,
    write_section_report,
)
from tests.artifacts.git_http import GitHttpServer
from tests.conftest import TINYWALKER, fixture_path

CANARY = "hf_CANARY0123456789abcdefTOKENvalue"


@pytest.fixture(scope="module")
def walker_package(tmp_path_factory, walker_report):
    """A TinyWalker package with a merged bench section and its plot (a binary, non-LFS-named file)."""
    from click.testing import CliRunner

    from rlparity.cli import main

    root = tmp_path_factory.mktemp("publish")
    bench = write_section_report(walker_report, root / "measured", "bench.json", {"bench": bench_section()},
                                 "rlparity bench sample:tinywalker --plot bench.png --json bench.json")
    (root / "measured" / "bench.png").write_bytes(png())
    folder = root / "TinyWalker"
    result = CliRunner().invoke(main, ["package", str(TINYWALKER), "-o", str(folder), "--from-report", str(bench)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(publishing, "RETRY_FIRST_DELAY_S", 0.05)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _commits(repo) -> list[str]:
    return git("log", "--format=%s", "--all", cwd=repo).splitlines()


def _round_trip(run_cli, package, remote, tmp_path, message=None):
    args = ["--message", message] if message else []
    result = run_cli("publish", package, "--repo", remote, *args)
    assert result.exit_code == 0, result.output
    clone = tmp_path / f"clone-{len(list(tmp_path.iterdir()))}"
    git("clone", "--quiet", str(remote), str(clone))
    assert tree(clone) == tree(package)  # every file, byte for byte, and nothing else
    return result, clone


@pytest.mark.parametrize("model", ["TinyWalker", "Huggy", "CartPole"])
def test_package_then_publish_round_trips_every_file(run_cli, tmp_path, model):
    if model == "Huggy":
        source = fixture_path("mlagents/Huggy")
    elif model == "CartPole":
        if "cartpole" not in samples.SAMPLES:
            pytest.skip("the sample:cartpole checkpoint is not bundled with this build")
        source = "sample:cartpole"
    else:
        source = TINYWALKER
    package = tmp_path / "pkg"
    result = run_cli("package", source, "-o", package)
    assert result.exit_code == 0, result.output
    remote = bare_repo(tmp_path / "remote.git")

    dry = run_cli("publish", package, "--repo", remote, "--dry-run")
    assert dry.exit_code == 0 and "dry run: nothing pushed" in dry.output
    assert git("for-each-ref", cwd=remote) == ""  # the dry run pushed nothing

    result, _ = _round_trip(run_cli, package, remote, tmp_path)
    assert "published 7 files" in result.output
    assert len(_commits(remote)) == 1 and _commits(remote)[0].startswith("Publish ")

    again = run_cli("publish", package, "--repo", remote)
    assert again.exit_code == 0 and "nothing to publish" in again.output
    assert len(_commits(remote)) == 1  # no empty commit


def test_each_publish_is_one_commit_with_its_message(run_cli, tmp_path):
    package, remote = tmp_path / "pkg", bare_repo(tmp_path / "remote.git")
    assert run_cli("package", TINYWALKER, "-o", package, "--batch", "8").exit_code == 0
    _round_trip(run_cli, package, remote, tmp_path, message="first")
    assert run_cli("package", TINYWALKER, "-o", package, "--batch", "9", "--force").exit_code == 0
    _, clone = _round_trip(run_cli, package, remote, tmp_path, message="second: batch 9")
    assert _commits(remote) == ["second: batch 9", "first"]
    changed = git("show", "--name-only", "--format=", "HEAD", cwd=clone).split()
    assert "inputs.npz" in changed and "report.json" in changed and "TinyWalker-1000.onnx" not in changed


def _files_containing(root, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_a_canary_token_is_used_and_appears_nowhere(run_cli, tmp_path, monkeypatch, walker_package):
    """Through a real git server that demands the token: it reaches the server, and nothing else."""
    home, scratch = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(), scratch.mkdir()
    (home / ".gitconfig").write_text("[credential]\n\thelper = store\n")  # would save any password it is given
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv(publishing.TOKEN_ENV, CANARY)
    monkeypatch.setenv("HF_TOKEN", CANARY)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    before = tree(walker_package)
    server_root = tmp_path / "served"
    bare_repo(server_root / "model.git")

    with GitHttpServer(server_root, user="git", token=CANARY) as server:
        result = run_cli("publish", walker_package, "--repo", server.url("model.git"))
        assert result.exit_code == 0, result.output
        assert server.authorized > 0 and server.rejected_credentials == 0  # git really sent the token

        # a token written into the URL is moved out of it, and still never shown
        monkeypatch.delenv(publishing.TOKEN_ENV)
        bare_repo(server_root / "other.git")
        url = server.url("other.git").replace("http://", f"http://git:{CANARY}@")
        in_url = run_cli("publish", walker_package, "--repo", url)
        assert in_url.exit_code == 0, in_url.output
        assert server.url("other.git") in in_url.output

    clone = tmp_path / "clone"
    git("clone", "--quiet", str(server_root / "model.git"), str(clone))
    assert tree(clone) == before
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=server_root / "model.git",
                             capture_output=True).stdout
    needle = CANARY.encode()
    assert needle not in objects  # every object of the pushed repository, uncompressed
    assert CANARY not in result.output + in_url.output
    assert tree(walker_package) == before
    for root in (walker_package, server_root, clone, home, scratch):
        assert _files_containing(root, needle) == [], root
    assert not (home / ".git-credentials").exists()
    assert list(scratch.iterdir()) == []  # the askpass helper and the clone are gone


def test_a_wrong_token_fails_once_with_a_clean_line(run_cli, tmp_path, monkeypatch, walker_package):
    monkeypatch.setenv(publishing.TOKEN_ENV, CANARY + "-wrong")
    bare_repo(tmp_path / "model.git")
    with GitHttpServer(tmp_path, user="git", token=CANARY) as server:
        result = run_cli("publish", walker_package, "--repo", server.url("model.git"))
    assert result.exit_code == 1
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "Authentication failed" in line and f"set {publishing.TOKEN_ENV}" in line
    assert "retrying" not in result.output and CANARY not in result.output
    assert server.rejected_credentials >= 1 and server.authorized == 0


def test_a_transient_server_error_is_retried(run_cli, tmp_path, monkeypatch, walker_package):
    monkeypatch.setenv(publishing.TOKEN_ENV, CANARY)
    bare_repo(tmp_path / "model.git")
    with GitHttpServer(tmp_path, user="git", token=CANARY) as server:
        server.fail_next = 1
        result = run_cli("publish", walker_package, "--repo", server.url("model.git"))
    assert result.exit_code == 0, result.output
    assert server.unavailable_answers == 1
    assert result.output.count("retrying in") == 1 and "returned error: 503" in result.output
    assert len(_commits(tmp_path / "model.git")) == 1


@pytest.mark.parametrize("kind", ["git", "hub"])
def test_an_unreachable_remote_fails_cleanly_and_leaves_the_folder(run_cli, monkeypatch, walker_package, kind):
    port = _closed_port()
    monkeypatch.setenv("HF_TOKEN", CANARY)
    if kind == "hub":
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        target, step = "hf://someone/tinywalker", "creating the repository"
    else:
        target, step = f"http://127.0.0.1:{port}/model.git", "cloning"
    before = tree(walker_package)
    result = run_cli("publish", walker_package, "--repo", target)
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{step} failed 3 times, giving up" in errors[0]
    assert result.output.count("retrying in") == 2
    assert "Traceback" not in result.output and CANARY not in result.output
    assert tree(walker_package) == before


def test_the_hub_dry_run_lists_the_commit_operations_it_would_send(run_cli, monkeypatch, walker_package):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")  # nothing may be contacted
    target = parse_target("hf://someone/tinywalker")
    files = plan(walker_package, target)
    operations = hub_operations(walker_package, files)
    on_disk = {p.name: p.read_bytes() for p in walker_package.iterdir()}
    assert [op.path_in_repo for op in operations] == sorted(on_disk)
    for op, f in zip(operations, files):
        data = on_disk[op.path_in_repo]
        assert op.upload_info.size == f.size == len(data)
        assert op.upload_info.sha256.hex() == f.sha256 == hashlib.sha256(data).hexdigest()
        assert op.upload_info.sample == data[:512]
    lfs = {f.path: (f.lfs, f.why) for f in files}
    assert lfs["TinyWalker-1000.onnx"] == (True, ".gitattributes: *.onnx")
    assert lfs["inputs.npz"] == lfs["outputs.npz"] == (True, ".gitattributes: *.npz")
    assert lfs["bench.png"] == (True, "binary")
    for text in ("README.md", "report.json", "environment.json", "MANIFEST.sha256"):
        assert lfs[text] == (False, "")

    result = run_cli("publish", walker_package, "--repo", "hf://someone/tinywalker", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "dry run: nothing pushed" in result.output
    for f in files:
        assert f.sha256 in result.output and f.path in result.output


def test_hub_remotes_over_git_get_the_hubs_gitattributes(walker_package, monkeypatch):
    target = parse_target("https://huggingface.co/someone/tinywalker")
    assert target.hub_host and target.lfs
    files = {f.path: f for f in plan(walker_package, target)}
    attributes = files[".gitattributes"]
    text = gitattributes(None, list(files.values()))
    assert text.startswith(HUB_GITATTRIBUTES)
    assert text[len(HUB_GITATTRIBUTES):] == "bench.png filter=lfs diff=lfs merge=lfs -text\n"  # binary, not named
    assert attributes.sha256 == hashlib.sha256(text.encode()).hexdigest()
    # a repository that already has a .gitattributes keeps it, with lines added for what it misses
    assert gitattributes("*.onnx filter=lfs diff=lfs merge=lfs -text", list(files.values())) == (
        "*.onnx filter=lfs diff=lfs merge=lfs -text\n"
        + "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in ("bench.png", "inputs.npz", "outputs.npz")))
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.org")
    assert parse_target("https://hub.example.org/someone/tinywalker.git").lfs
    assert not parse_target("https://gitcode.com/someone/tinywalker.git").lfs
    assert parse_target("https://gitcode.com/someone/tinywalker.git", lfs=True).lfs


@pytest.mark.skipif(shutil.which("git-lfs") is not None, reason="git-lfs is installed here")
def test_lfs_without_git_lfs_is_a_clean_error(run_cli, tmp_path, walker_package):
    remote = bare_repo(tmp_path / "remote.git")
    result = run_cli("publish", walker_package, "--repo", remote, "--lfs")
    assert result.exit_code == 1 and "git-lfs is not installed" in result.output
    assert git("for-each-ref", cwd=remote) == ""


def test_targets_never_keep_credentials(monkeypatch, tmp_path):
    target = parse_target(f"https://alice:{CANARY}@gitcode.com/alice/tinywalker.git")
    assert (target.kind, target.location, target.shown) == ("git", "https://gitcode.com/alice/tinywalker.git",
                                                             "https://gitcode.com/alice/tinywalker.git")
    assert (target.username, target.password) == ("alice", CANARY)
    assert parse_target("git@hf.co:alice/tinywalker").hub_host
    monkeypatch.chdir(tmp_path)
    local = parse_target("remote.git")
    assert local.location == str(tmp_path / "remote.git") and local.shown == "remote.git" and not local.lfs
    hub = parse_target("hf://alice/tinywalker")
    assert (hub.kind, hub.location, hub.lfs) == ("hub", "alice/tinywalker", True)


@pytest.mark.parametrize("target", ["hf://tinywalker", "hf://a/b/c", "hf://a/../b"])
def test_a_bad_hub_target_is_a_usage_error(run_cli, walker_package, target):
    result = run_cli("publish", walker_package, "--repo", target, "--dry-run")
    assert result.exit_code == 2 and "expected hf://OWNER/NAME" in result.output


@pytest.mark.parametrize("damage", ["edited", "added", "removed", "symlink", "no manifest", "escaping manifest"])
def test_a_folder_that_is_not_the_package_is_refused(run_cli, tmp_path, walker_package, damage):
    folder = tmp_path / "pkg"
    shutil.copytree(walker_package, folder)
    expected = {
        "edited": "README.md: does not match its sha256 in MANIFEST.sha256",
        "added": "LICENSE: is not in MANIFEST.sha256",
        "removed": "inputs.npz: is listed in MANIFEST.sha256 but missing",
        "symlink": "is a symbolic link",
        "no manifest": "is not an rlparity package: no MANIFEST.sha256",
        "escaping manifest": "MANIFEST.sha256: line 1 is not",
    }[damage]
    if damage == "edited":
        (folder / "README.md").write_text((folder / "README.md").read_text().replace("PASS", "PASS!!"))
    elif damage == "added":
        (folder / "LICENSE").write_text("MIT")
    elif damage == "removed":
        (folder / "inputs.npz").unlink()
    elif damage == "symlink":
        os.symlink(tmp_path / "secret", folder / "secret")
        (tmp_path / "secret").write_text("private")
    elif damage == "no manifest":
        (folder / "MANIFEST.sha256").unlink()
    else:
        (folder / "MANIFEST.sha256").write_text(hashlib.sha256(b"x").hexdigest() + "  ../secret\n")
    remote = bare_repo(tmp_path / "remote.git")
    for extra in ([], ["--dry-run"]):
        result = run_cli("publish", folder, "--repo", remote, *extra)
        assert result.exit_code == 1, result.output
        (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert expected in line
    assert git("for-each-ref", cwd=remote) == ""


def test_links_in_the_remote_are_replaced_never_written_through(run_cli, tmp_path, walker_package):
    """A remote whose README.md and .gitattributes are symbolic links to files of this machine:
    publishing replaces the links with the package's files and leaves those files alone."""
    outside = {name: tmp_path / name for name in ("victim-readme", "victim-attributes")}
    for path in outside.values():
        path.write_text("mine\n")
    seed = tmp_path / "seed"
    git("init", "--quiet", str(seed))
    os.symlink(outside["victim-readme"], seed / "README.md")
    os.symlink(outside["victim-attributes"], seed / ".gitattributes")
    git("add", "--all", cwd=seed)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "links", cwd=seed)
    remote = bare_repo(tmp_path / "remote.git")
    git("push", "--quiet", str(remote), "HEAD:refs/heads/main", cwd=seed)
    git("symbolic-ref", "HEAD", "refs/heads/main", cwd=remote)

    result = run_cli("publish", walker_package, "--repo", remote)
    assert result.exit_code == 0, result.output
    assert all(path.read_text() == "mine\n" for path in outside.values())
    clone = tmp_path / "clone"
    git("clone", "--quiet", str(remote), str(clone))
    assert not (clone / "README.md").is_symlink()
    assert (clone / "README.md").read_bytes() == (walker_package / "README.md").read_bytes()


def test_urls_keep_their_host_as_written_and_bad_ones_are_clean_errors(run_cli, walker_package):
    ipv6 = parse_target(f"https://alice:{CANARY}@[::1]:8080/alice/tinywalker.git")
    assert ipv6.location == "https://[::1]:8080/alice/tinywalker.git" and ipv6.password == CANARY
    assert parse_target("https://gitcode.com:abc/x.git").location == "https://gitcode.com:abc/x.git"  # git refuses it
    result = run_cli("publish", walker_package, "--repo", "https://gitcode.com:abc/x.git", "--dry-run")
    assert result.exit_code == 0, result.output  # nothing is contacted in a dry run
    result = run_cli("publish", walker_package, "--repo", f"https://alice:{CANARY}@[::1/x.git", "--dry-run")
    assert result.exit_code == 2 and "not a URL git can use" in result.output
    assert CANARY not in result.output
