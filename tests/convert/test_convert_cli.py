"""The command line's contract: outputs, exit codes, and one-line errors that write nothing."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ddpify, run

SEED = FIXTURES / "convert" / "seeds" / "seed000_single_gpu.py"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    shutil.copy(SEED, path)
    return path


def test_convert_writes_output_and_reports(script: Path, tmp_path: Path) -> None:
    result = ddpify(str(script), "-o", "train_ddp.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "train_ddp.py").read_bytes() == (
        FIXTURES / "convert" / "expected" / SEED.name
    ).read_bytes()
    assert script.read_bytes() == SEED.read_bytes()
    report = result.stderr.decode()
    assert f"{script}:16: DDP004 training DataLoader sharded with DistributedSampler" in report
    assert "launch with: torchrun --standalone --nproc_per_node=gpu train_ddp.py" in report
    assert "--batch per-gpu" in report
    # Written atomically: no temporary file is left beside the output.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py", "train_ddp.py"]


def test_diff_prints_a_unified_diff_and_writes_nothing(script: Path, tmp_path: Path) -> None:
    result = ddpify(str(script), "--diff", cwd=tmp_path)
    assert result.returncode == 0
    diff = result.stdout.decode()
    assert diff.startswith(f"--- a/{script}\n+++ b/{script}\n")
    assert "+    loader.sampler.set_epoch(epoch)\n" in diff
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_check_exits_1_when_it_would_change_and_0_when_not(script: Path, tmp_path: Path) -> None:
    assert ddpify(str(script), "--check", cwd=tmp_path).returncode == 1
    done = FIXTURES / "convert" / "expected" / SEED.name
    assert ddpify(str(done), "--check", cwd=tmp_path).returncode == 0
    assert script.read_bytes() == SEED.read_bytes()


def test_in_place_rewrites_the_input(script: Path, tmp_path: Path) -> None:
    assert ddpify(str(script), "--in-place", cwd=tmp_path).returncode == 0
    assert script.read_bytes() == (FIXTURES / "convert" / "expected" / SEED.name).read_bytes()


def test_an_output_that_is_not_a_regular_file_is_written_into_not_replaced(
    script: Path, tmp_path: Path
) -> None:
    """`-o /dev/null` must leave the device in place (a pipe stands in for it here): the
    atomic rename is for regular files only."""
    import os
    import stat
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_bytes()), daemon=True)
    reader.start()
    result = ddpify(str(script), "-o", str(pipe), cwd=tmp_path)
    reader.join(timeout=30)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert received == [(FIXTURES / "convert" / "expected" / SEED.name).read_bytes()]


def test_a_symbolic_link_stays_a_link_and_its_target_is_written(
    script: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link.py"
    link.symlink_to(script.name)
    assert ddpify(str(link), "--in-place", cwd=tmp_path).returncode == 0
    assert link.is_symlink()
    assert script.read_bytes() == (FIXTURES / "convert" / "expected" / SEED.name).read_bytes()


def test_stdin_to_stdout(tmp_path: Path) -> None:
    result = ddpify("-", cwd=tmp_path, stdin=SEED.read_bytes())
    assert result.returncode == 0
    assert result.stdout == (FIXTURES / "convert" / "expected" / SEED.name).read_bytes()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"def f(:\n    pass\n", "bad.py:1:7: syntax error: invalid syntax"),
        (b"x = '\xff\xfe'\n", "bad.py: cannot decode"),
        (b"# coding: nonsense\nx = 1\n", "bad.py: cannot decode: unknown encoding: nonsense"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "bad.py").write_bytes(content)
    result = ddpify("bad.py", "-o", "out.py", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "out.py").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "missing.py: no such file"),
        (["."], ".: is a directory"),
        (["train.py", "-o", "train.py"], "is the input itself: use --in-place"),
        (["train.py", "-o", "nowhere/out.py"], "the output folder nowhere does not exist"),
        (["train.py", "--diff", "--in-place"], "choose one of"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(
    script: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = ddpify(*args, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert script.read_bytes() == SEED.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_refused_conversion_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "manual.py").write_text(
        "import torch\n\nmodel = torch.nn.Linear(2, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(3):\n"
        "    loss = model(torch.randn(4, 2)).sum()\n    loss.backward()\n    optimizer.step()\n"
    )
    result = ddpify("manual.py", "-o", "out.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "manual.py:7: DDP004 cannot: found no DataLoader to shard" in result.stderr.decode()
    assert not (tmp_path / "out.py").exists()


def test_rules_and_explain(tmp_path: Path) -> None:
    listing = ddpify("rules", cwd=tmp_path).stdout.decode()
    assert "DDP004  distributed-sampler" in listing
    page = ddpify("explain", "ddp004", cwd=tmp_path).stdout.decode()
    assert page.startswith("# DDP004 distributed-sampler")
    assert "## Use instead" in page and "set_epoch(epoch)" in page
    assert ddpify("explain", "DDP999", cwd=tmp_path).returncode == 2


@pytest.mark.parametrize(
    "args", [["--help"], ["{seed}", "-o", "out.py"], ["rules"], ["verify", "--help"]]
)
def test_converting_never_imports_torch(tmp_path: Path, args: list[str]) -> None:
    args = [arg.format(seed=SEED) for arg in args]
    code = (
        "import sys\nfrom ddpify.cli import main\n"
        f"sys.argv = ['ddpify', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = run([sys.executable, "-c", code], cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr.decode()


@pytest.mark.parametrize(
    ("extra", "code", "verdict"),
    [
        ((), 0, "verdict: equivalent (exit 0)"),
        # a learning rate scaled by the world size trains differently from the first step
        (("--scale-lr", "linear"), 1, "verdict: not equivalent (exit 1)"),
    ],
    ids=["equivalent", "lr-scaled-not-equivalent"],
)
def test_verify_after_converting_reports_and_exits_with_the_verdict(
    tmp_path: Path, extra: tuple[str, ...], code: int, verdict: str
) -> None:
    pytest.importorskip("torch")
    shutil.copy(FIXTURES / "convert" / "scripts" / "main_argparse.py", tmp_path / "train.py")
    result = ddpify("train.py", "-o", "train_ddp.py", *extra, "--verify", cwd=tmp_path)
    assert result.returncode == code, result.stderr.decode()[-2000:]
    assert (tmp_path / "train_ddp.py").exists()
    assert verdict in result.stdout.decode()
    assert "DDP003 `model` wrapped in DDP" in result.stderr.decode()


@pytest.mark.parametrize(
    "args",
    [["-", "-o", "x.py", "--verify"], ["train.py", "--verify"], ["train.py", "-o", "x.py", "a"]],
    ids=["stdin", "no-output", "arguments-without-verify"],
)
def test_verify_needs_files_and_arguments_need_verify(script: Path, args: list[str]) -> None:
    result = ddpify(*args, cwd=script.parent, stdin=b"")
    assert result.returncode == 2
    assert result.stderr.decode().count("\n") == 1 and "ddpify: error:" in result.stderr.decode()
    assert not (script.parent / "x.py").exists()


def test_a_diff_of_a_file_without_a_final_newline_applies(tmp_path: Path) -> None:
    """Six of yunjey's tutorials end without a newline: the diff marks the last line the
    way git and patch expect, so `git apply` turns the script into the conversion."""
    source = SEED.read_bytes().rstrip(b"\n")
    (tmp_path / "train.py").write_bytes(source)
    diff = ddpify("train.py", "--diff", cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    assert b"\\ No newline at end of file\n" in diff.stdout
    converted = ddpify("train.py", "-o", "train_ddp.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr
    (tmp_path / "change.diff").write_bytes(diff.stdout)
    applied = run(["git", "apply", "change.diff"], cwd=tmp_path, timeout=60)
    assert applied.returncode == 0, applied.stderr
    assert (tmp_path / "train.py").read_bytes() == (tmp_path / "train_ddp.py").read_bytes()
