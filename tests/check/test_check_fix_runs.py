"""What `ddpify check --fix` writes still runs: under torchrun with two CPU processes, and as
one plain process when the script allows that."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ddpify, run, torchrun

torch = pytest.importorskip("torch")


def fixed_copy(tmp_path: Path, name: str) -> Path:
    script = tmp_path / name
    shutil.copy(FIXTURES / "check" / "broken" / name, script)
    result = ddpify("check", "--fix", "--select", "ALL", name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"fixed, 0 remaining" in result.stdout
    return script


def test_a_guarded_atomic_save_renames_on_rank_zero_only(tmp_path: Path) -> None:
    # Guarding the torch.save alone left `os.replace(tmp, path)` to rank 1, which then
    # failed on a missing file: the fix guards both.
    script = fixed_copy(tmp_path, "atomic_save_on_every_rank.py")
    text = script.read_text()
    assert "            if dist.get_rank() == 0:\n" in text
    assert "                os.replace(" in text
    result = torchrun([script.name], cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    state = torch.load(tmp_path / "atomic_last.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] >= 0
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_a_script_that_also_runs_without_a_group_keeps_running(
    tmp_path: Path, launcher: str
) -> None:
    # Hugging Face's `args.local_rank in [-1, 0]`: -1 is the run with no process group, where
    # a bare `dist.get_rank()` raises; the fix keeps that run working.
    script = fixed_copy(tmp_path, "hf_local_rank_in_minus_one_zero.py")
    assert "not dist.is_initialized() or dist.get_rank() == 0" in script.read_text()
    if launcher == "torchrun":
        result = torchrun([script.name], cwd=tmp_path, timeout=240)
    else:
        result = run([sys.executable, script.name], cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    saved = sorted(path.name for path in (tmp_path / "hf_out").glob("*"))
    assert saved, "the main process saved nothing"


def test_a_barrier_before_the_reload_of_rank_0s_best_checkpoint(tmp_path: Path) -> None:
    # DDP117's fix: every rank waits for rank 0's last save before reloading it.
    script = fixed_copy(tmp_path, "best_checkpoint_reloaded_without_barrier.py")
    assert "    dist.barrier()\n    model.module.load_state_dict(torch.load(" in script.read_text()
    result = torchrun([script.name], cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert result.stdout.decode().count("test mse") == 1
