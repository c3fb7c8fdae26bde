"""What a dotted name refers to, when imports alone decide it: the fast path before
LibCST's QualifiedNameProvider.

LibCST's provider needs a scope analysis of the whole module, the costliest question the
checks ask (about twice the parse). Most names they ask about are settled by the imports
alone: in `import torch.distributed as dist` ... `dist.barrier()`, when `dist` is bound by
nothing but imports of the same thing and is only ever read as `dist.<attr>`, `dist(...)`,
an argument or a decorator, then `dist.barrier` is `torch.distributed.barrier` in every
scope. `resolve` answers those; for a name bound any other way (an assignment, a parameter,
a loop target, a relative or star import, imports of different things) it answers None,
and the caller asks LibCST. Tested against the provider on every fixture.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence

import libcst as cst

from ddpify.analysis.tree import dotted

BUILTINS = frozenset(dir(builtins))


class ImportResolver:
    """Resolution by imports of the names in one module, from its `Name` nodes."""

    def __init__(
        self, names: Mapping[str, Sequence[cst.Name]], parents: Mapping[cst.CSTNode, cst.CSTNode]
    ) -> None:
        self._names = names
        self._parents = parents
        self._bound: dict[str, tuple[frozenset[str], bool]] = {}

    def resolve(self, dotted_name: str) -> set[str] | None:
        """The qualified names of `dotted_name` (`a.b.c`), or None when imports do not
        settle it."""
        head, _, rest = dotted_name.partition(".")
        targets, other = self._binding(head)
        if other or len(targets) > 1:
            return None
        if not targets:  # bound nowhere in the module
            return {f"builtins.{dotted_name}"} if head in BUILTINS else set()
        (target,) = targets
        return {f"{target}.{rest}" if rest else target}

    def imported(self, head: str) -> bool:
        """Whether an import anywhere in the module binds `head`."""
        return bool(self._binding(head)[0])

    def cannot_name(
        self, node: cst.CSTNode, names: Collection[str], scopes: Collection[str]
    ) -> bool:
        """Whether `node` certainly names none of `names` (imported names: `module.attr`):
        the variable it starts from is never imported and is not spelled like their
        modules. LibCST's qualified name for such a variable starts with the variable
        itself or with the functions and classes around it (`scopes`: every function and
        class name in the module), so neither may be one of those modules either."""
        root = root_name(node)
        if root is None or self.imported(root):
            return False
        modules = {name.split(".")[0] for name in names}
        return root not in modules and modules.isdisjoint(scopes)

    def _binding(self, head: str) -> tuple[frozenset[str], bool]:
        """What imports bind `head` to, and whether anything else binds it (or might)."""
        if head not in self._bound:
            self._bound[head] = self._find_binding(head)
        return self._bound[head]

    def _find_binding(self, head: str) -> tuple[frozenset[str], bool]:
        targets: set[str] = set()
        other = False
        for name in self._names.get(head, ()):
            parent = self._parents.get(name)
            if isinstance(parent, cst.Attribute):
                if parent.attr is name:
                    continue  # `x.head`: an attribute, not this variable
                holder = self._import_path_holder(parent)
                if holder is None:
                    continue  # `head.x`: read
                if isinstance(holder, cst.ImportAlias) and holder.asname is None:
                    targets.add(head)  # `import head.x` binds head
                continue  # else the module path of a `from` import or an `as` import
            if isinstance(parent, cst.Arg) and parent.keyword is name:
                continue  # `f(head=...)`: a keyword, not this variable
            if (
                (isinstance(parent, cst.Call) and parent.func is name)
                or (isinstance(parent, cst.Arg) and parent.value is name)
                or (isinstance(parent, cst.Decorator) and parent.decorator is name)
            ):
                continue  # read
            if (isinstance(parent, cst.ImportFrom) and parent.module is name) or (
                isinstance(parent, cst.ImportAlias) and parent.asname is not None
            ):
                continue  # `from head import x`, `import head as y`: a module path
            target = self._import_target(name, parent)
            if target is None:
                other = True
            else:
                targets.add(target)
        return frozenset(targets), other

    def _import_path_holder(self, node: cst.Attribute) -> cst.CSTNode | None:
        """The import whose module path `node` is part of, if it is one."""
        current: cst.CSTNode = node
        parent = self._parents.get(current)
        while isinstance(parent, cst.Attribute) and parent.value is current:
            current, parent = parent, self._parents.get(parent)
        if isinstance(parent, cst.ImportAlias) and parent.name is current:
            return parent
        if isinstance(parent, cst.ImportFrom) and parent.module is current:
            return parent
        return None

    def _import_target(self, name: cst.Name, parent: cst.CSTNode | None) -> str | None:
        """What the import that binds `name` here imports, or None if this is not one."""
        alias = parent
        if isinstance(parent, cst.AsName):
            alias = self._parents.get(parent)
            if not isinstance(alias, cst.ImportAlias) or alias.asname is not parent:
                return None  # `with ... as name`, `except ... as name`
        elif not (isinstance(parent, cst.ImportAlias) and parent.name is name):
            return None  # an assignment, a parameter, a loop target, ...
        assert isinstance(alias, cst.ImportAlias)
        statement = self._parents.get(alias)
        imported = dotted(alias.name)
        if imported is None:
            return None
        if isinstance(statement, cst.Import):
            return imported if alias.asname is not None else imported.split(".")[0]
        if isinstance(statement, cst.ImportFrom) and not statement.relative:
            module = dotted(statement.module) if statement.module is not None else None
            return f"{module}.{imported}" if module else None
        return None


def root_name(node: cst.CSTNode) -> str | None:
    """The variable an expression like `a.b[0].c(x).d` starts from: `a`."""
    while isinstance(node, cst.Attribute | cst.Subscript | cst.Call):
        node = node.func if isinstance(node, cst.Call) else node.value
    return node.value if isinstance(node, cst.Name) else None
