"""The package's layout keeps its promises (ARCHITECTURE.md): no import cycles, the analysis
layer imports nothing above it, small classes, one call graph, and rules where their code
and name say they are."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpify.rule import CheckRule, ConvertRule, check_rules, convert_rules

ROOT = Path(__file__).resolve().parents[2]
# The source folders and the package each installs as.
PACKAGES = {ROOT / "ddpify": "ddpify", ROOT / "rules": "ddpify.rules"}
MAX_CLASS_LINES = 400


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


MODULES = modules()


def imports(name: str, path: Path) -> Iterator[str]:
    """The package's modules `name` imports, at any depth of its code (lazy imports and
    TYPE_CHECKING blocks too: a cycle through them is still a cycle of the design)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                )
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            if target in MODULES and target != name:
                yield target


GRAPH = {name: set(imports(name, path)) for name, path in MODULES.items()}


def test_the_package_has_no_import_cycle() -> None:
    # Depth-first search; a module on the current path reached again closes a cycle.
    state: dict[str, str] = {}
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in sorted(GRAPH[name]):
            if state.get(target) == "open":
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_analysis_imports_nothing_above_it() -> None:
    for name, targets in GRAPH.items():
        if name.startswith("ddpify.analysis"):
            assert all(target.startswith("ddpify.analysis") for target in targets), name


def test_convert_and_check_never_import_torch() -> None:
    for name, path in MODULES.items():
        if name.startswith("ddpify.verify"):
            continue  # the verifier's child processes are the only code that imports torch
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                spelled = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                assert not (spelled or "").startswith("torch"), name


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_class_is_longer_than_400_lines(name: str) -> None:
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.ClassDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            assert length <= MAX_CLASS_LINES, f"{name}.{node.name}: {length} lines"


def test_calls_are_matched_to_the_script_s_functions_in_one_place() -> None:
    """Only the call graph reads the index of the script's functions by name or the calls
    by name: every other module asks the call graph."""
    readers = re.compile(r"\.functions(\.get\(|\[)|_calls_by_(name|attribute)\b|\bcall_sites\(")
    owners = {"ddpify.analysis.calls", "ddpify.analysis.index"}
    for name, path in MODULES.items():
        if name in owners:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if readers.search(line):
                assert "graph." in line, f"{path.relative_to(ROOT)}:{number}: {line.strip()}"


def test_rules_sit_in_the_folder_of_their_kind_in_a_module_named_after_them() -> None:
    for kind, folder, rules, prefix in (
        (ConvertRule, "convert", convert_rules(), "DDP0"),
        (CheckRule, "check", check_rules(), "DDP1"),
    ):
        for rule in rules:
            assert issubclass(rule, kind)
            assert rule.code.startswith(prefix), rule.code
            module = f"ddpify.rules.{folder}.{rule.name.replace('-', '_')}"
            assert rule.__module__ == module, (rule.code, rule.__module__)


def test_conversion_steps_are_numbered_once_each() -> None:
    steps = [rule.step for rule in convert_rules()]
    assert steps == sorted(set(steps))
