"""Shared helpers: paths, and running commands with a timeout that kills the whole group."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def run(
    args: list[str],
    cwd: Path,
    timeout: float,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run a command in its own process group; on timeout kill the group and fail."""
    process = subprocess.Popen(
        args,
        cwd=cwd,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", **(env or {})},
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


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
# torch 2.13's gloo backend sometimes aborts a process as it exits, after the script's last
# line, when the CPUs are contended: "terminate called without an active exception", exit code
# -6. A 20-line DDP script shows it too (about 1 run in 12 with both cores busy, none in 10
# on an idle machine; with or without `del model` or a barrier before
# destroy_process_group). A DDP model left in a reference cycle made it more frequent (the
# round-7 denoiser, whose model is a local of `main()`: 2 in 25 runs with both cores busy);
# the conversion now calls gc.collect() before destroy_process_group() (0 in 25, measured
# alternately under the same load). What remains is tried again from the same files, at most
# twice; any other failure is reported at once.
TEARDOWN_ABORT = b"terminate called without an active exception"
TEARDOWN_RETRIES = 2


def torchrun(
    args: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`torchrun --standalone --nproc_per_node=2 ARGS` in `cwd`, again from the same files when
    the run ended in gloo's teardown abort."""
    before = set(cwd.rglob("*"))
    # What the run may change in place (a resumed run overwrites its checkpoint): put back
    # before a retry, or the retry would resume from the aborted run's last epoch.
    contents = {path: path.read_bytes() for path in before if path.is_file()}
    for _ in range(TEARDOWN_RETRIES):
        result = run([*TORCHRUN, *args], cwd=cwd, timeout=timeout, env=env)
        if result.returncode == 0 or TEARDOWN_ABORT not in result.stderr:
            return result
        for path in sorted(set(cwd.rglob("*")) - before, reverse=True):  # what the run made
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        for path, data in contents.items():
            if not path.exists() or path.read_bytes() != data:
                path.write_bytes(data)
    return run([*TORCHRUN, *args], cwd=cwd, timeout=timeout, env=env)


HARNESS = ROOT / "tests" / "harness"  # sitecustomize.py: records writes, slows rank 0's saves
WRITES = ".writes"  # the harness's log folder, inside the run's folder


def recording(cwd: Path, save_delay: float = 0.3) -> dict[str, str]:
    """The environment that makes every process started in `cwd` record what it writes, and
    rank 0 of a job write each torch.save in two halves `save_delay` seconds apart."""
    (cwd / WRITES).mkdir(exist_ok=True)
    path = os.pathsep.join(filter(None, [str(HARNESS), os.environ.get("PYTHONPATH")]))
    return {
        "PYTHONPATH": path,
        "DDPIFY_TEST_WRITES": str(cwd / WRITES),
        "DDPIFY_TEST_SAVE_DELAY": str(save_delay),
    }


def writers(cwd: Path) -> dict[str, set[str]]:
    """Each path inside `cwd` a recorded run wrote, created or removed, and the ranks that
    did ("-" for a plain process)."""
    found: dict[str, set[str]] = {}
    root = cwd.resolve()
    for log in (cwd / WRITES).glob("writes.*"):
        for line in log.read_text().splitlines():
            rank, _, path = line.split("\t", 2)
            where = Path(path)
            if where.is_relative_to(root):
                found.setdefault(where.relative_to(root).as_posix(), set()).add(rank)
    return found


# A training script whose loader takes a batch sampler of its own class (length buckets);
# PROBE is where a test records what each rank read.

OWN_SAMPLERS = """\
import json
import random

import torch
from torch.utils.data import DataLoader, Dataset


class Seqs(Dataset):
    def __init__(self, n):
        self.lengths = [3 + i % 5 for i in range(n)]

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        return torch.full((self.lengths[i], 2), float(i)), i


class BucketBatchSampler:
    def __init__(self, lengths, batch_size):
        self.order = sorted(range(len(lengths)), key=lengths.__getitem__)
        self.batch_size = batch_size

    def __iter__(self):
        bs = self.batch_size
        batches = [self.order[i:i + bs] for i in range(0, len(self.order), bs)]
        random.shuffle(batches)
        return iter(batches)

    def __len__(self):
        return -(-len(self.order) // self.batch_size)


def pad(batch):
    xs, ids = zip(*batch)
    return torch.nn.utils.rnn.pad_sequence(xs, batch_first=True), torch.tensor(ids)


def main():
    random.seed(0)
    torch.manual_seed(0)
    ds = Seqs(42)
    loader = DataLoader(ds, batch_sampler=BucketBatchSampler(ds.lengths, 4), collate_fn=pad)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    passes = []
    for epoch in range(3):
        passes.append([])
        for x, ids in loader:
            optimizer.zero_grad()
            model(x).mean().backward()
            optimizer.step()
            passes[-1].append(ids.tolist())
    PROBE


if __name__ == "__main__":
    main()
"""
