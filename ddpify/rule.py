"""What a rule is: one class carrying its code, message, documentation and examples.

A rule registers itself by being defined. Conversion rules record edits against the
shared analysis of the script (`Anatomy`) and say what they changed or could not change.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, cast

import libcst as cst

from ddpify.edits import EditPlan
from ddpify.emit import FALLBACK_DEVICE
from ddpify.options import ConvertOptions, Launcher
from ddpify.tree import is_lone, is_name

if TYPE_CHECKING:
    from ddpify.anatomy import Anatomy
    from ddpify.lint import CheckContext


class Kind(str, Enum):
    CHANGED = "changed"
    CANNOT = "cannot"
    INFO = "info"


@dataclass(frozen=True)
class Note:
    """One line of the report: what a rule did, or could not do, at a line of the input."""

    code: str
    line: int
    message: str
    kind: Kind
    # A problem that leaves no safe conversion (every rank would train on the same data,
    # or without gradient synchronisation): then nothing is written at all.
    blocking: bool = False


@dataclass(frozen=True)
class Example:
    """A before/after pair; `after=None` means the rule must leave `before` unchanged."""

    before: str
    after: str | None = None
    # The options the example is converted with; its rule alone is selected.
    options: ConvertOptions = field(default_factory=ConvertOptions)

    def __post_init__(self) -> None:
        object.__setattr__(self, "before", textwrap.dedent(self.before).lstrip("\n"))
        if self.after is not None:
            object.__setattr__(self, "after", textwrap.dedent(self.after).lstrip("\n"))


@dataclass
class ConvertContext:
    """What a conversion rule reads (the analysis, the options) and writes (edits, notes)."""

    anatomy: Anatomy
    options: ConvertOptions
    plan: EditPlan = field(default_factory=EditPlan)
    notes: list[Note] = field(default_factory=list)
    rule: type[Rule] | None = None
    imports: set[tuple[str, str | None, str | None]] = field(default_factory=set)

    def _note(
        self, node: cst.CSTNode | None, message: str, kind: Kind, blocking: bool = False
    ) -> None:
        assert self.rule is not None
        line = self.anatomy.line(node) if node is not None else 1
        self.notes.append(Note(self.rule.code, line, message, kind, blocking))

    def changed(self, node: cst.CSTNode | None, message: str) -> None:
        self._note(node, message, Kind.CHANGED)

    def cannot(self, node: cst.CSTNode | None, message: str, *, blocking: bool = False) -> None:
        """Report what could not be done; `blocking` when the script would be unsafe without it."""
        self._note(node, message, Kind.CANNOT, blocking)

    def info(self, node: cst.CSTNode | None, message: str) -> None:
        self._note(node, message, Kind.INFO)

    def device(self, node: cst.CSTNode) -> cst.BaseExpression:
        """The process's device as seen from `node`: the `device` the setup defines where that
        is visible, else an expression that works anywhere once `set_device` has run."""
        visible = (
            self.in_setup_scope(node)
            and self.anatomy.after_setup(node)
            and not _assigns_device(self.anatomy.statement_of(node))
        )
        if visible:
            return cst.Name("device")
        self.add_import("torch")
        return cst.parse_expression(FALLBACK_DEVICE)

    def in_setup_scope(self, node: cst.CSTNode) -> bool:
        """Whether the names the setup defines (`local_rank`, `device`) are visible at `node`:
        torchrun's setup defines globals; a spawned worker's are its own locals, seen only
        by the module-level code that moved into it."""
        if self.options.launcher is Launcher.TORCHRUN:
            return True
        return self.anatomy.trains_at_module_level and self.anatomy.function_of(node) is None

    def local_rank(self, node: cst.CSTNode) -> str:
        """The local rank as code at `node` can spell it."""
        return "local_rank" if self.in_setup_scope(node) else "torch.cuda.current_device()"

    def add_import(self, module: str, obj: str | None = None, asname: str | None = None) -> None:
        # A set: LibCST repeats an aliased name that is asked for twice.
        self.imports.add((module, obj, asname))


def _assigns_device(statement: cst.CSTNode) -> bool:
    """`device = ...`"""
    if not is_lone(statement, cst.Assign):
        return False
    assert isinstance(statement, cst.SimpleStatementLine)
    targets = cast(cst.Assign, statement.body[0]).targets
    return len(targets) == 1 and is_name(targets[0].target, "device")


class Rule:
    """Base of every rule. The docstring holds *What it does* / *Why* in ruff's style."""

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    fix_safety: ClassVar[str] = ""
    examples: ClassVar[tuple[Example, ...]] = ()

    registry: ClassVar[dict[str, type[Rule]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.code in Rule.registry and Rule.registry[cls.code] is not cls:
            raise ValueError(f"rule code {cls.code} is defined twice")
        Rule.registry[cls.code] = cls

    # A check rule's examples: code it must not flag, and code it flags (with the fixed
    # code as `after` when it has a fix).
    valid: ClassVar[tuple[str, ...]] = ()
    invalid: ClassVar[tuple[Example, ...]] = ()
    # A check rule's text prefilter: regular expressions (or functions of the file's bytes)
    # that must each match somewhere in a file for the rule to find anything in it. They
    # spell the names the rule resolves (an aliased import still spells the name it
    # imports), so a file none of the selected rules can apply to is never parsed. Every
    # invalid example must satisfy them (tested).
    requires: ClassVar[tuple[str | Callable[[bytes], bool], ...]] = ()

    def convert(self, ctx: ConvertContext) -> None:
        """Record this rule's edits for the script in `ctx`."""
        raise NotImplementedError

    def check(self, ctx: CheckContext) -> None:
        """Report this rule's findings (with fixes where it has them) through `ctx`."""
        raise NotImplementedError

    @classmethod
    def converts(cls) -> bool:
        return cls.convert is not Rule.convert

    @classmethod
    def checks(cls) -> bool:
        return cls.check is not Rule.check

    @classmethod
    def may_apply(cls, source: bytes, lowered: bytes | None = None) -> bool:
        """Whether `source` passes this rule's text prefilter (`requires`). `lowered` is
        `source.lower()`, when the caller has it already."""
        for text in cls.requires:
            if callable(text):
                if not text(source):
                    return False
                continue
            words = _words(text)
            if words is None:
                if not _pattern(text).search(source):
                    return False
                continue
            if text.startswith(IGNORE_CASE):
                if lowered is None:
                    lowered = source.lower()
                haystack = lowered
            else:
                haystack = source
            if not any(word in haystack for word in words):
                return False
        return True

    @classmethod
    def documentation(cls) -> str:
        """The rule's page: its docstring, then its examples as *Example* / *Use instead*."""
        parts = [
            f"# {cls.code} {cls.name}",
            "",
            cls.message,
            "",
            textwrap.dedent(cls.__doc__ or ""),
        ]
        for example in (*cls.examples, *cls.invalid):
            if example.after is None:
                continue
            parts += ["## Example", "```python", example.before.rstrip(), "```", ""]
            parts += ["## Use instead", "```python", example.after.rstrip(), "```", ""]
        if cls.fix_safety:
            parts += ["## Fix safety", textwrap.dedent(cls.fix_safety).strip(), ""]
        return "\n".join(parts).strip() + "\n"


IGNORE_CASE = "(?i)"


@functools.cache
def _pattern(text: str) -> re.Pattern[bytes]:
    return re.compile(text.encode())


@functools.cache
def _words(text: str) -> tuple[bytes, ...] | None:
    """`a|b|c` of plain words (lower case after `(?i)`), searched with `in`: many times
    faster than a regular expression. None for anything else."""
    words = text.removeprefix(IGNORE_CASE).split("|")
    if all(re.escape(word) == word for word in words):
        if text.startswith(IGNORE_CASE) and any(word != word.lower() for word in words):
            return None
        return tuple(word.encode() for word in words)
    return None


def all_rules() -> list[type[Rule]]:
    """Every rule, in code order (the order conversion applies them)."""
    try:
        package = importlib.import_module("ddpify.rules")
    except ModuleNotFoundError as error:  # a source checkout's ddpify/ shadowing the install
        raise RuntimeError(
            "ddpify.rules is missing: in a source checkout install with `pip install -e .` "
            "(the rules/ folder installs as ddpify.rules)"
        ) from error
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"ddpify.rules.{module.name}")
    return [Rule.registry[code] for code in sorted(Rule.registry)]
