"""An edit plan keyed by the original tree's nodes, applied in one pass.

Rules never transform the tree themselves: they read the one analysis of the original
module and record edits against its nodes. One transformer then applies every edit, so
edits by different rules compose (an inner expression rewritten, its statement guarded).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from ddpify.emit import appended

NodeFn = Callable[[Any], Any]


@dataclass
class EditPlan:
    replacements: dict[cst.CSTNode, list[NodeFn]] = field(default_factory=lambda: defaultdict(list))
    # An entry may be a function, called when the statement is reached: its result can
    # then include what other edits made of the statement's children.
    before: dict[cst.CSTNode, list[cst.BaseStatement | Callable[[], cst.BaseStatement]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    after: dict[cst.CSTNode, list[cst.BaseStatement]] = field(
        default_factory=lambda: defaultdict(list)
    )
    guarded: dict[cst.CSTNode, cst.BaseExpression] = field(default_factory=dict)
    module_tail: list[cst.BaseStatement | Callable[[], cst.BaseStatement]] = field(
        default_factory=list
    )
    moves: dict[cst.CSTNode, list[cst.BaseStatement]] = field(default_factory=dict)
    above_comments: set[cst.CSTNode] = field(default_factory=set)
    tails: dict[cst.CSTNode, Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]]] = field(
        default_factory=dict
    )
    spans: dict[
        cst.CSTNode,
        tuple[cst.CSTNode, Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]]],
    ] = field(default_factory=dict)

    def replace(self, node: cst.CSTNode, fn: NodeFn) -> None:
        """Replace `node` by `fn(updated_node)`; later calls compose on the result."""
        self.replacements[node].append(fn)

    def insert_before(
        self,
        statement: cst.CSTNode,
        new: Sequence[cst.BaseStatement | Callable[[], cst.BaseStatement]],
        *,
        above_comments: bool = False,
        outermost: bool = False,
    ) -> None:
        """Insert `new` before `statement`: below the comments and blank lines above it, or
        with `above_comments`, above them (new definitions that bring their own spacing).
        With `outermost`, before what other edits insert there too (a barrier must come
        before the dataset another rule names just above the statement)."""
        if above_comments:
            self.above_comments.add(statement)
        if outermost:
            self.before[statement][:0] = new
        else:
            self.before[statement].extend(new)

    def insert_after(
        self, statement: cst.CSTNode, new: Sequence[cst.BaseStatement], *, first: bool = False
    ) -> None:
        """Insert `new` after `statement`; with `first`, before what other edits insert
        there too (a barrier that closes a span must come before a DDP wrap placed after
        its last statement, or rank 0 waits in the wrap while the others wait at it)."""
        if first:
            self.after[statement][:0] = new
        else:
            self.after[statement].extend(new)

    def guard(self, statement: cst.CSTNode, test: cst.BaseExpression) -> None:
        """Run `statement` only when `test` holds; neighbours with the same guard share one `if`."""
        self.guarded[statement] = test

    def move(self, statement: cst.CSTNode, into: list[cst.BaseStatement]) -> None:
        """Take `statement` out of its block, fully edited, and append it to `into` (which
        another edit, built later in the same pass, places elsewhere)."""
        self.moves[statement] = into

    def wrap_rest_of_block(
        self,
        statement: cst.CSTNode,
        fn: Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]],
    ) -> None:
        """Replace `statement` and all that follow it in its block by `fn(those statements)`."""
        self.tails[statement] = fn

    def wrap_span(
        self,
        first: cst.CSTNode,
        last: cst.CSTNode,
        fn: Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]],
    ) -> None:
        """Replace the statements from `first` to `last` (one block's), fully edited and with
        what was inserted around them, by `fn(those statements)`: a `with` around them."""
        self.spans[first] = (last, fn)

    def append_to_module(
        self, new: Sequence[cst.BaseStatement | Callable[[], cst.BaseStatement]]
    ) -> None:
        self.module_tail.extend(new)

    def __bool__(self) -> bool:
        return bool(
            self.replacements
            or self.before
            or self.after
            or self.guarded
            or self.module_tail
            or self.tails
            or self.moves
            or self.spans
        )

    def apply(self, module: cst.Module) -> cst.Module:
        result = module.visit(_Applier(self))
        assert isinstance(result, cst.Module)
        return result


def guard_statement(
    statement: cst.SimpleStatementLine | cst.BaseCompoundStatement, test: cst.BaseExpression
) -> cst.If:
    """`if test:` around `statement`, the comments and blank lines above it kept above the `if`."""
    leading = list(statement.leading_lines)
    inner = statement.with_changes(leading_lines=())
    return cst.If(test=test, body=cst.IndentedBlock(body=[inner]), leading_lines=leading)


class _Applier(cst.CSTTransformer):
    def __init__(self, plan: EditPlan) -> None:
        super().__init__()
        self.plan = plan
        self.made_guards: dict[cst.If, cst.BaseExpression] = {}
        self.updated: dict[cst.CSTNode, cst.CSTNode] = {}
        self.span_ends = {last for last, _ in plan.spans.values()} | set(plan.spans)
        self.span_parts: dict[cst.CSTNode, list[cst.CSTNode]] = {}

    def on_leave(self, original_node: Any, updated_node: Any) -> Any:
        result = updated_node
        for fn in self.plan.replacements.get(original_node, ()):
            result = fn(result)
            if isinstance(result, cst.RemovalSentinel):
                return result
        test = self.plan.guarded.get(original_node)
        if test is not None and isinstance(
            result, cst.SimpleStatementLine | cst.BaseCompoundStatement
        ):
            result = guard_statement(result, test)
            self.made_guards[result] = test
        if original_node in self.plan.tails:
            self.updated[original_node] = result
        before = [
            item if isinstance(item, cst.BaseStatement) else item()
            for item in self.plan.before.get(original_node, [])
        ]
        after = self.plan.after.get(original_node, [])
        if before or after:
            parts = result.nodes if isinstance(result, cst.FlattenSentinel) else [result]
            if before and parts and original_node not in self.plan.above_comments:
                # The new statements go between the comments above a statement and the statement.
                first = parts[0]
                before = [
                    before[0].with_changes(leading_lines=first.leading_lines),
                    *before[1:],
                ]
                moved_up = first.with_changes(leading_lines=())
                if isinstance(first, cst.FunctionDef | cst.ClassDef):
                    # a definition keeps its blank lines above it (PEP 8's two), the new
                    # statements before them (no comments: those stay with the new ones)
                    blank = [line for line in first.leading_lines if line.comment is None]
                    moved_up = first.with_changes(leading_lines=blank[-2:])
                if first in self.made_guards:
                    self.made_guards[moved_up] = self.made_guards[first]
                parts = [moved_up, *parts[1:]]
                if original_node in self.updated:
                    self.updated[original_node] = parts[0]
            if after and isinstance(parts[-1], cst.FunctionDef | cst.ClassDef):
                after = [_spaced_like(parts[-1], after[0]), *after[1:]]
            result = cst.FlattenSentinel([*before, *parts, *after])
        if original_node in self.span_ends:
            self.span_parts[original_node] = (
                list(result.nodes) if isinstance(result, cst.FlattenSentinel) else [result]
            )
        if original_node in self.plan.moves:
            moved = result.nodes if isinstance(result, cst.FlattenSentinel) else [result]
            self.plan.moves[original_node].extend(moved)
            return cst.RemovalSentinel.REMOVE
        if isinstance(original_node, cst.IndentedBlock | cst.Module):
            body = self._merge_guards(self._wrap_spans(original_node, list(result.body)))
            for start, fn in self.plan.tails.items():
                new_start = self.updated.get(start)
                index = next((i for i, s in enumerate(body) if s is new_start), None)
                if index is not None:
                    body = [*body[:index], *fn(body[index:])]
            result = result.with_changes(body=body)
        if isinstance(original_node, cst.Module):
            for moved in {id(into): into for into in self.plan.moves.values()}.values():
                moved[:] = self._merge_guards(moved)
        if isinstance(original_node, cst.Module) and self.plan.module_tail:
            tail = [
                item if isinstance(item, cst.BaseStatement) else item()
                for item in self.plan.module_tail
            ]
            result = result.with_changes(body=[*result.body, *tail])
        return result

    def _wrap_spans(
        self, block: cst.IndentedBlock | cst.Module, body: list[cst.BaseStatement]
    ) -> list[cst.BaseStatement]:
        for first, (last, fn) in self.plan.spans.items():
            if first not in block.body:
                continue
            start = self.span_parts.get(first, [None])[0]
            end = self.span_parts.get(last, [None])[-1]
            i = next((k for k, s in enumerate(body) if s is start), None)
            j = next((k for k, s in enumerate(body) if s is end), None)
            if i is not None and j is not None and i <= j:
                body = [*body[:i], *fn(self._merge_guards(body[i : j + 1])), *body[j + 1 :]]
        return body

    def _merge_guards(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        merged: list[cst.BaseStatement] = []
        for statement in body:
            previous = merged[-1] if merged else None
            if (
                isinstance(previous, cst.If)
                and isinstance(statement, cst.If)
                and previous in self.made_guards
                and statement in self.made_guards
                and previous.test.deep_equals(statement.test)
                and not statement.leading_lines
            ):
                assert isinstance(previous.body, cst.IndentedBlock)
                assert isinstance(statement.body, cst.IndentedBlock)
                joined = previous.with_changes(
                    body=previous.body.with_changes(
                        body=[*previous.body.body, *statement.body.body]
                    )
                )
                self.made_guards[joined] = self.made_guards[previous]
                merged[-1] = joined
            else:
                merged.append(statement)
        return merged


def _spaced_like(
    definition: cst.FunctionDef | cst.ClassDef, statement: cst.BaseStatement
) -> cst.BaseStatement:
    """`statement`, placed right after `definition`, with the blank lines the definition has
    above it (PEP 8's two at module level), unless it has lines of its own."""
    if not isinstance(statement, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        return statement
    if statement.leading_lines:
        return statement
    blank = [line for line in definition.leading_lines if line.comment is None]
    return statement.with_changes(leading_lines=blank[-2:] or [cst.EmptyLine()])


def add_imports(
    module: cst.Module, imports: Sequence[tuple[str, str | None, str | None]]
) -> cst.Module:
    """Add `(module, name, alias)` imports with LibCST's `AddImportsVisitor`: merged into an
    existing `from module import ...` (at its end), else added after the last import."""
    if not imports:
        return module
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    class AddImportsAtTheEnd(AddImportsVisitor):
        def leave_ImportFrom(
            self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
        ) -> cst.ImportFrom:
            result = super().leave_ImportFrom(original_node, updated_node)
            if isinstance(result.names, cst.ImportStar) or isinstance(
                updated_node.names, cst.ImportStar
            ):
                return result
            old = list(updated_node.names)
            new = [alias for alias in result.names if alias not in old]
            return result.with_changes(names=appended(old, new)) if new else result

    context = CodemodContext()
    for name, obj, alias in imports:
        AddImportsVisitor.add_needed_import(context, name, obj, alias)
    return AddImportsAtTheEnd(context).transform_module(module)
