"""The hooks in `.pre-commit-hooks.yaml`, driven by the real pre-commit framework.

pre-commit clones the hook repository, builds a virtual environment and pip-installs ddpify
into it, as it would for a user. The repository it clones is a snapshot of this working
tree (committed and uncommitted files alike, as git would list them), so the test checks
what is on disk, not only what was committed: `try-repo` of a dirty checkout would leave
out its untracked files.

`try-repo` builds its environment in a temporary store every time (about 17 s here); a
`.pre-commit-config.yaml` naming the repository, as a user writes it, builds it once in
PRE_COMMIT_HOME, which is kept for the session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, run
from test_check_cli import FIXED, LINE, MISSING_SET_EPOCH

# Building the hook's environment pip-installs ddpify and its dependencies.
TIMEOUT = 600


def git(*args: str, cwd: Path) -> str:
    result = subprocess.run(
        ["git", "-c", "user.name=ddpify tests", "-c", "user.email=tests@ddpify.invalid",
         "-c", "commit.gpgsign=false", *args],
        cwd=cwd, capture_output=True, text=True, check=True, env=_git_env(),
    )  # fmt: skip
    return result.stdout


def _git_env() -> dict[str, str]:
    # Run from inside a git hook, these would point every git command at the outer repo.
    return {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}


@pytest.fixture(scope="session")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-commit git repository holding this working tree's files."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of ddpify")
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    snapshot = tmp_path_factory.mktemp("ddpify-hook-repo")
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, snapshot / name)
    git("init", "-q", cwd=snapshot)
    git("add", "-A", cwd=snapshot)
    git("commit", "-q", "-m", "snapshot", cwd=snapshot)
    return snapshot


@pytest.fixture(scope="session")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


def test_hooks_flag_then_fix_a_missing_set_epoch(
    hook_repo: Path, pre_commit_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRE_COMMIT_HOME", str(pre_commit_home))
    for key in [key for key in os.environ if key.startswith("GIT_")]:
        monkeypatch.delenv(key)
    project = tmp_path / "project"
    project.mkdir()
    git("init", "-q", cwd=project)
    (project / "script.py").write_text(MISSING_SET_EPOCH)
    git("add", "script.py", cwd=project)

    def pre_commit(*args: str) -> tuple[int, str]:
        command = [sys.executable, "-m", "pre_commit", *args, "--files", "script.py"]
        result = run(command, cwd=project, timeout=TIMEOUT)
        return result.returncode, (result.stdout + result.stderr).decode(errors="replace")

    start = time.perf_counter()
    code, output = pre_commit("try-repo", str(hook_repo), "ddpify-check")
    print(f"\ntry-repo ddpify-check: {time.perf_counter() - start:.1f} s")
    assert code == 1, output
    assert f"script.py:{LINE}:5: DDP101 " in output
    assert (project / "script.py").read_text() == MISSING_SET_EPOCH

    rev = git("rev-parse", "HEAD", cwd=hook_repo).strip()
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n"
        f"  - repo: {hook_repo}\n"
        f"    rev: {rev}\n"
        f"    hooks:\n"
        f"      - id: ddpify-fix\n"
        f"      - id: ddpify-check\n"
    )
    git("add", ".pre-commit-config.yaml", cwd=project)
    start = time.perf_counter()
    code, output = pre_commit("run", "ddpify-fix")
    print(f"run ddpify-fix (building the environment): {time.perf_counter() - start:.1f} s")
    # pre-commit fails a hook that modified files, so the fix is seen before committing.
    assert code == 1, output
    assert "files were modified by this hook" in output
    assert (project / "script.py").read_text() == FIXED

    git("add", "script.py", cwd=project)
    start = time.perf_counter()
    code, output = pre_commit("run", "ddpify-check")
    print(f"run ddpify-check (environment built): {time.perf_counter() - start:.1f} s")
    assert code == 0, output
    assert "ddpify check" in output and "Passed" in output
