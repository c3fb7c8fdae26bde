"""`ddpify check`'s contract: findings, exit codes, selection, suppression, configuration,
which files it walks, unreadable files, --fix.

Most cases run the CLI in this process (a fresh one costs a second of imports each); the
contract's core -- exit codes, output, --fix -- also runs as a real `python -m ddpify`."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES, ddpify
from test_check_formats import assert_valid_sarif

from ddpify.cli import main

# A correct DDP script but for one thing: the sampler never hears of the epoch (DDP101).
MISSING_SET_EPOCH = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def main():
        dist.init_process_group("gloo")
        dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
        loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
        model = DDP(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for x, y in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """
)
EPOCH_LOOP = "    for epoch in range(3):\n"
LINE = MISSING_SET_EPOCH.splitlines(keepends=True).index(EPOCH_LOOP) + 1
FINDING = f":{LINE}:5: DDP101 "
FIXED = MISSING_SET_EPOCH.replace(
    EPOCH_LOOP, EPOCH_LOOP + "        loader.sampler.set_epoch(epoch)\n"
)


def write(path: Path, text: str = MISSING_SET_EPOCH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


Outcome = tuple[int, list[str], list[str]]
Check = Callable[..., Outcome]


def check_in_a_process(*args: str, cwd: Path) -> Outcome:
    """Exit code, stdout lines, stderr lines of `python -m ddpify check ARGS` in `cwd`."""
    result = ddpify("check", *args, cwd=cwd)
    out, err = result.stdout.decode(), result.stderr.decode()
    return result.returncode, out.splitlines(), err.splitlines()


@pytest.fixture
def check(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Check:
    """`ddpify check ARGS` run in `cwd` by this process: exit code, stdout and stderr lines."""

    def run_check(*args: str, cwd: Path) -> Outcome:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["ddpify", "check", *args])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        out, err = capsys.readouterr()
        return code, out.splitlines(), err.splitlines()

    return run_check


def flagged(lines: list[str]) -> list[str]:
    """The files named by DDP101 findings in text output."""
    return sorted(line.split(":")[0] for line in lines if FINDING in line)


# Exit codes and text output


def test_a_finding_is_one_line_and_exit_1(tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    code, out, err = check_in_a_process("train.py", cwd=tmp_path)
    assert code == 1, err
    assert out == [
        f"train.py{FINDING}DistributedSampler without set_epoch(epoch) at the start of each"
        " epoch [*]",
        "Found 1 error (1 fixable with --fix).",
    ]
    assert err == []


def test_correct_scripts_pass_with_exit_0(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "train.py", FIXED)
    assert check("train.py", cwd=tmp_path) == (0, ["All checks passed!"], [])
    code, out, _ = check(str(FIXTURES / "convert" / "scripts" / "already_ddp.py"), cwd=tmp_path)
    assert (code, out) == (0, ["All checks passed!"])


def test_paths_default_to_the_current_folder(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "a.py")
    write(tmp_path / "pkg" / "b.py")
    write(tmp_path / "pkg" / "ok.py", FIXED)
    code, out, _ = check(cwd=tmp_path)
    assert code == 1
    assert flagged(out) == ["a.py", "pkg/b.py"]
    assert out[-1] == "Found 2 errors (2 fixable with --fix)."


def test_many_files_are_checked_in_parallel_with_the_same_output(
    check: Check, tmp_path: Path
) -> None:
    names = [f"train_{number:02}.py" for number in range(12)]
    for name in names:
        write(tmp_path / "many" / name)
    code, out, _ = check("many", cwd=tmp_path)
    assert code == 1
    assert [line.split(":")[0] for line in out[:-1]] == [f"many/{name}" for name in names]
    assert out[-1] == "Found 12 errors (12 fixable with --fix)."


def test_no_python_files_is_exit_0(tmp_path: Path) -> None:
    write(tmp_path / ".venv" / "lib" / "x.py")
    write(tmp_path / "notes.txt", "not python")
    code, out, err = check_in_a_process(cwd=tmp_path)
    assert (code, out, err) == (0, [], ["No Python files to check."])


# Files that cannot be checked


def test_a_syntax_error_is_one_line_and_exit_2_and_other_files_are_still_checked(
    tmp_path: Path,
) -> None:
    write(tmp_path / "bad.py", "import torch.distributed as dist\ndist.init_process_group(:\n")
    write(tmp_path / "train.py")
    code, out, err = check_in_a_process(".", cwd=tmp_path)
    assert code == 2
    assert err == ["ddpify: error: bad.py:2:25: syntax error: invalid syntax"]
    assert flagged(out) == ["train.py"]
    assert out[-1] == "Found 1 error (1 fixable with --fix). 1 file could not be checked."


def test_a_file_no_rule_can_apply_to_is_not_parsed(check: Check, tmp_path: Path) -> None:
    # The text prefilter dismisses it before parsing: its syntax error is not ddpify's to
    # report (it cannot hold a DDP finding), as with any other file without DDP code.
    write(tmp_path / "notes.py", "def f(:\n    pass\n")
    code, out, err = check("notes.py", cwd=tmp_path)
    assert (code, err) == (0, [])
    assert out == ["All checks passed!"]


def test_undecodable_and_missing_files_are_exit_2(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "latin.py").write_bytes(b"x = '\xff\xfe'\n")
    code, out, err = check("latin.py", "missing.py", cwd=tmp_path)
    assert code == 2
    assert len(err) == 2
    assert err[0].startswith("ddpify: error: latin.py: cannot decode")
    assert err[1] == "ddpify: error: missing.py: no such file or folder"
    assert out == ["No errors in the files checked. 2 files could not be checked."]


# Selection and suppression


@pytest.mark.parametrize(
    ("args", "flags"),
    [
        (["--select", "DDP101"], True),
        (["--select", "ddp1"], True),
        (["--select", "DDP101", "--ignore", "DDP101"], False),
        (["--ignore", "DDP101"], False),
        (["--ignore", "DDP10"], False),
        (["--ignore", "DDP102,DDP101"], False),
    ],
)
def test_select_and_ignore_take_codes_and_prefixes(
    check: Check, tmp_path: Path, args: list[str], flags: bool
) -> None:
    write(tmp_path / "train.py")
    code, out, _ = check("train.py", *args, cwd=tmp_path)
    assert (code, bool(flagged(out))) == ((1, True) if flags else (0, False))


def test_an_unknown_code_is_a_usage_error(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    code, out, err = check("train.py", "--select", "DDP101,XYZ9", cwd=tmp_path)
    assert (code, out) == (2, [])
    assert err == [
        "ddpify: error: --select: no check rule matches 'XYZ9'; `ddpify rules` lists them"
    ]


@pytest.mark.parametrize(
    ("comment", "silenced"),
    [
        ("  # noqa", True),
        ("  # noqa: DDP101", True),
        ("  # noqa: E501, DDP101", True),
        ("  # ddpify: ignore[DDP101]", True),
        ("  # noqa: DDP102", False),
        ("  # a comment", False),
    ],
)
def test_noqa_silences_a_line(check: Check, tmp_path: Path, comment: str, silenced: bool) -> None:
    write(
        tmp_path / "train.py",
        MISSING_SET_EPOCH.replace(EPOCH_LOOP, EPOCH_LOOP[:-1] + comment + "\n"),
    )
    code, out, _ = check("train.py", cwd=tmp_path)
    assert (code, bool(flagged(out))) == ((0, False) if silenced else (1, True))


# Configuration: [tool.ddpify] in the nearest pyproject.toml


def configure(folder: Path, table: str) -> None:
    write(
        folder / "pyproject.toml",
        "[project]\nname = 'x'\n\n[tool.ddpify]\n" + textwrap.dedent(table),
    )


def test_config_ignore_and_the_command_line_on_top(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    configure(tmp_path, 'ignore = ["DDP101"]')
    assert check("train.py", cwd=tmp_path)[0] == 0
    # --select replaces the configuration's selection, its ignore included.
    assert check("train.py", "--select", "DDP101", cwd=tmp_path)[0] == 1


def test_config_select(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    configure(tmp_path, 'select = ["DDP101"]')
    assert check("train.py", cwd=tmp_path)[0] == 1
    assert check("train.py", "--ignore", "DDP101", cwd=tmp_path)[0] == 0


def test_config_is_found_upward_and_its_globs_are_relative_to_it(
    check: Check, tmp_path: Path
) -> None:
    write(tmp_path / "src" / "legacy" / "old.py")
    write(tmp_path / "src" / "train.py")
    write(tmp_path / "src" / "gen" / "made.py")
    write(tmp_path / "src" / "tests" / "test_x.py")
    configure(
        tmp_path,
        """
        exclude = ["gen"]
        [tool.ddpify.per-file-ignores]
        "src/legacy/*.py" = ["DDP101"]
        "test_*.py" = ["DDP1"]
        """,
    )
    code, out, err = check(".", cwd=tmp_path / "src")
    assert code == 1, err
    assert flagged(out) == ["train.py"]
    # A file named on the command line is checked even when `exclude` names it...
    code, out, _ = check("gen/made.py", cwd=tmp_path / "src")
    assert flagged(out) == ["gen/made.py"]
    # ...but per-file-ignores always apply.
    assert check("legacy/old.py", cwd=tmp_path / "src")[0] == 0


def test_force_exclude_applies_exclude_to_files_named_on_the_command_line(
    check: Check,
    tmp_path: Path,
) -> None:
    write(tmp_path / "gen" / "made.py")
    write(tmp_path / "train.py")
    configure(tmp_path, 'exclude = ["gen/*.py"]\nforce-exclude = true')
    code, out, _ = check("gen/made.py", "train.py", cwd=tmp_path)
    assert (code, flagged(out)) == (1, ["train.py"])
    assert check("gen/made.py", cwd=tmp_path)[2] == ["No Python files to check."]


def test_a_pyproject_without_tool_ddpify_is_passed_over(check: Check, tmp_path: Path) -> None:
    configure(tmp_path, 'ignore = ["DDP101"]')
    write(tmp_path / "inner" / "pyproject.toml", "[tool.other]\nx = 1\n")
    write(tmp_path / "inner" / "train.py")
    assert check("train.py", cwd=tmp_path / "inner")[0] == 0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('selct = ["DDP101"]', "unknown key 'selct'"),
        ('ignore = "DDP101', "cannot read the configuration"),
        ("ignore = [101]", "ignore must be a list of codes"),
        ('ignore = ["DDP9"]', "no check rule matches 'DDP9'"),
        ('[tool.ddpify.per-file-ignores]\n"a.py" = ["NOPE"]', "no check rule matches 'NOPE'"),
    ],
)
def test_a_bad_config_is_one_line_and_exit_2(
    check: Check, tmp_path: Path, table: str, message: str
) -> None:
    write(tmp_path / "train.py")
    configure(tmp_path, table)
    code, out, err = check("train.py", cwd=tmp_path)
    assert (code, out) == (2, [])
    assert len(err) == 1 and "pyproject.toml" in err[0] and message in err[0], err


# Which files a folder holds


def test_walking_skips_vcs_virtualenvs_build_output_and_caches(
    check: Check, tmp_path: Path
) -> None:
    write(tmp_path / "train.py")
    for skipped in [
        ".git/hooks/x.py",
        ".hg/x.py",
        ".venv/lib/x.py",
        "venv/x.py",
        "env/x.py",
        "myenv/lib/x.py",  # a virtual environment by its pyvenv.cfg
        "build/lib/x.py",
        "dist/x.py",
        "__pycache__/x.py",
        "node_modules/pkg/x.py",
        ".tox/py311/x.py",
        ".nox/x.py",
        "pkg.egg-info/x.py",
    ]:
        write(tmp_path / skipped)
    write(tmp_path / "myenv" / "pyvenv.cfg", "home = /usr/bin\n")
    write(tmp_path / "pkg" / "train.txt")  # not a .py file
    code, out, _ = check(".", cwd=tmp_path)
    assert (code, flagged(out)) == (1, ["train.py"])
    # Named on the command line, a file is checked wherever it lies.
    code, out, _ = check("build/lib/x.py", cwd=tmp_path)
    assert flagged(out) == ["build/lib/x.py"]


def test_a_file_named_twice_is_checked_once(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    out = check("train.py", ".", "./train.py", cwd=tmp_path)[1]
    assert flagged(out) == ["train.py"]


# --fix


def test_fix_rewrites_the_file_and_exits_0_when_nothing_remains(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py")
    os.chmod(script, 0o750)
    code, out, err = check_in_a_process("--fix", "train.py", cwd=tmp_path)
    assert (code, out, err) == (0, ["Found 1 error (1 fixed, 0 remaining)."], [])
    assert script.read_text() == FIXED
    assert script.stat().st_mode & 0o777 == 0o750
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train.py"]
    assert check_in_a_process("train.py", cwd=tmp_path) == (0, ["All checks passed!"], [])


def test_fix_exits_1_when_findings_remain(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "a.py")
    silenced = MISSING_SET_EPOCH.replace(EPOCH_LOOP, EPOCH_LOOP[:-1] + "  # noqa\n")
    write(tmp_path / "b.py", silenced)
    write(tmp_path / "bad.py", "import torch.distributed as dist\ndist.init_process_group(:\n")
    code, out, err = check("--fix", ".", cwd=tmp_path)
    assert code == 2 and len(err) == 1
    assert (tmp_path / "a.py").read_text() == FIXED
    assert (tmp_path / "b.py").read_text() == silenced
    assert out == ["Found 1 error (1 fixed, 0 remaining). 1 file could not be checked."]


def test_fix_leaves_files_without_fixes_byte_identical(check: Check, tmp_path: Path) -> None:
    source = (
        (FIXTURES / "convert" / "scripts" / "already_ddp.py").read_bytes().replace(b"\n", b"\r\n")
    )
    script = tmp_path / "crlf.py"
    script.write_bytes(source)
    assert check("--fix", "crlf.py", cwd=tmp_path)[0] == 0
    assert script.read_bytes() == source


def test_fix_keeps_crlf_endings(check: Check, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_bytes(MISSING_SET_EPOCH.replace("\n", "\r\n").encode())
    assert check("--fix", "train.py", cwd=tmp_path)[0] == 0
    assert script.read_bytes() == FIXED.replace("\n", "\r\n").encode()


# Other formats through the command line


def test_json_format(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    code, out, _ = check("--format", "json", cwd=tmp_path)
    assert code == 1
    assert json.loads("\n".join(out)) == [
        {
            "filename": "train.py",
            "line": LINE,
            "column": 5,
            "code": "DDP101",
            "message": "DistributedSampler without set_epoch(epoch) at the start of each epoch",
            "fixable": True,
            "severity": "error",
        }
    ]


def test_sarif_format_is_valid_with_findings_errors_or_no_files(
    check: Check, tmp_path: Path
) -> None:
    write(tmp_path / "sub" / "train.py")
    code, out, _ = check("--format", "sarif", cwd=tmp_path)
    assert code == 1
    log = json.loads("\n".join(out))
    assert_valid_sarif(log)
    location = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "sub/train.py"
    code, out, _ = check("--format", "sarif", "missing.py", cwd=tmp_path)
    assert code == 2
    assert_valid_sarif(json.loads("\n".join(out)))
    (tmp_path / "empty").mkdir()
    code, out, _ = check("--format", "sarif", cwd=tmp_path / "empty")
    assert code == 0
    assert_valid_sarif(json.loads("\n".join(out)))


def test_github_format(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "train.py")
    code, out, _ = check("--format", "github", cwd=tmp_path)
    assert code == 1
    assert out == [
        f"::error file=train.py,line={LINE},col=5,title=DDP101::"
        "DistributedSampler without set_epoch(epoch) at the start of each epoch"
    ]


# BatchNorm kept per process, on purpose: advice (DDP112), opt-in.
WITH_BATCHNORM = FIXED.replace(
    "torch.nn.Linear(4, 1))", "torch.nn.Sequential(torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1)))"
)


def test_advice_is_opt_in_from_the_command_line_and_the_configuration(
    check: Check, tmp_path: Path
) -> None:
    write(tmp_path / "train.py", WITH_BATCHNORM)
    assert check(cwd=tmp_path)[:2] == (0, ["All checks passed!"])
    for args in (("--extend-select", "DDP112"), ("--select", "ALL"), ("--select", "DDP11")):
        code, out, _ = check(*args, cwd=tmp_path)
        assert code == 1 and [line.split()[1] for line in out[:-1]] == ["DDP112"], args
    write(tmp_path / "pyproject.toml", '[tool.ddpify]\nextend-select = ["DDP112"]\n')
    code, out, _ = check(cwd=tmp_path)
    assert code == 1 and "DDP112" in out[0]
    assert check("--ignore", "DDP112", cwd=tmp_path)[0] == 0
    # --select replaces the configuration's extend-select.
    assert check("--select", "DDP101", cwd=tmp_path)[0] == 0


def test_severity_reaches_github_and_sarif(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "train.py", WITH_BATCHNORM)
    code, out, _ = check("--select", "ALL", "--format", "github", cwd=tmp_path)
    assert code == 1 and out[0].startswith("::notice file=train.py,")
    code, out, _ = check("--select", "ALL", "--format", "sarif", cwd=tmp_path)
    log = json.loads("\n".join(out))
    (result,) = log["runs"][0]["results"]
    assert result["level"] == "note"
    rules = {rule["id"]: rule for rule in log["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["DDP112"]["defaultConfiguration"] == {"level": "note", "enabled": False}


def test_an_unknown_format_is_a_usage_error(check: Check, tmp_path: Path) -> None:
    assert check("--format", "xml", cwd=tmp_path)[0] == 2


# The other subcommands still work, and --help tells the truth


def test_help_rules_and_explain(tmp_path: Path) -> None:
    help_text = ddpify("check", "--help", cwd=tmp_path).stdout.decode()
    options = ("--fix", "--select", "--extend-select", "--ignore", "--format", "--diff")
    options += ("--statistics", "--exit-zero", "--stdin-filename", "text|json|sarif|github")
    for option in options:
        assert option in help_text
    assert "ddpify check" in ddpify("--help", cwd=tmp_path).stdout.decode()
    rules = ddpify("rules", cwd=tmp_path)
    listed = {line.split()[0]: line.split()[2:4] for line in rules.stdout.decode().splitlines()}
    assert rules.returncode == 0
    assert listed["DDP101"] == ["default", "error"]
    assert listed["DDP112"] == ["opt-in", "note"]
    assert listed["DDP004"][0] == "convert"
    explained = ddpify("explain", "ddp101", cwd=tmp_path)
    assert explained.returncode == 0
    assert explained.stdout.decode().startswith("# DDP101 ")


# What users expect from a linter: --version, stdin, --diff, --exit-zero, --statistics


def test_version_needs_no_script(tmp_path: Path) -> None:
    from ddpify import __version__

    result = ddpify("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == f"ddpify {__version__}\n"


def test_stdin_is_checked_under_the_name_it_is_given(tmp_path: Path) -> None:
    source = MISSING_SET_EPOCH.encode()
    result = ddpify("check", "-", "--stdin-filename", "src/train.py", cwd=tmp_path, stdin=source)
    assert result.returncode == 1
    assert result.stdout.decode().splitlines()[0].startswith(f"src/train.py{FINDING}")
    # Its per-file-ignores apply, from the configuration found for that name.
    write(tmp_path / "pyproject.toml", '[tool.ddpify.per-file-ignores]\n"src/*.py" = ["DDP101"]\n')
    again = ddpify("check", "-", "--stdin-filename", "src/train.py", cwd=tmp_path, stdin=source)
    assert again.returncode == 0, again.stdout.decode()
    anonymous = ddpify("check", "-", cwd=tmp_path, stdin=source)
    assert anonymous.stdout.decode().startswith(f"-{FINDING}")


def test_fix_from_stdin_writes_the_fixed_source_to_stdout(tmp_path: Path) -> None:
    result = ddpify("check", "-", "--fix", cwd=tmp_path, stdin=MISSING_SET_EPOCH.encode())
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == FIXED
    assert "1 fixed, 0 remaining" in result.stderr.decode()


def test_diff_previews_the_fixes_and_writes_nothing(check: Check, tmp_path: Path) -> None:
    script = write(tmp_path / "train.py")
    code, out, err = check("--diff", cwd=tmp_path)
    assert code == 1
    assert out[:2] == ["--- a/train.py", "+++ b/train.py"]
    assert "+        loader.sampler.set_epoch(epoch)" in out
    assert err == ["Would fix 1 error."]
    assert script.read_text() == MISSING_SET_EPOCH
    write(tmp_path / "train.py", FIXED)
    assert check("--diff", cwd=tmp_path) == (0, [], ["Would fix 0 errors."])
    assert check("--diff", "--fix", cwd=tmp_path)[0] == 2


def test_exit_zero_and_statistics(check: Check, tmp_path: Path) -> None:
    write(tmp_path / "a.py")
    write(tmp_path / "b.py")
    code, out, _ = check("--exit-zero", cwd=tmp_path)
    assert code == 0 and len(out) == 3
    code, out, _ = check("--statistics", cwd=tmp_path)
    assert code == 1
    assert out == [
        "    2  DDP101  [*] DistributedSampler without set_epoch(epoch) at the start of each epoch",
        "Found 2 errors (2 fixable with --fix).",
    ]
    assert check("-", "a.py", cwd=tmp_path)[0] == 2  # stdin alone, or files
