"""The check engine: DDP mistakes in scripts that are already distributed.

It reads one file, parses it once, runs every selected check rule over the shared analysis
(`Anatomy`), drops what a `# noqa` or `# ddpify: ignore[...]` comment silences, and with
`fix=True` applies the fixes the findings carry -- the same edit plan the converter uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddpify.analysis.anatomy import Anatomy
from ddpify.edits import add_imports
from ddpify.rule import CheckContext, CheckRule, Finding, Fix, check_rules
from ddpify.source import decode, parse_source

SUPPRESSION = re.compile(
    r"#\s*(?:noqa(?::\s*(?P<noqa>[A-Z0-9, ]+))?|ddpify:\s*ignore(?:\[(?P<ignore>[A-Z0-9, ]+)\])?)",
    re.IGNORECASE,
)


MAX_FIX_ROUNDS = 3
# Selects every rule, opt-in ones too (as in ruff).
ALL = "ALL"


@dataclass(frozen=True)
class CheckResult:
    findings: list[Finding]
    # With fix=True, the fixed source when any fix applied; else None.
    fixed: bytes | None = None


def selected_rules(
    select: frozenset[str] | None = None,
    ignore: frozenset[str] = frozenset(),
    extend_select: frozenset[str] = frozenset(),
) -> list[type[CheckRule]]:
    """The check rules in force. `select`, `extend_select` and `ignore` take codes or code
    prefixes (`ALL` is every rule); `select=None` is the default set, the rules that flag
    near-certain bugs (`CheckRule.default`), and `extend_select` adds to either."""

    def matches(code: str, prefixes: frozenset[str]) -> bool:
        return any(prefix == ALL or code.startswith(prefix) for prefix in prefixes)

    def chosen(rule: type[CheckRule]) -> bool:
        picked = rule.default if select is None else matches(rule.code, select)
        picked = picked or matches(rule.code, extend_select)
        return picked and not matches(rule.code, ignore)

    return [rule for rule in check_rules() if chosen(rule)]


def check_source(
    source: bytes,
    name: str,
    *,
    select: frozenset[str] | None = None,
    ignore: frozenset[str] = frozenset(),
    extend_select: frozenset[str] = frozenset(),
    fix: bool = False,
) -> CheckResult:
    """Check one file's bytes. Raises `InputError` for input that does not parse.

    Only the rules whose text prefilter (`CheckRule.requires`) the file passes run; a file that
    passes none is decoded but not parsed (its syntax errors are not reported: it cannot
    hold a DDP finding).
    """
    selected = selected_rules(select, ignore, extend_select)
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


def applicable(rules: list[type[CheckRule]], source: bytes) -> list[type[CheckRule]]:
    """The rules whose text prefilter `source` passes: the only ones that can find anything."""
    lowered = source.lower()
    return [rule for rule in rules if rule.may_apply(source, lowered)]


def _run(
    source: bytes, name: str, rules: list[type[CheckRule]]
) -> list[tuple[Finding, Fix | None]]:
    anatomy = Anatomy(parse_source(source, name))
    ctx = CheckContext(anatomy=anatomy)
    for rule in rules:
        ctx.rule = rule
        rule().check(ctx)
    silenced = _suppressions(source)
    kept = [(finding, fixer) for finding, fixer in ctx.found if not _is_silenced(finding, silenced)]
    kept.sort(key=lambda item: (item[0].line, item[0].column, item[0].code))
    return kept


def _apply_fixes(
    source: bytes, name: str, rules: list[type[CheckRule]], found: list[tuple[Finding, Fix | None]]
) -> bytes:
    # Fixes are recorded against a fresh analysis, as the findings were: same tree, same nodes.
    anatomy = Anatomy(parse_source(source, name))
    ctx = CheckContext(anatomy=anatomy)
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
