"""Rank-0 guards around file writes that picked their writer by the local rank: what the
checks DDP107 (a writer per node, opt-in) and DDP116 (a global-named local rank) share."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.effects import FILE_WRITES, path_names, root_names
from ddpify.analysis.ranks import GLOBAL_RANK_WORDS, Polarity, RankTest
from ddpify.analysis.tree import dotted, walk
from ddpify.emit import rank_zero_test
from ddpify.rule import CheckContext


def misnamed(test: RankTest) -> bool:
    """The test compares a plain name that says "global rank" (`global_rank`, `rank`) with 0,
    and the name holds the local rank (`self.global_rank = int(os.environ["LOCAL_RANK"])`):
    by its name the analysis would have called it global, so its value made it local."""
    node = test.node
    if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1:
        return False
    for side in (node.left, node.comparisons[0].comparator):
        if isinstance(side, cst.Call) and dotted(side.func) == "int" and side.args:
            side = side.args[0].value
        if isinstance(side, cst.Name | cst.Attribute):
            last = (dotted(side) or "").rsplit(".", 1)[-1].lower()
            if last in GLOBAL_RANK_WORDS:
                return True
    return False


def writes_in_local_guards(anatomy: Anatomy) -> list[tuple[cst.If, RankTest]]:
    """`if <local rank> == 0:` (or the `else:` of `!= 0`) around file writes, a node cache
    read after a barrier left out."""
    found = []
    for node in anatomy.ifs:
        test = anatomy.ranks.test(node.test)
        if test is None or test.kind != "local":
            continue
        branch = node.body if test.polarity is Polarity.ZERO else node.orelse
        if branch is None or not anatomy.effects.writes_files(branch):
            continue
        if not _node_cache(anatomy, node, branch):
            found.append((node, test))
    return found


def _node_cache(anatomy: Anatomy, guard: cst.If, branch: cst.CSTNode) -> bool:
    """`if local_rank == 0: torch.save(x, path)`, then a barrier, then every rank reads `path`:
    a cache each node builds for its own processes. On a node-local disk one writer per node
    is the point, and the global rank would leave the other nodes without the file."""
    written: set[str] = set()
    for statement in walk(branch):
        if (
            isinstance(statement, cst.SimpleStatementLine | cst.With)
            and anatomy.effects.of(statement) in FILE_WRITES
        ):
            written |= path_names(statement)
    if not written:
        return False
    body = list(anatomy.body_of(guard))
    waited = False
    for statement in body[body.index(guard) + 1 :]:
        for call in walk(statement):
            if not isinstance(call, cst.Call):
                continue
            name = (dotted(call.func) or "").rsplit(".", 1)[-1]
            if name in {"barrier", "monitored_barrier"}:
                waited = True
            elif waited and name in READS and any(root_names(arg) & written for arg in call.args):
                return True
    return False


READS = frozenset({"load", "open", "read_text", "read_bytes", "load_state_dict", "from_file"})


def fix_test(ctx: CheckContext, test: RankTest) -> None:
    ctx.add_import("torch.distributed", asname="dist")
    needs_parentheses = isinstance(ctx.anatomy.parent(test.node), cst.BooleanOperation)
    ctx.plan.replace(
        test.node,
        lambda _: rank_zero_test(
            test.admits_no_group or ctx.anatomy.distributed.group_is_optional, needs_parentheses
        ),
    )
