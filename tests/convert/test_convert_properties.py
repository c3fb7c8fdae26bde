"""Properties over many variants of a script: comments survive, output parses, once is enough."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpify.convert import convert_source
from ddpify.options import ConvertOptions, Launcher

LINES = (FIXTURES / "convert" / "seeds" / "seed000_single_gpu.py").read_text().splitlines()
COMMENT = st.text(alphabet="abcdefghij XYZ_-:#!é", min_size=1, max_size=20)


@settings(max_examples=12, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(LINES)), COMMENT), max_size=6))
def test_comments_are_kept_and_output_converts_once(inserts: list[tuple[int, str]]) -> None:
    lines = list(LINES)
    for position, text in sorted(inserts, reverse=True):
        # A comment line takes the indentation of the line it precedes.
        following = lines[position] if position < len(lines) else ""
        indent = following[: len(following) - len(following.lstrip())]
        lines.insert(position, f"{indent}# {text}")
    source = ("\n".join(lines) + "\n").encode()
    result = convert_source(source, "train.py", ConvertOptions())
    output = result.output.decode()
    ast.parse(output)
    for _, text in inserts:
        assert f"# {text}" in output
    again = convert_source(result.output, "train.py", ConvertOptions())
    assert again.output == result.output


SCRIPTS = sorted([*FIXTURES.glob("convert/scripts/*.py"), *FIXTURES.glob("convert/seeds/*.py")])


@settings(max_examples=15, deadline=None)
@given(
    st.sampled_from(SCRIPTS),
    st.lists(st.integers(0, 200), min_size=1, max_size=3),
    st.sampled_from(list(Launcher)),
)
def test_scripts_with_lines_missing_never_crash_the_converter(
    path: Path, deleted: list[int], launcher: Launcher
) -> None:
    """Real scripts are messier than fixtures: with lines gone, the converter still either
    converts to code that parses, leaves the file alone, or refuses; it never crashes."""
    lines = path.read_text().splitlines(keepends=True)
    for index in sorted({i % len(lines) for i in deleted}, reverse=True):
        del lines[index]
    source = "".join(lines)
    try:
        ast.parse(source)
    except SyntaxError:
        return
    result = convert_source(source.encode(), path.name, ConvertOptions(launcher=launcher))
    ast.parse(result.output)
    assert result.changed or result.output == source.encode()
