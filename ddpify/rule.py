"""What a rule is. There are two kinds, each with its own base class, registry and context:

- a `ConvertRule` (DDP0xx) is one step of the conversion: it records edits against the
  analysis of a single-GPU script and says what it changed or could not change. The
  converter runs them in the order of their `step`.
- a `CheckRule` (DDP1xx) reports mistakes in code that is already distributed, each finding
  with an optional fix (edits of the same kind). Its `requires` is a text prefilter: a file
  that lacks the text is never parsed for it.

A rule is one class that carries its code, name, message, documentation (ruff's headings)
and examples; it registers itself by being defined, and a code is taken once across both
kinds. The rule modules live in `ddpify.rules.convert` and `ddpify.rules.check`, one module
per rule, named after the rule.
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

from ddpify.analysis.tree import is_lone, is_name
from ddpify.edits import EditPlan
from ddpify.emit import FALLBACK_DEVICE
from ddpify.options import ConvertOptions, Launcher

if TYPE_CHECKING:
    from ddpify.analysis.anatomy import Anatomy


class Severity(str, Enum):
    """How sure a check's finding is to be a bug; SARIF's result levels."""

    # The job hangs, crashes or trains wrong.
    ERROR = "error"
    # Wrong in common set-ups (several nodes, a resume, a checkpoint read elsewhere).
    WARNING = "warning"
    # Advice: correct code may keep it on purpose.
    NOTE = "note"


class NoteKind(str, Enum):
    CHANGED = "changed"
    CANNOT = "cannot"
    INFO = "info"


@dataclass(frozen=True)
class Note:
    """One line of the conversion's report: what a rule did, or could not do, at a line."""

    code: str
    line: int
    message: str
    kind: NoteKind
    # A problem that leaves no safe conversion (every rank would train on the same data,
    # or without gradient synchronisation): then nothing is written at all.
    blocking: bool = False


@dataclass(frozen=True)
class Finding:
    """A check's finding: a mistake at a place in a file; `line` and `column` count from 1."""

    code: str
    line: int
    column: int
    message: str
    fixable: bool = False


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


# ----- contexts: what a rule reads and writes ------------------------------------------
@dataclass(kw_only=True)
class RuleContext:
    """What every rule reads (the analysis) and writes (edits to it, imports to add)."""

    anatomy: Anatomy
    plan: EditPlan = field(default_factory=EditPlan)
    imports: set[tuple[str, str | None, str | None]] = field(default_factory=set)

    def add_import(self, module: str, obj: str | None = None, asname: str | None = None) -> None:
        # A set: LibCST repeats an aliased name that is asked for twice.
        self.imports.add((module, obj, asname))


@dataclass(kw_only=True)
class ConvertContext(RuleContext):
    """What a conversion rule reads (the analysis, the options) and writes (edits, notes)."""

    options: ConvertOptions
    notes: list[Note] = field(default_factory=list)
    rule: type[ConvertRule] | None = None

    def _note(
        self, node: cst.CSTNode | None, message: str, kind: NoteKind, blocking: bool = False
    ) -> None:
        assert self.rule is not None
        line = self.anatomy.line(node) if node is not None else 1
        note = Note(self.rule.code, line, message, kind, blocking)
        if note not in self.notes:  # a node reached twice (two schedulers read one length)
            self.notes.append(note)

    def changed(self, node: cst.CSTNode | None, message: str) -> None:
        self._note(node, message, NoteKind.CHANGED)

    def cannot(self, node: cst.CSTNode | None, message: str, *, blocking: bool = False) -> None:
        """Report what could not be done; `blocking` when the script would be unsafe without it."""
        self._note(node, message, NoteKind.CANNOT, blocking)

    def info(self, node: cst.CSTNode | None, message: str) -> None:
        self._note(node, message, NoteKind.INFO)

    def device(self, node: cst.CSTNode) -> cst.BaseExpression:
        """The process's device as seen from `node`: the `device` the setup defines where that
        is visible, else an expression that works anywhere once `set_device` has run."""
        visible = (
            self.in_setup_scope(node)
            and self.anatomy.script.after_setup(node)
            and not _assigns_device(self.anatomy.statement_of(node))
            and self._device_made_before(node)
        )
        if visible:
            return cst.Name("device")
        self.add_import("torch")
        return cst.parse_expression(FALLBACK_DEVICE)

    def _device_made_before(self, node: cst.CSTNode) -> bool:
        """Where the script has a module-level `device` of its own, the setup leaves it to
        the script: at module level it exists only once the script's assignment has run
        (pointnet.pytorch loads `--model` three lines before it: round-36 audit A
        pointnet_feature_transform_next_enumerate_b, NameError)."""
        anatomy = self.anatomy
        if "device" not in anatomy.module_names or anatomy.function_of(node) is not None:
            return True
        return any(
            anatomy.precedes(value, node) for value in anatomy.values.assignments("device", None)
        )

    def in_setup_scope(self, node: cst.CSTNode) -> bool:
        """Whether the names the setup defines (`local_rank`, `device`) are visible at `node`:
        torchrun's setup defines globals; a spawned worker's are its own locals, seen only
        by the module-level code that moved into it."""
        if self.options.launcher is Launcher.TORCHRUN:
            return True
        return self.anatomy.script.trains_at_module_level and self.anatomy.function_of(node) is None

    def local_rank(self, node: cst.CSTNode) -> str:
        """The local rank as code at `node` can spell it."""
        return "local_rank" if self.in_setup_scope(node) else "torch.cuda.current_device()"


def _assigns_device(statement: cst.CSTNode) -> bool:
    """`device = ...`"""
    if not is_lone(statement, cst.Assign):
        return False
    assert isinstance(statement, cst.SimpleStatementLine)
    targets = cast(cst.Assign, statement.body[0]).targets
    return len(targets) == 1 and is_name(targets[0].target, "device")


# A check's fix records its edits into the plan, and may schedule imports through the context.
Fix = Callable[["CheckContext"], None]


@dataclass(kw_only=True)
class CheckContext(RuleContext):
    """What a check rule reads (the analysis) and writes (findings, and fixes for them)."""

    rule: type[CheckRule] | None = None
    found: list[tuple[Finding, Fix | None]] = field(default_factory=list)

    def report(self, node: cst.CSTNode, message: str | None = None, fix: Fix | None = None) -> None:
        assert self.rule is not None
        line, column = self.anatomy.position(node)
        text = message or self.rule.message
        self.found.append((Finding(self.rule.code, line, column, text, fix is not None), fix))


# ----- the rules -------------------------------------------------------------------------
class Rule:
    """What both kinds of rule carry. The docstring holds *What it does* / *Why is this
    bad?* in ruff's style."""

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    fix_safety: ClassVar[str] = ""

    # Every rule of both kinds, by code; each kind keeps its own registry too.
    _codes: ClassVar[dict[str, type[Rule]]] = {}
    registry: ClassVar[dict[str, type[Rule]]]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            return  # a kind of rule, not a rule
        if Rule._codes.get(cls.code, cls) is not cls:
            raise ValueError(f"rule code {cls.code} is defined twice")
        Rule._codes[cls.code] = cls
        cls.registry[cls.code] = cls

    @classmethod
    def pages_examples(cls) -> tuple[Example, ...]:
        """The examples its documentation shows."""
        return ()

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
        for example in cls.pages_examples():
            if example.after is None:
                continue
            parts += ["## Example", "```python", example.before.rstrip(), "```", ""]
            parts += ["## Use instead", "```python", example.after.rstrip(), "```", ""]
        if cls.fix_safety:
            parts += ["## Fix safety", textwrap.dedent(cls.fix_safety).strip(), ""]
        return "\n".join(parts).strip() + "\n"


class ConvertRule(Rule):
    """A step of the conversion (DDP0xx): `convert` records its edits and notes."""

    registry: ClassVar[dict[str, type[Rule]]] = {}
    # Where it runs in the conversion; every step has its own number.
    step: ClassVar[int]
    # Before/after pairs (after None: left as it is), converted with this rule alone.
    examples: ClassVar[tuple[Example, ...]] = ()

    def prepare(self, ctx: ConvertContext) -> None:
        """Before the analysis the other steps read: statements this step adds to the script
        for that analysis to see as the script's own (a training loader another file makes,
        made again where the script gets it). The engine applies them and analyses again."""

    def refuse(self, ctx: ConvertContext) -> None:
        """Before any rule runs: report, as a blocking problem, what leaves this step no
        safe way to convert the script at all (so that no rule runs)."""

    def convert(self, ctx: ConvertContext) -> None:
        """Record this rule's edits for the script in `ctx`."""
        raise NotImplementedError

    def review(self, ctx: ConvertContext, output: cst.Module) -> None:
        """After every rule's edits are applied: report, as blocking problems, what the
        converted module shows those edits together got wrong (at the original's lines)."""

    @classmethod
    def pages_examples(cls) -> tuple[Example, ...]:
        return cls.examples


class CheckRule(Rule):
    """A check of distributed code (DDP1xx): `check` reports findings, with fixes."""

    registry: ClassVar[dict[str, type[Rule]]] = {}
    # Code it must not flag, and code it flags (with the fixed code as `after` when it has
    # a fix).
    valid: ClassVar[tuple[str, ...]] = ()
    invalid: ClassVar[tuple[Example, ...]] = ()
    # The text prefilter: regular expressions (or functions of the file's bytes) that must
    # each match somewhere in a file for the rule to find anything in it. They spell the
    # names the rule resolves (an aliased import still spells the name it imports), so a
    # file none of the selected rules can apply to is never parsed. Every invalid example
    # must satisfy them (tested).
    requires: ClassVar[tuple[str | Callable[[bytes], bool], ...]] = ()
    # On in the default set (near-certain bugs, as ruff's defaults), or opt-in (advice, or
    # wrong only in some set-ups: `--select` / `extend-select`); `selection` says why.
    default: ClassVar[bool] = True
    severity: ClassVar[Severity] = Severity.ERROR
    selection: ClassVar[str]

    def check(self, ctx: CheckContext) -> None:
        """Report this rule's findings (with fixes where it has them) through `ctx`."""
        raise NotImplementedError

    @classmethod
    def pages_examples(cls) -> tuple[Example, ...]:
        return cls.invalid

    @classmethod
    def documentation(cls) -> str:
        on = "On by default" if cls.default else f"Opt-in (`--extend-select {cls.code}`)"
        default = f"## Default\n{on}, severity {cls.severity.value}: {cls.selection.strip()}\n"
        return super().documentation() + "\n" + default

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


def convert_rules() -> list[type[ConvertRule]]:
    """The conversion's rules, in the order it runs them (their `step`)."""
    _load("convert")
    rules = [cast(type[ConvertRule], rule) for rule in ConvertRule.registry.values()]
    return sorted(rules, key=lambda rule: rule.step)


def check_rules() -> list[type[CheckRule]]:
    """Every check rule, in code order."""
    _load("check")
    return [cast(type[CheckRule], CheckRule.registry[code]) for code in sorted(CheckRule.registry)]


def all_rules() -> list[type[Rule]]:
    """Every rule of both kinds, in code order."""
    rules: list[type[Rule]] = [*convert_rules(), *check_rules()]
    return sorted(rules, key=lambda rule: rule.code)


@functools.cache
def _load(kind: str) -> None:
    """Import every rule module of one kind (`ddpify.rules.convert`, `ddpify.rules.check`)."""
    try:
        package = importlib.import_module(f"ddpify.rules.{kind}")
    except ModuleNotFoundError as error:  # a source checkout's ddpify/ shadowing the install
        raise RuntimeError(
            "ddpify.rules is missing: in a source checkout install with `pip install -e .` "
            "(the rules/ folder installs as ddpify.rules)"
        ) from error
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
