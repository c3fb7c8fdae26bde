"""Reading a LibCST tree quickly: its nodes in source order, their parents, their order.

LibCST's visitors rebuild every node they pass through (the same machinery serves
transforms), and `CSTNode.children` is itself computed by such a visit: reading a tree that
way costs about as much as parsing it again, and ParentNodeProvider is one more such pass.
The analysis only reads, so it walks the nodes' fields directly, in one pass that also
records each node's parent and its place in source order (about eight times faster than an
empty `CSTVisitor` on a 400 KB file; see bench/check_speed.py). Whitespace, commas and
parentheses are not visited: no analysis looks at them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import libcst as cst

# Fields that hold only formatting (whitespace, comments, commas, parentheses, newlines).
_FORMATTING = frozenset(
    {
        "lpar", "rpar", "lbracket", "rbracket", "lbrace", "rbrace", "comma", "semicolon",
        "header", "footer", "leading_lines", "lines_after_decorators", "newline",
        "empty_lines", "trailing_whitespace", "leading_whitespace", "equal", "colon",
        "first_colon", "second_colon", "star", "indent", "dot", "relative", "posonly_ind",
    }
)  # fmt: skip
# Where the fields' declaration order is not the order of the source text.
_SOURCE_ORDER: dict[type[cst.CSTNode], tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "name", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "bases", "keywords", "body"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.Arg: ("keyword", "value"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.Parameters: ("posonly_params", "params", "star_arg", "kwonly_params", "star_kwarg"),
}
_fields: dict[type[cst.CSTNode], tuple[str, ...]] = {}


def _child_fields(kind: type[cst.CSTNode]) -> tuple[str, ...]:
    names = _fields.get(kind)
    if names is None:
        names = _SOURCE_ORDER.get(kind) or tuple(
            field.name
            for field in dataclasses.fields(kind)
            if field.name not in _FORMATTING and not field.name.startswith("whitespace")
        )
        _fields[kind] = names
    return names


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The node's children that carry code (not formatting), in source order."""
    found: list[cst.CSTNode] = []
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif isinstance(value, tuple | list):
            found.extend(item for item in value if isinstance(item, cst.CSTNode))
    return found


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and everything under it, parents before children, in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(child_nodes(current)))


def index(module: cst.Module) -> tuple[dict[cst.CSTNode, cst.CSTNode], dict[cst.CSTNode, int]]:
    """Every node's parent, and every node's rank in source order (parents first)."""
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    order: dict[cst.CSTNode, int] = {}
    stack: list[cst.CSTNode] = [module]
    while stack:
        current = stack.pop()
        order[current] = len(order)
        children = child_nodes(current)
        for child in children:
            parents[child] = current
        stack.extend(reversed(children))
    return parents, order


# Shapes the analysis looks for, matched on the nodes' fields. (LibCST's matchers say the
# same, but importing `libcst.matchers` alone costs as much as importing LibCST, which a
# pre-commit hook that checks one file pays on every commit.)
def dotted(node: cst.CSTNode | None) -> str | None:
    """`self.model` for an Attribute chain of Names, `model` for a Name, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def is_name(node: cst.CSTNode | None, *values: str) -> bool:
    """`node` is one of the names `values`: `True`, `self`, ..."""
    return isinstance(node, cst.Name) and node.value in values


def is_attribute(node: cst.CSTNode | None, *attrs: str) -> bool:
    """`node` is `<anything>.<attr>` for one of `attrs`."""
    return isinstance(node, cst.Attribute) and node.attr.value in attrs


def is_method_call(node: cst.CSTNode | None, *attrs: str) -> bool:
    """`node` is `<anything>.<attr>(...)` for one of `attrs`."""
    return isinstance(node, cst.Call) and is_attribute(node.func, *attrs)


def is_lone(
    statement: cst.CSTNode, kind: type[cst.CSTNode] | tuple[type[cst.CSTNode], ...]
) -> bool:
    """`statement` is a line holding one small statement of `kind` (and nothing else)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], kind)
    )


def integer_index(node: cst.CSTNode | None) -> int | None:
    """`N` for `x[N]`, a subscript by one integer literal."""
    if (
        isinstance(node, cst.Subscript)
        and len(node.slice) == 1
        and isinstance(node.slice[0].slice, cst.Index)
        and isinstance(node.slice[0].slice.value, cst.Integer)
    ):
        return int(node.slice[0].slice.value.value)
    return None


def call_arg(call: cst.Call, position: int | None, keyword: str) -> cst.Arg | None:
    """The argument passed as `keyword=` or at `position` (not counting keywords)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    if position is not None and position < len(positional):
        return positional[position]
    return None


def methods(owner: cst.ClassDef) -> list[cst.FunctionDef]:
    """The functions defined in a class's body."""
    return [node for node in owner.body.body if isinstance(node, cst.FunctionDef)]


def catches(handler: cst.ExceptHandler, names: set[str | None]) -> bool:
    """Whether an `except` clause catches one of `names` (None: a bare `except:`)."""
    caught = {dotted(n) for n in walk(handler.type)} if handler.type is not None else {None}
    return bool(caught & names)


def methods_reached(
    start: cst.FunctionDef, by_name: dict[str, cst.FunctionDef]
) -> list[cst.FunctionDef]:
    """`start` and the methods of its class (`by_name`) it calls on `self`, transitively,
    in the order they are found."""
    found, seen = [start], {start.name.value}
    for method in found:  # (grows as it goes)
        for node in walk(method.body):
            if (
                isinstance(node, cst.Attribute)
                and is_name(node.value, "self")
                and node.attr.value in by_name
                and node.attr.value not in seen
            ):
                seen.add(node.attr.value)
                found.append(by_name[node.attr.value])
    return found


def assigned(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """What `a = b = ...` or `a += ...` gives a value (nothing for other nodes)."""
    if isinstance(node, cst.AugAssign):
        return [node.target]
    if isinstance(node, cst.Assign):
        return [target.target for target in node.targets]
    return []


def source_text(node: cst.CSTNode) -> str:
    """The source text of `node` (for messages and rebuilt expressions)."""
    return cst.Module([]).code_for_node(node)


def counted_range(loop: cst.For) -> cst.Call | None:
    """The `range(...)` a loop counts through, directly or numbered (`for batch, i in
    enumerate(range(0, n, bptt))`, the word language model)."""
    iterable = loop.iter
    if (
        isinstance(iterable, cst.Call)
        and is_name(iterable.func, "enumerate")
        and len(iterable.args) == 1
        and not iterable.args[0].star
    ):
        iterable = iterable.args[0].value
    if isinstance(iterable, cst.Call) and is_name(iterable.func, "range"):
        return iterable
    return None
