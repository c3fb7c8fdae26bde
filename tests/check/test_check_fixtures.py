"""Whole scripts for the checker: each broken one is flagged with exactly its expected
findings (`x.txt` beside `x.py`, `line:col CODE message`), correct ones with none."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FIXTURES

from ddpify.check import check_source
from ddpify.convert import convert_source
from ddpify.options import ConvertOptions
from ddpify.rule import check_rules

ALL = frozenset({"ALL"})
BROKEN = sorted(FIXTURES.glob("check/broken/*.py"))
NESTED_GUARD = re.compile(
    rb"if [^\n]*dist\.get_rank\(\) == 0:\n[ \t]+if [^\n]*dist\.get_rank\(\) == 0:"
)
CORRECT = sorted(
    [
        FIXTURES / "convert" / "scripts" / "already_ddp.py",
        # Correct DDP scripts in the idioms of well-known public code (rank-0 flags and
        # helpers, early returns, barrier pairs, hooks, IterableDatasets, ...).
        *FIXTURES.glob("check/clean/*.py"),
        *FIXTURES.glob("convert/expected/*.py"),
        *FIXTURES.glob("convert/expected_spawn/*.py"),
    ]
)


def render(path: Path, source: bytes | None = None, select: frozenset[str] | None = ALL) -> str:
    """The findings, every rule selected (opt-in ones too) unless `select` says otherwise."""
    result = check_source(source or path.read_bytes(), path.name, select=select)
    return "".join(f"{f.line}:{f.column} {f.code} {f.message}\n" for f in result.findings)


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.name)
def test_broken_scripts_get_exactly_their_findings(path: Path) -> None:
    assert render(path) == path.with_suffix(".txt").read_text()


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.name)
def test_the_default_set_reports_the_findings_of_its_rules_only(path: Path) -> None:
    default = {rule.code for rule in check_rules() if rule.default}
    expected = path.with_suffix(".txt").read_text().splitlines(keepends=True)
    assert render(path, select=None) == "".join(
        line for line in expected if line.split()[1] in default
    )


@pytest.mark.parametrize("path", CORRECT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_correct_ddp_scripts_and_the_converters_outputs_are_clean(path: Path) -> None:
    assert render(path) == ""


def test_fix_repairs_the_official_tutorial_and_leaves_what_has_no_fix() -> None:
    path = FIXTURES / "check" / "broken" / "tutorial_torchrun.py"
    result = check_source(path.read_bytes(), path.name, select=ALL, fix=True)
    assert result.fixed is not None
    text = result.fixed.decode()
    assert (
        "            self.train_data.sampler.set_epoch(epoch)\n            self._run_epoch" in text
    )
    assert "if dist.get_rank() == 0 and epoch % self.save_every == 0:" in text
    assert "import torch.distributed as dist\n" in text
    assert [f.code for f in result.findings] == ["DDP108"]
    assert render(path, result.fixed).splitlines() == [
        "51:20 DDP108 torch.load without map_location: every rank loads onto the GPU it was "
        "saved from"
    ]


def test_noqa_and_ddpify_ignore_silence_a_line() -> None:
    path = FIXTURES / "check" / "broken" / "seed000_handwritten_ddp.py"
    lines = path.read_text().splitlines(keepends=True)
    lines[12] = lines[12].rstrip("\n") + "  # noqa: DDP110\n"
    lines[14] = lines[14].rstrip("\n") + "  # ddpify: ignore[DDP109]\n"
    assert render(path, "".join(lines).encode()) == ""
    lines[12] = lines[12].replace("# noqa: DDP110", "# noqa: DDP999")
    assert [line.split()[1] for line in render(path, "".join(lines).encode()).splitlines()] == [
        "DDP110"
    ]


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.name)
def test_fixing_a_broken_script_leaves_code_that_compiles_and_nothing_fixable(path: Path) -> None:
    result = check_source(path.read_bytes(), path.name, select=ALL, fix=True)
    if result.fixed is None:
        assert not any(finding.fixable for finding in result.findings)
        return
    compile(result.fixed, path.name, "exec")
    again = check_source(result.fixed, path.name, select=ALL)
    assert not any(finding.fixable for finding in again.findings), again.findings
    # A fix never nests a guard in the one it just wrote.
    assert not NESTED_GUARD.search(result.fixed)
    assert [f.code for f in again.findings] == [f.code for f in result.findings]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("check/clean/*.py")), ids=lambda p: p.name)
def test_the_converter_leaves_scripts_already_distributed_as_they_are(path: Path) -> None:
    result = convert_source(path.read_bytes(), path.name, ConvertOptions())
    assert not result.changed and result.output == path.read_bytes()
