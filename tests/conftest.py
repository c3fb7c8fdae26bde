"""Shared helpers: paths, and running commands with a timeout that kills the whole group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def run(
    args: list[str], cwd: Path, timeout: float, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run a command in its own process group; on timeout kill the group and fail."""
    process = subprocess.Popen(
        args,
        cwd=cwd,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"},
    )
    try:
        out, err = process.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"timed out after {timeout}s: {args}\n{err.decode(errors='replace')}")
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def ddpify(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return run([sys.executable, "-m", "ddpify", *args], cwd=cwd, timeout=60, stdin=stdin)
