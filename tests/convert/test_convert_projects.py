"""Scripts that hand their model to helpers in other files of their project."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, ddpify, torchrun

from ddpify.convert import convert_source
from ddpify.options import ConvertOptions

SEGMENTER = FIXTURES / "convert" / "projects" / "segmenter"


def convert(path: Path) -> tuple[bytes, list[str]]:
    result = convert_source(path.read_bytes(), path.name, ConvertOptions(), path)
    assert not result.refused, [note.message for note in result.problems]
    return result.output, [note.message for note in result.notes]


def test_helpers_that_read_the_models_attributes_get_the_bare_model() -> None:
    output, notes = convert(SEGMENTER / "train.py")
    assert output == (SEGMENTER / "train.expected.py").read_bytes()
    assert "`weighted_loss()` (utils/loss.py) reads `.n_classes`: it gets the bare model" in notes
    assert "`evaluate()` (evaluate.py) reads `.n_classes`: it gets the bare model" in notes
    again = convert_source(output, "train.py", ConvertOptions(), SEGMENTER / "train.py")
    assert again.output == output


def test_without_the_path_the_helpers_are_not_read() -> None:
    """From stdin nothing says where the helpers are: the model is passed as it was."""
    source = (SEGMENTER / "train.py").read_bytes()
    result = convert_source(source, "-", ConvertOptions())
    assert b"evaluate(model, val_loader, device)" in result.output


def test_the_cli_reads_the_helpers_beside_the_script(tmp_path: Path) -> None:
    project = tmp_path / "segmenter"
    shutil.copytree(SEGMENTER, project)
    result = ddpify("train.py", "-o", "train_ddp.py", cwd=project)
    assert result.returncode == 0, result.stderr.decode()
    assert (project / "train_ddp.py").read_bytes() == (SEGMENTER / "train.expected.py").read_bytes()


def test_a_helper_that_trains_and_reads_attributes_is_refused(tmp_path: Path) -> None:
    (tmp_path / "steps.py").write_text(
        "def train_step(model, images, masks, optimizer):\n"
        "    loss = model(images).sum() / model.n_classes\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from steps import train_step\n"
        "from torch.utils.data import DataLoader\n\n"
        "def main():\n"
        "    loader = DataLoader(dataset, shuffle=True)\n"
        "    model = Net().to('cuda')\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for epoch in range(3):\n"
        "        for images, masks in loader:\n"
        "            loss = model(images).sum()\n"
        "            loss.backward()\n"
        "            train_step(model, images, masks, optimizer)\n\n"
        "main()\n"
    )
    result = convert_source(script.read_bytes(), "train.py", ConvertOptions(), script)
    assert result.refused
    (problem,) = result.problems
    assert problem.line == 13
    assert problem.message.startswith("`train_step()` (steps.py) reads `.n_classes` of the model")


def test_a_helper_that_only_uses_what_ddp_serves_gets_the_wrapper(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text(
        "import torch\n\n"
        "def count(model):\n"
        "    model.eval()\n"
        "    return sum(p.numel() for p in model.parameters())\n"
    )
    script = tmp_path / "train.py"
    source = (SEGMENTER / "train.py").read_text()
    script.write_text(
        source.replace("from evaluate import evaluate\n", "from helpers import count\n")
        .replace("score = evaluate(model, val_loader, device)", "score = count(model)")
        .replace("from utils.loss import weighted_loss\n", "import torch.nn.functional as F\n")
        .replace(
            "weighted_loss(model(images), masks, model)", "F.cross_entropy(model(images), masks)"
        )
    )
    output, _ = convert(script)
    assert b"score = count(model)\n" in output


def test_the_converted_project_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    project = tmp_path / "segmenter"
    shutil.copytree(SEGMENTER, project)
    result = torchrun(["train.expected.py"], cwd=project, timeout=240)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    printed = [line for line in result.stdout.decode().splitlines() if line.startswith("epoch")]
    assert len(printed) == 3, printed  # rank 0 only
    import torch

    state = torch.load(project / "segmenter.pt", weights_only=True)
    assert sorted(state) == ["body.0.bias", "body.0.weight", "head.bias", "head.weight"]
