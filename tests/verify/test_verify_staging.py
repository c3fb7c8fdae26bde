"""verify runs each script in a folder of its own, holding a copy of the script's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify.verify import runner
from ddpify.verify.runner import stage_folder


def test_the_scripts_folder_is_copied_within_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "project"
    (source / "data" / "deep" / "deeper").mkdir(parents=True)
    (source / ".git").mkdir()
    (source / "__pycache__").mkdir()
    (source / "input.txt").write_text("hello")
    (source / "data" / "train.csv").write_text("1,2\n")
    (source / "data" / "deep" / "x.npy").write_bytes(b"x")
    (source / "data" / "deep" / "deeper" / "too_deep.txt").write_text("no")
    (source / ".git" / "HEAD").write_text("no")
    (source / "__pycache__" / "m.pyc").write_bytes(b"no")
    (source / "big.bin").write_bytes(b"0" * 2048)
    monkeypatch.setattr(runner, "STAGE_FILE_LIMIT", 1024)
    work = tmp_path / "work"
    work.mkdir()
    stage_folder(source, work)
    copied = sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file())
    assert copied == ["data/deep/x.npy", "data/train.csv", "input.txt"]
    (work / "input.txt").write_text("overwritten by the run")
    assert (source / "input.txt").read_text() == "hello"  # a copy, not a link
