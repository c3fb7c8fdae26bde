"""The check engine: DDP mistakes in scripts that are already distributed.

It reads one file, parses it once, runs every selected check rule over the shared analysis
(`Anatomy`), drops what a `# noqa` or `# ddpify: ignore[...]` comment silences, and with
`fix=True` applies the fixes the findings carry -- the same edit plan the converter uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from ddpify.anatomy import Anatomy
from ddpify.edits import EditPlan, add_imports
from ddpify.rule import Rule, all_rules
from ddpify.source import decode, parse_source

# A fix records its edits into the plan, and may schedule imports through the context.
Fix = Callable[["CheckContext"], None]

SUPPRESSION = re.compile(
    r"#\s*(?:noqa(?::\s*(?P<noqa>[A-Z0-9, ]+))?|ddpify:\s*ignore(?:\[(?P<ignore>[A-Z0-9, ]+)\])?)",
    re.IGNORECASE,
)


MAX_FIX_ROUNDS = 3


@dataclass(frozen=True)
class Finding:
    """A mistake at a place in a file: `line` and `column` count from 1."""

    code: str
    line: int
    column: int
    message: str
    fixable: bool = False


@dataclass(frozen=True)
class CheckResult:
    findings: list[Finding]
    # With fix=True, the fixed source when any fix applied; else None.
    fixed: bytes | None = None


@dataclass
class CheckContext:
    """What a check rule reads (the analysis) and writes (findings, and fixes for them)."""

    anatomy: Anatomy
    rule: type[Rule] | None = None
    found: list[tuple[Finding, Fix | None]] = field(default_factory=list)
    plan: EditPlan = field(default_factory=EditPlan)
    imports: set[tuple[str, str | None, str | None]] = field(default_factory=set)

    def report(self, node: cst.CSTNode, message: str | None = None, fix: Fix | None = None) -> None:
        assert self.rule is not None
        line, column = self.anatomy.position(node)
        text = message or self.rule.message
        self.found.append((Finding(self.rule.code, line, column, text, fix is not None), fix))

    def add_import(self, module: str, obj: str | None = None, asname: str | None = None) -> None:
        self.imports.add((module, obj, asname))


def check_rules(
    select: frozenset[str] | None = None, ignore: frozenset[str] = frozenset()
) -> list[type[Rule]]:
    """The check rules in force: `select` and `ignore` take codes or code prefixes."""

    def chosen(code: str) -> bool:
        picked = select is None or any(code.startswith(prefix) for prefix in select)
        return picked and not any(code.startswith(prefix) for prefix in ignore)

    return [rule for rule in all_rules() if rule.checks() and chosen(rule.code)]


def check_source(
    source: bytes,
    name: str,
    *,
    select: frozenset[str] | None = None,
    ignore: frozenset[str] = frozenset(),
    fix: bool = False,
) -> CheckResult:
    """Check one file's bytes. Raises `InputError` for input that does not parse.

    Only the rules whose text prefilter (`Rule.requires`) the file passes run; a file that
    passes none is decoded but not parsed (its syntax errors are not reported: it cannot
    hold a DDP finding).
    """
    selected = check_rules(select, ignore)
    rules = applicable(selected, source)
    if not rules:
        decode(source, name)
        return CheckResult([])
    found = _run(source, name, rules)
    if not fix or not any(fixer for _, fixer in found):
        return CheckResult([finding for finding, _ in found])
    # A fix can expose the next one (a new sampler then needs set_epoch): a few rounds.
    fixed = source
    for _ in range(MAX_FIX_ROUNDS):
        fixed = _apply_fixes(fixed, name, rules, found)
        rules = applicable(selected, fixed)
        found = _run(fixed, name, rules)
        if not any(fixer for _, fixer in found):
            break
    return CheckResult([finding for finding, _ in found], fixed if fixed != source else None)


def applicable(rules: list[type[Rule]], source: bytes) -> list[type[Rule]]:
    """The rules whose text prefilter `source` passes: the only ones that can find anything."""
    lowered = source.lower()
    return [rule for rule in rules if rule.may_apply(source, lowered)]


def _run(source: bytes, name: str, rules: list[type[Rule]]) -> list[tuple[Finding, Fix | None]]:
    anatomy = Anatomy(parse_source(source, name))
    ctx = CheckContext(anatomy)
    for rule in rules:
        ctx.rule = rule
        rule().check(ctx)
    silenced = _suppressions(source)
    kept = [(finding, fixer) for finding, fixer in ctx.found if not _is_silenced(finding, silenced)]
    kept.sort(key=lambda item: (item[0].line, item[0].column, item[0].code))
    return kept


def _apply_fixes(
    source: bytes, name: str, rules: list[type[Rule]], found: list[tuple[Finding, Fix | None]]
) -> bytes:
    # Fixes are recorded against a fresh analysis, as the findings were: same tree, same nodes.
    anatomy = Anatomy(parse_source(source, name))
    ctx = CheckContext(anatomy)
    for rule in rules:
        ctx.rule = rule
        ctx.found = []
        rule().check(ctx)
        wanted = {finding for finding, _ in found}
        for finding, fixer in ctx.found:
            if fixer is not None and finding in wanted:
                fixer(ctx)
    module = add_imports(ctx.plan.apply(anatomy.module), sorted(ctx.imports, key=str))
    return module.bytes


def _suppressions(source: bytes) -> dict[int, frozenset[str] | None]:
    """Line -> the codes silenced there (None: all of them)."""
    silenced: dict[int, frozenset[str] | None] = {}
    if b"#" not in source:
        return silenced
    for number, line in enumerate(source.decode("utf-8", errors="replace").splitlines(), 1):
        match = SUPPRESSION.search(line)
        if match is None:
            continue
        codes = match.group("noqa") or match.group("ignore")
        silenced[number] = (
            frozenset(code.strip().upper() for code in codes.split(",") if code.strip())
            if codes
            else None
        )
    return silenced


def _is_silenced(finding: Finding, silenced: dict[int, frozenset[str] | None]) -> bool:
    if finding.line not in silenced:
        return False
    codes = silenced[finding.line]
    return codes is None or finding.code in codes
