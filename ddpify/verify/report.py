"""Render a verification: a readable table, or JSON for machines."""

from __future__ import annotations

import json
from typing import Any

from ddpify.verify.judge import Outcome, Status
from ddpify.verify.runner import Verification

MARKS = {
    Status.PASS: "pass",
    Status.FAIL: "FAIL",
    Status.NOT_EXERCISED: "not exercised",
    Status.UNCHECKED: "could not check",
}


def render_table(verification: Verification, outcome: Outcome) -> str:
    options = verification.options
    arguments = f" -- {' '.join(options.script_args)}" if options.script_args else ""
    lines = [f"ddpify verify {options.original} {options.converted}{arguments}"]
    lines += [f"  {line}" for line in outcome.setup]
    lines.append("changed for the check:")
    lines += [f"  - {line}" for line in outcome.changes]
    width = max(len(check.name) for check in outcome.checks)
    mark_width = max(len(mark) for mark in MARKS.values())
    lines.append("")
    lines.append(f"{'check':<{width}}  {'result':<{mark_width}}  detail")
    for check in outcome.checks:
        lines.append(f"{check.name:<{width}}  {MARKS[check.status]:<{mark_width}}  {check.summary}")
        indent = " " * (width + mark_width + 4)
        lines += [f"{indent}{detail}" for detail in check.details]
    lines.append("")
    lines.append(f"verdict: {outcome.verdict} (exit {outcome.exit_code})")
    if verification.kept:
        lines.append(f"kept: {verification.temp_dir}")
    return "\n".join(lines)


def as_json(verification: Verification, outcome: Outcome) -> dict[str, Any]:
    options = verification.options
    processes = [
        {
            "role": process.role,
            "rank": process.rank,
            "pid": process.pid,
            "pgid": process.pgid,
            "returncode": process.returncode,
            "timed_out": process.timed_out,
            "killed": process.killed,
            "seconds": round(process.duration, 2),
        }
        for run in (verification.converted, verification.original)
        if run is not None
        for process in run.processes
    ]
    return {
        "original": str(options.original),
        "converted": str(options.converted),
        "script_args": list(options.script_args),
        "nproc": options.nproc,
        "steps": options.steps,
        "timeout": options.timeout,
        "exit_code": outcome.exit_code,
        "verdict": outcome.verdict,
        "setup": outcome.setup,
        "changes": outcome.changes,
        "checks": [
            {
                "name": check.name,
                "status": check.status.value,
                "summary": check.summary,
                "details": check.details,
                "data": check.data,
            }
            for check in outcome.checks
        ],
        "processes": processes,
        "pgids": verification.pgids,
        "temp_dir": str(verification.temp_dir),
        "kept": verification.kept,
    }


def render_json(verification: Verification, outcome: Outcome) -> str:
    return json.dumps(as_json(verification, outcome), indent=2, default=str)
