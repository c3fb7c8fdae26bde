"""Building the code ddpify writes: snippets parsed into nodes that take the script's style."""

from __future__ import annotations

import libcst as cst

# Expressions the emitted code shares, so every rule writes them the same way.
RANK_ZERO = "dist.get_rank() == 0"
WORLD_SIZE = "dist.get_world_size()"
FALLBACK_DEVICE = 'torch.device("cuda" if torch.cuda.is_available() else "cpu")'
FALLBACK_DEVICE_STRING = '"cuda" if torch.cuda.is_available() else "cpu"'


def statements(code: str) -> list[cst.BaseStatement]:
    """Statements from a snippet written with four-space indents.

    Parsed without an explicit indent or newline, they render with the target module's own
    (two-space indents and CRLF endings stay so)."""
    return list(cst.parse_module(code).body)


def statement(code: str) -> cst.BaseStatement:
    (only,) = statements(code)
    return only


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def with_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """`call` with `keyword=value` appended, following the call's own comma style."""
    args = list(call.args)
    new = cst.Arg(value=value, keyword=cst.Name(keyword), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    ))
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # A trailing comma (often one argument per line): the new one goes last, same layout.
        args.append(new.with_changes(comma=last.comma))
        args[-2] = last.with_changes(comma=_comma_like(args[-3] if len(args) > 2 else None, last))
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(new)
    return call.with_changes(args=args)


def _comma_like(previous: cst.Arg | None, last: cst.Arg) -> cst.Comma:
    if previous is not None and isinstance(previous.comma, cst.Comma):
        return previous.comma
    assert isinstance(last.comma, cst.Comma)
    return last.comma
