"""Which code runs on rank 0 only: the tests that single out rank 0, and the guards they make.

Scripts spell "only on the main process" in many ways: `rank == 0`, `dist.get_rank() == 0`,
`args.local_rank in [-1, 0]`, `rank <= 0`, `not rank`, a flag (`master_process = ddp_rank == 0`),
a helper (`def is_main_process(): return get_rank() == 0`), an early exit (`if rank != 0:
return`), the `else:` of a test for the other ranks, a decorator whose wrapper calls the
function on rank 0 only (`@master_only`), an object made on rank 0 only (`saver = None` /
`if is_primary(args): saver = Saver()`, then `if saver is not None:`). The answers follow the
script's own assignments and functions; conventional names (`is_main_process`, `master_only`,
`get_rank`, ...) decide only for helpers defined in another file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal

import libcst as cst

from ddpify.analysis.calls import MAX_DEPTH, CallGraph
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.tree import dotted, is_name, walk
from ddpify.analysis.values import Values

RankKind = Literal["global", "local"]

GLOBAL_RANK_WORDS = frozenset({"rank", "global_rank", "world_rank", "rank_id"})
LOCAL_RANK_WORDS = frozenset({"local_rank", "gpu_id", "gpu", "device_id", "local_process_index"})
# Helpers and flags defined elsewhere (a utils module) that are true on the main process only.
MAIN_PROCESS_NAMES = frozenset(
    {
        "is_main_process",
        "is_master",
        "is_master_process",
        "master_process",
        "is_main",
        "main_process",
        "is_rank_zero",
        "is_rank0",
        "rank_zero",
        "rank0",
        "is_primary",
        "is_global_zero",
        "is_chief",
    }
)
LOCAL_MAIN_PROCESS_NAMES = frozenset(
    {"is_local_master", "is_local_main_process", "is_local_primary"}
)
# Decorators, defined elsewhere, that run the function they decorate on rank 0 only.
RANK_ZERO_DECORATORS = frozenset(
    {"master_only", "rank_zero_only", "main_process_only", "rank0_only"}
)
RANK_GETTERS: dict[str, RankKind] = {
    "get_rank": "global",
    "get_global_rank": "global",
    "get_local_rank": "local",
}
ENVIRONMENT_RANKS: dict[str, RankKind] = {"RANK": "global", "LOCAL_RANK": "local"}
EXITS = frozenset({"exit", "sys.exit", "os._exit", "quit"})


class Polarity(Enum):
    ZERO = "true on rank 0 only"
    OTHERS = "true on every rank but 0"

    def flipped(self) -> Polarity:
        return Polarity.OTHERS if self is Polarity.ZERO else Polarity.ZERO


@dataclass(frozen=True)
class RankTest:
    """A test on the rank: where it is written, which rank it reads, which way it points."""

    polarity: Polarity
    # "global": one process in the job; "local": one process per node (`local_rank == 0`).
    kind: RankKind
    # The comparison (or name) that reads the rank: what a report points at and a fix replaces.
    node: cst.BaseExpression
    # Written in place (`if rank == 0:`), not reached through a flag or a helper.
    direct: bool = True
    # Also true when there is no process group (`local_rank in [-1, 0]`, `rank <= 0`).
    admits_no_group: bool = False


class Ranks:
    """Rank tests and rank-0 guards in one module."""

    def __init__(self, index: SourceIndex, graph: CallGraph, values: Values) -> None:
        self.index = index
        self.graph = graph
        self.values = values
        self._guards: dict[cst.CSTNode, cst.CSTNode | None] = {}

    # ----- tests ------------------------------------------------------------------------
    def test(self, expr: cst.BaseExpression, depth: int = 0) -> RankTest | None:
        """What `expr`, used as a condition, says about the rank; None when it says nothing
        this analysis can establish."""
        if depth > MAX_DEPTH:
            return None
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            inner = self.test(expr.expression, depth)
            if inner is not None:
                return replace(inner, polarity=inner.polarity.flipped())
            kind = self.rank_kind(expr.expression, depth)  # `not rank`: rank 0 is falsy
            if kind == "global":  # `not args.gpu` means "no GPU given", not "rank 0"
                return RankTest(Polarity.ZERO, kind, expr)
            return None
        if isinstance(expr, cst.BooleanOperation):
            # `rank == 0 and epoch % 5 == 0`, `not dist.is_initialized() or rank == 0`: the
            # operand that tests the rank decides (an `or` with anything else is taken as
            # that: the finding it could cost is worse than the one it could miss).
            found = None
            for operand in (expr.left, expr.right):
                found = found or self.test(operand, depth)
            if (
                found is not None
                and found.kind == "local"
                and isinstance(expr.operator, cst.And)
                and any(_tests_node_zero(operand) for operand in (expr.left, expr.right))
            ):  # `node_rank == 0 and local_rank == 0`: the first process of the first node
                return replace(found, kind="global", node=expr, direct=False)
            return found
        if isinstance(expr, cst.Comparison):
            return self._comparison(expr, depth)
        if isinstance(expr, cst.Call):
            return self._call(expr, depth)
        if isinstance(expr, cst.Name | cst.Attribute):
            return self._flag(expr, depth)
        return None

    def rank_kind(self, expr: cst.BaseExpression, depth: int = 0) -> RankKind | None:
        """Whether `expr` evaluates to the global or the local rank (else None)."""
        if depth > MAX_DEPTH:
            return None
        index = self.index
        if isinstance(expr, cst.Call):
            if index.is_call_to(expr, {"torch.distributed.get_rank"}):
                return "global"
            func = dotted(expr.func)
            if func in {"int", "str"} and expr.args:
                return self.rank_kind(expr.args[0].value, depth + 1)
            if func is not None and func.endswith((".get", "getenv")) and expr.args:
                return _environment_kind(expr.args[0].value)  # os.environ.get("RANK", 0)
            function = self.graph.callee(expr)
            if function is not None:
                return self._agreed(
                    [self.rank_kind(value, depth + 1) for value in self._returns(function)]
                )
            last = (func or "").rsplit(".", 1)[-1]
            return RANK_GETTERS.get(last)
        if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
            key = expr.slice[0].slice
            if not isinstance(key, cst.Index):
                return None
            if isinstance(key.value, cst.SimpleString):  # os.environ["RANK"]
                return _environment_kind(key.value)
            if isinstance(key.value, cst.Integer) and isinstance(expr.value, cst.Call):
                # `get_dist_info()[0]`, as `rank, _ = get_dist_info()` reads it.
                function = self.graph.callee(expr.value)
                if function is None:
                    return None
                position = int(key.value.value)
                elements = [
                    value.elements[position].value
                    for value in self._returns(function)
                    if isinstance(value, cst.Tuple) and position < len(value.elements)
                ]
                return self._agreed([self.rank_kind(value, depth + 1) for value in elements])
            return None
        if isinstance(expr, cst.IfExp):  # `dist.get_rank() if initialized else 0`
            branches = [b for b in (expr.body, expr.orelse) if _literal_int(b) is None]
            return self._agreed([self.rank_kind(branch, depth + 1) for branch in branches])
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo):
            # `rank % ngpus_per_node`: 0 on the first process of every node.
            return "local" if self.rank_kind(expr.left, depth + 1) else None
        if isinstance(expr, cst.Name | cst.Attribute):
            # Where the value comes from decides over the name it is given
            # (`self.global_rank = int(os.environ["LOCAL_RANK"])` is a local rank).
            traced = self._agreed(
                [self.rank_kind(value, depth + 1) for value in self._values_of(expr)]
            )
            if traced is not None:
                return traced
            last = (dotted(expr) or "").rsplit(".", 1)[-1].lower()
            if last in LOCAL_RANK_WORDS:
                return "local"
            if last in GLOBAL_RANK_WORDS:
                return "global"
        return None

    def _comparison(self, expr: cst.Comparison, depth: int) -> RankTest | None:
        if len(expr.comparisons) != 1:
            return None
        target = expr.comparisons[0]
        operator, left, right = target.operator, expr.left, target.comparator
        if isinstance(operator, cst.Is | cst.IsNot) and is_name(right, "None"):
            # `saver is not None`, where `saver` is made on rank 0 only.
            if not self._made_on_rank_zero(left, depth):
                return None
            polarity = Polarity.ZERO if isinstance(operator, cst.IsNot) else Polarity.OTHERS
            return RankTest(polarity, "global", expr, direct=False)
        if isinstance(operator, cst.In | cst.NotIn):
            values = _literal_ints(right)
            kind = self.rank_kind(left, depth)
            if kind is None or values is None or 0 not in values or max(values) > 0:
                return None
            polarity = Polarity.ZERO if isinstance(operator, cst.In) else Polarity.OTHERS
            return RankTest(polarity, kind, expr, admits_no_group=min(values) < 0)
        flipped = _literal_int(left) is not None
        rank_side, constant_side = (right, left) if flipped else (left, right)
        constant = _literal_int(constant_side)
        kind = self.rank_kind(rank_side, depth)
        if constant is None or kind is None:
            return None
        compared = _compare_polarity(type(operator), constant, flipped)
        if compared is None:
            return None
        return RankTest(
            compared,
            kind,
            expr,
            admits_no_group=not isinstance(operator, cst.Equal | cst.NotEqual),
        )

    def _call(self, call: cst.Call, depth: int) -> RankTest | None:
        func = dotted(call.func)
        if func == "bool" and call.args:
            return self.test(call.args[0].value, depth)
        function = self.graph.callee(call)
        if function is not None:
            values = self._returns(function)
            tests = [self.test(value, depth + 1) for value in values]
            found = _agreed_test(tests, Polarity.ZERO)
            return None if found is None else replace(found, node=call, direct=False)
        return _named_flag(call, (func or "").rsplit(".", 1)[-1])

    def _flag(self, expr: cst.Name | cst.Attribute, depth: int) -> RankTest | None:
        """A name holding a rank test (`master_process = rank == 0`), or an object made on
        rank 0 only, used as a condition; a rank alone (`if rank:`) is true on the others."""
        kind = self.rank_kind(expr, depth)
        if kind == "global":
            return RankTest(Polarity.OTHERS, kind, expr)
        if kind == "local":
            return None  # `if args.gpu:`, `if local_rank:` (-1 is truthy): "is it set?"
        values = [
            value for value in self._values_of(expr) if not is_name(value, "True", "None", "False")
        ]
        getter = self._property(expr)
        if getter is not None:  # `@property def is_master(self): return self.rank == 0`
            values = self._returns(getter)
        if values:
            tests = [self.test(value, depth + 1) for value in values]
            found = _agreed_test(tests, Polarity.ZERO)
            if found is not None:
                return replace(found, node=expr, direct=False)
            if self._made_on_rank_zero(expr, depth):
                return RankTest(Polarity.ZERO, "global", expr, direct=False)
            return None
        return _named_flag(expr, (dotted(expr) or "").rsplit(".", 1)[-1])

    def _made_on_rank_zero(self, expr: cst.BaseExpression, depth: int) -> bool:
        """Every value `expr` is given, but None, is made under a rank-0 guard."""
        values = [value for value in self._values_of(expr) if not is_name(value, "None")]
        return bool(values) and all(
            self._guards_value(value, depth + 1) is not None for value in values
        )

    def _guards_value(self, value: cst.BaseExpression, depth: int) -> cst.CSTNode | None:
        if isinstance(value, cst.IfExp) and is_name(value.orelse, "None"):
            test = self.test(value.test, depth)
            if test is not None and test.polarity is Polarity.ZERO:
                return value
        return self.guard(value, depth)

    # ----- guards -----------------------------------------------------------------------
    def guard(self, node: cst.CSTNode, depth: int = 0) -> cst.CSTNode | None:
        """What keeps `node` on rank 0 only: an `if` around it, an early exit before it, a
        decorator, or a guard around every call of the function it is in. None if nothing
        does, or the analysis cannot tell."""
        if depth > MAX_DEPTH:
            return None
        if node in self._guards:  # known, or being found (a cycle through calls: no guard)
            return self._guards[node]
        self._guards[node] = None
        found = self._find_guard(node, depth)
        self._guards[node] = found
        return found

    def _find_guard(self, node: cst.CSTNode, depth: int) -> cst.CSTNode | None:
        index = self.index
        previous = node
        for ancestor in index.ancestors(node):
            if isinstance(ancestor, cst.If | cst.IfExp):
                test = self.test(ancestor.test, depth)
                if test is not None:
                    wanted = previous is ancestor.body and test.polarity is Polarity.ZERO
                    other = previous is ancestor.orelse and test.polarity is Polarity.OTHERS
                    if wanted or other:
                        return ancestor
            elif isinstance(ancestor, cst.IndentedBlock | cst.Module) and isinstance(
                previous, cst.BaseStatement
            ):
                exit_ = self._early_exit(ancestor.body, previous, depth)
                if exit_ is not None:
                    return exit_
            elif isinstance(ancestor, cst.FunctionDef):
                return self._function_guard(ancestor, depth)
            previous = ancestor
        return None

    def _early_exit(
        self, body: Sequence[cst.BaseStatement], statement: cst.BaseStatement, depth: int
    ) -> cst.If | None:
        """`if rank != 0: return` earlier in the same block."""
        for sibling in body:
            if sibling is statement:
                return None
            if not isinstance(sibling, cst.If) or sibling.orelse is not None:
                continue
            if not exits(sibling.body):
                continue
            test = self.test(sibling.test, depth)
            if test is not None and test.polarity is Polarity.OTHERS:
                return sibling
        return None

    def _function_guard(self, function: cst.FunctionDef, depth: int) -> cst.CSTNode | None:
        for decorator in function.decorators:
            if self._rank_zero_decorator(decorator.decorator, depth):
                return decorator
        sites = self.graph.call_sites(function)
        if not sites:
            return None
        first = None
        for site in sites:
            found = self.guard(site, depth + 1)
            if found is None:
                return None
            first = first or found
        return first

    def _rank_zero_decorator(self, decorator: cst.BaseExpression, depth: int) -> bool:
        """`@master_only`: the wrapper it returns calls the function on rank 0 only."""
        target = decorator.func if isinstance(decorator, cst.Call) else decorator
        name = dotted(target)
        if name is None:
            return False
        definitions = self.graph.defined(name)
        if len(definitions) != 1:
            return name.rsplit(".", 1)[-1] in RANK_ZERO_DECORATORS
        definition = definitions[0]
        params = definition.params.params
        if not params:
            return False
        wrapped = params[0].name.value
        calls = [
            node
            for node in walk(definition.body)
            if isinstance(node, cst.Call) and is_name(node.func, wrapped)
        ]
        return bool(calls) and all(self.guard(call, depth + 1) is not None for call in calls)

    # ----- following the script's own names and functions --------------------------------
    def _values_of(self, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The values the script gives the name `expr` reads (`Values.values_of`)."""
        name = dotted(expr)
        if name is None:
            return []
        return [value for value, _ in self.values.values_of(name, self.index.function_of(expr))]

    def _property(self, expr: cst.BaseExpression) -> cst.FunctionDef | None:
        """The `@property` of the script's class that `self.name` reads, if it is one."""
        if not (isinstance(expr, cst.Attribute) and is_name(expr.value, "self")):
            return None
        scope = self.index.function_of(expr)
        owner = self.index.class_of(scope) if scope is not None else None
        for method in owner.body.body if owner is not None else ():
            if (
                isinstance(method, cst.FunctionDef)
                and method.name.value == expr.attr.value
                and any(is_name(d.decorator, "property") for d in method.decorators)
            ):
                return method
        return None

    def _returns(self, function: cst.FunctionDef) -> list[cst.BaseExpression]:
        """What `function` returns, its `0`/`False`/`True` fallbacks (no process group) left
        out."""
        return [
            value
            for value in self.graph.returned_values(function)
            if _literal_int(value) != 0 and not is_name(value, "True", "False")
        ]

    @staticmethod
    def _agreed(kinds: list[RankKind | None]) -> RankKind | None:
        if kinds and all(kind == kinds[0] for kind in kinds):
            return kinds[0]
        return None


NODE_WORDS = frozenset({"node_rank", "group_rank", "machine_rank", "node_id", "nodeid"})
NODE_VARIABLES = frozenset({"NODE_RANK", "GROUP_RANK", "SLURM_NODEID"})


def _tests_node_zero(expr: cst.BaseExpression) -> bool:
    """`node_rank == 0`, `int(os.environ["GROUP_RANK"]) == 0`: the first node."""
    if not isinstance(expr, cst.Comparison) or len(expr.comparisons) != 1:
        return False
    target = expr.comparisons[0]
    if not isinstance(target.operator, cst.Equal):
        return False
    sides = (expr.left, target.comparator)
    if not any(_literal_int(side) == 0 for side in sides):
        return False
    for side in sides:
        for node in walk(side):
            name = dotted(node) if isinstance(node, cst.Name | cst.Attribute) else None
            if name is not None and name.rsplit(".", 1)[-1].lower() in NODE_WORDS:
                return True
            if isinstance(node, cst.SimpleString) and node.evaluated_value in NODE_VARIABLES:
                return True
    return False


def _agreed_test(tests: list[RankTest | None], polarity: Polarity) -> RankTest | None:
    """The first of `tests` when every one of them has `polarity`."""
    if tests and all(test is not None and test.polarity is polarity for test in tests):
        return tests[0]
    return None


def _named_flag(node: cst.BaseExpression, name: str) -> RankTest | None:
    if name in MAIN_PROCESS_NAMES:
        return RankTest(Polarity.ZERO, "global", node, direct=False)
    if name in LOCAL_MAIN_PROCESS_NAMES:
        return RankTest(Polarity.ZERO, "local", node, direct=False)
    return None


def _environment_kind(key: cst.BaseExpression) -> RankKind | None:
    if not isinstance(key, cst.SimpleString):
        return None
    text = key.evaluated_value
    if not isinstance(text, str):
        return None
    return ENVIRONMENT_RANKS.get(text.upper())


def _literal_int(node: cst.BaseExpression) -> int | None:
    """`0`, `-1`, `"0"` (as compared with an environment variable) as numbers."""
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if (
        isinstance(node, cst.UnaryOperation)
        and isinstance(node.operator, cst.Minus)
        and isinstance(node.expression, cst.Integer)
    ):
        return -int(node.expression.value, 0)
    if isinstance(node, cst.SimpleString) and node.evaluated_value in {"0", "-1"}:
        return int(str(node.evaluated_value))
    return None


def _literal_ints(node: cst.BaseExpression) -> list[int] | None:
    """`[-1, 0]`, `{-1, 0}`, `(0,)` as numbers."""
    if not isinstance(node, cst.List | cst.Tuple | cst.Set):
        return None
    values = [_literal_int(element.value) for element in node.elements]
    if not values or any(value is None for value in values):
        return None
    return [value for value in values if value is not None]


# (operator, constant) -> polarity, for `rank <op> constant`; the mirror for `constant <op> rank`.
_POLARITY: dict[tuple[type[cst.BaseCompOp], int], Polarity] = {
    (cst.Equal, 0): Polarity.ZERO,
    (cst.NotEqual, 0): Polarity.OTHERS,
    (cst.LessThanEqual, 0): Polarity.ZERO,
    (cst.LessThan, 1): Polarity.ZERO,
    (cst.GreaterThan, 0): Polarity.OTHERS,
    (cst.GreaterThanEqual, 1): Polarity.OTHERS,
}
_MIRROR: dict[type[cst.BaseCompOp], type[cst.BaseCompOp]] = {
    cst.Equal: cst.Equal,
    cst.NotEqual: cst.NotEqual,
    cst.LessThan: cst.GreaterThan,
    cst.GreaterThan: cst.LessThan,
    cst.LessThanEqual: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.LessThanEqual,
}


def _compare_polarity(
    operator: type[cst.BaseCompOp], constant: int, flipped: bool
) -> Polarity | None:
    if flipped:
        mirrored = _MIRROR.get(operator)
        if mirrored is None:
            return None
        operator = mirrored
    return _POLARITY.get((operator, constant))


def exits(body: cst.BaseSuite) -> bool:
    """The block ends the function, the loop's turn or the process."""
    last: cst.CSTNode
    if isinstance(body, cst.SimpleStatementSuite):
        last = body.body[-1]
    else:
        statement = body.body[-1]
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        last = statement.body[-1]
    if isinstance(last, cst.Return | cst.Raise | cst.Continue | cst.Break):
        return True
    return (
        isinstance(last, cst.Expr)
        and isinstance(last.value, cst.Call)
        and dotted(last.value.func) in EXITS
    )
