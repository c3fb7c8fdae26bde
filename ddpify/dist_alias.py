"""The script's own `dist` (a distribution, a distance) next to the conversion's.

Every rule writes `torch.distributed` as `dist`, the name PyTorch's tutorials give it. A
script that gives `dist` a value of its own at module level (`dist = Categorical(logits)` in
an RL loop) would shadow it. The conversion then runs on the script with its own `dist`
set aside under a name nothing else uses (`hide`), and the output gets both back
(`restore`): the conversion's `dist` becomes `torch_dist` (imported so), the script's is
`dist` again, exactly as it was written.
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.metadata import (
    Assignment,
    GlobalScope,
    ImportAssignment,
    MetadataWrapper,
    ScopeProvider,
)

from ddpify.analysis.tree import source_text as code_for
from ddpify.analysis.tree import walk

NAME = "dist"
ALIAS = "torch_dist"
# What DDP001 says when a function's own `dist` is where the conversion needs
# torch.distributed: the conversion is then tried again with that one set aside too.
OWN_DIST = "gives `dist` a value of its own (a distance, a distribution), and the conversion"


def hide(module: cst.Module, *, everywhere: bool = False) -> tuple[cst.Module, str] | None:
    """`module` with every binding and read of the script's own `dist` renamed to a free
    name, and that name; None when nothing is to rename or a binding cannot be renamed
    alone (a parameter some call passes by keyword, a `def`, a `global`, a `from m import
    dist`). A function's own `dist` only `everywhere`: elsewhere
    `torch.distributed` can keep its usual name."""
    source = module.code
    if re.search(rf"\b{NAME}\b", source) is None or any(
        isinstance(node, cst.Global | cst.Nonlocal)
        and any(item.name.value == NAME for item in node.names)
        for node in walk(module)
    ):
        return None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes = {scope for scope in wrapper.resolve(ScopeProvider).values() if scope is not None}
    if not everywhere and not any(
        isinstance(s, GlobalScope) and s.assignments[NAME] for s in scopes
    ):
        return None  # one of a function's own: `dist` stays torch.distributed elsewhere
    passed_by_keyword = any(
        isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == NAME
        for node in walk(module)
    )
    renamed: set[cst.CSTNode] = set()
    for scope in scopes:
        for assignment in scope.assignments[NAME]:
            if isinstance(assignment, ImportAssignment):
                name = _imported_as(assignment.node)
                imported = code_for(assignment.node)
                if name is None or "torch.distributed" in imported or " distributed " in imported:
                    return None  # `from m import dist`; or the script is distributed itself
            elif isinstance(assignment, Assignment) and isinstance(assignment.node, cst.Name):
                name = assignment.node
            elif (
                isinstance(assignment, Assignment)
                and isinstance(assignment.node, cst.Param)
                and not passed_by_keyword
            ):
                name = assignment.node.name  # `def get_radius(dist, nu)`, called positionally
            else:
                return None  # a parameter given by keyword, a def, a class
            renamed.add(name)
            for access in assignment.references:
                if not isinstance(access.node, cst.Name):
                    return None  # read in a string annotation
                renamed.add(access.node)
    if not renamed:
        return None
    hidden, number = "_own_dist", 2
    while hidden in source:
        hidden, number = f"_own_dist{number}", number + 1
    return module.visit(_Renamed(renamed, hidden)), hidden


def restore(module: cst.Module, hidden: str) -> cst.Module:
    """The converted `module` with the conversion's `dist` named `torch_dist` and the
    script's own (`hidden`) named `dist` again."""
    alias, number = ALIAS, 2
    while alias in module.code:
        alias, number = f"{ALIAS}{number}", number + 1
    return module.visit(_Restored(alias, hidden))


def _imported_as(node: cst.CSTNode) -> cst.Name | None:
    """The `dist` of `import torch.distributions as dist` (None for `from m import dist`,
    which has no `as` to rename)."""
    if not isinstance(node, cst.Import | cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
        return None
    for alias in node.names:
        asname = alias.asname.name if alias.asname is not None else None
        if isinstance(asname, cst.Name) and asname.value == NAME:
            return asname
    return None


class _Renamed(cst.CSTTransformer):
    def __init__(self, names: set[cst.CSTNode], hidden: str) -> None:
        self.names = names
        self.hidden = hidden

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        if original_node in self.names:
            return updated_node.with_changes(value=self.hidden)
        return updated_node


class _Restored(cst.CSTTransformer):
    """Renames names only: an attribute (`self.dist`), a keyword (`f(dist=...)`) and an
    imported module's path keep their spelling."""

    def __init__(self, alias: str, hidden: str) -> None:
        self.alias = alias
        self.hidden = hidden
        self.kept: set[cst.Name] = set()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.kept.add(node.attr)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.kept.add(node.keyword)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        self.kept.update(n for n in walk(node.name) if isinstance(n, cst.Name))
        return True

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is not None:
            self.kept.update(n for n in walk(node.module) if isinstance(n, cst.Name))

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        if original_node in self.kept:
            return updated_node
        if original_node.value == NAME:
            return updated_node.with_changes(value=self.alias)
        if original_node.value == self.hidden:
            return updated_node.with_changes(value=NAME)
        return updated_node
