"""verify runs each script in a folder of its own, holding a copy of the script's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify.verify import runner
from ddpify.verify.runner import stage, stage_folder, upward, work_folder


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


def test_what_the_script_names_above_its_folder_is_copied_at_the_same_place(
    tmp_path: Path,
) -> None:
    """PyTorch-GAN's `"../../data/%s" % opt.dataset_name`, from implementations/cyclegan/."""
    repo = tmp_path / "repo"
    script = repo / "implementations" / "cyclegan" / "cyclegan.py"
    script.parent.mkdir(parents=True)
    script.write_text('root = "../../data/%s" % name\nlog = open("../logs.txt", "w")\n')
    (repo / "data" / "monet" / "train" / "A").mkdir(parents=True)
    (repo / "data" / "monet" / "train" / "A" / "0.png").write_bytes(b"png")
    (repo / "implementations" / "other").mkdir()
    (repo / "implementations" / "other" / "other.py").write_text("no")
    assert upward(script, ("--out", "../../../x/y")) == {(2, "data"), (1, "logs.txt"), (3, "x")}
    assert upward(script, ("../../../../too/far",)) >= {(2, "data")}
    assert (1 + 3, "too") not in upward(script, ("../../../../too/far",))
    run = tmp_path / "run"
    work = work_folder(run, script, ())
    assert work == run / "work" / "implementations" / "cyclegan"
    work.mkdir(parents=True)
    stage(script, work, ())
    copied = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file())
    assert copied == [
        "work/data/monet/train/A/0.png",
        "work/implementations/cyclegan/cyclegan.py",
    ]  # what it does not name (implementations/other) stays out
    (work / "../../data/monet/train/A/0.png").write_bytes(b"overwritten")
    assert (repo / "data" / "monet" / "train" / "A" / "0.png").read_bytes() == b"png"
    assert work_folder(run, repo / "implementations" / "other" / "other.py", ()) == run / "work"
