"""Rendering a `CheckReport` as text, JSON, SARIF 2.1.0 or GitHub Actions annotations.

Each renderer returns the whole output as a string; the CLI prints it. Files that could not
be checked are not part of it: the CLI reports them on stderr (SARIF also records them as
tool execution notifications, so a code-scanning upload shows the run was incomplete).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ddpify import __version__
from ddpify.options import OutputFormat as OutputFormat
from ddpify.rule import Finding, Severity, check_rules
from ddpify.workspace import CheckReport

SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
SARIF_VERSION = "2.1.0"
FALLBACK_INFORMATION_URI = "https://pypi.org/project/ddpify/"


# GitHub's annotation command for each severity.
GITHUB_COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "notice"}


def severity(code: str) -> Severity:
    return {rule.code: rule.severity for rule in check_rules()}.get(code, Severity.ERROR)


def render(report: CheckReport, output_format: OutputFormat) -> str:
    renderer = {
        OutputFormat.TEXT: render_text,
        OutputFormat.JSON: render_json,
        OutputFormat.SARIF: render_sarif,
        OutputFormat.GITHUB: render_github,
    }[output_format]
    return renderer(report)


def render_text(report: CheckReport) -> str:
    """`path:line:col: CODE message`, ` [*]` when `--fix` can fix it, then a summary."""
    lines = [
        f"{path}:{finding.line}:{finding.column}: {finding.code} {finding.message}"
        + (" [*]" if finding.fixable else "")
        for path, finding in report.findings
    ]
    lines.append(summary(report))
    return "\n".join(lines) + "\n"


def render_statistics(report: CheckReport) -> str:
    """`--statistics`: one line per rule, most findings first: `count  CODE  [*] message`
    (`[*]` when `--fix` fixes some of them), then the summary."""
    counts: dict[str, list[Finding]] = {}
    for _, finding in report.findings:
        counts.setdefault(finding.code, []).append(finding)
    messages = {rule.code: rule.message for rule in check_rules()}
    lines = [
        f"{len(found):>5}  {code}  {'[*]' if any(f.fixable for f in found) else '   '} "
        f"{messages.get(code, found[0].message)}"
        for code, found in sorted(counts.items(), key=lambda item: (-len(item[1]), item[0]))
    ]
    lines.append(summary(report))
    return "\n".join(lines) + "\n"


def summary(report: CheckReport) -> str:
    remaining = len(report.findings)
    if report.fixed:
        total = _count(report.fixed + remaining, "error")
        line = f"Found {total} ({report.fixed} fixed, {remaining} remaining)."
    elif remaining:
        fixable = f" ({report.fixable} fixable with --fix)" if report.fixable else ""
        line = f"Found {_count(remaining, 'error')}{fixable}."
    elif report.errors:
        line = "No errors in the files checked."
    else:
        return "All checks passed!"
    if report.errors:
        line += f" {_count(len(report.errors), 'file')} could not be checked."
    return line


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def render_json(report: CheckReport) -> str:
    entries = [
        {
            "filename": path,
            "line": finding.line,
            "column": finding.column,
            "code": finding.code,
            "message": finding.message,
            "fixable": finding.fixable,
            "severity": severity(finding.code).value,
        }
        for path, finding in report.findings
    ]
    return json.dumps(entries, indent=2) + "\n"


def render_github(report: CheckReport) -> str:
    """GitHub Actions workflow commands: each finding annotates its line in the PR."""
    lines = [
        f"::{GITHUB_COMMANDS[severity(finding.code)]} file={_property(path)},"
        f"line={finding.line},col={finding.column},"
        f"title={_property(finding.code)}::{_data(finding.message)}"
        for path, finding in report.findings
    ]
    return "".join(line + "\n" for line in lines)


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def render_sarif(report: CheckReport) -> str:
    """One SARIF 2.1.0 run: the rules in force, one result per finding."""
    rules = list(report.rules)
    # Every finding's rule is listed, whatever the report was built with.
    found = {finding.code for _, finding in report.findings}
    listed = {rule.code for rule in rules}
    rules += [rule for rule in check_rules() if rule.code in found - listed]
    index = {rule.code: position for position, rule in enumerate(rules)}
    driver: dict[str, Any] = {
        "name": "ddpify",
        "version": __version__,
        "semanticVersion": __version__,
        "informationUri": information_uri(),
        "rules": [
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.message},
                "fullDescription": {"text": rule.documentation()},
                "help": {"text": rule.documentation(), "markdown": rule.documentation()},
                "defaultConfiguration": {"level": rule.severity.value, "enabled": rule.default},
            }
            for rule in rules
        ],
    }
    results = [
        {
            "ruleId": finding.code,
            "ruleIndex": index[finding.code],
            "level": severity(finding.code).value,
            "message": {"text": finding.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": artifact_uri(path)},
                        "region": {"startLine": finding.line, "startColumn": finding.column},
                    }
                }
            ],
        }
        for path, finding in report.findings
    ]
    invocation: dict[str, Any] = {"executionSuccessful": not report.errors}
    if report.errors:
        invocation["toolExecutionNotifications"] = [
            {"level": "error", "message": {"text": error}} for error in report.errors
        ]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": driver},
                "invocations": [invocation],
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def artifact_uri(path: str) -> str:
    """The file as SARIF names it: a relative POSIX path (relative to the current folder),
    or a `file:` URI for a file outside it."""
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return absolute.as_uri()


def information_uri() -> str:
    """The project's home page from the installed package's metadata, if it names one."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls: list[str] = metadata("ddpify").get_all("Project-URL") or []
    except PackageNotFoundError:
        return FALLBACK_INFORMATION_URI
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() in {"homepage", "home", "documentation", "repository"}:
            return url.strip()
    return FALLBACK_INFORMATION_URI
