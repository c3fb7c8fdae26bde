"""How long `ddpify verify` takes, against running the two scripts yourself for as many steps.

What it measures, each a fresh process tree timed by wall clock:

* ``verify``: ``python -m ddpify.verify ORIGINAL CONVERTED --nproc 2 --steps 3 --epochs 1``
  (one pass cut to 3 steps, as the baseline takes; both runs,
  the comparisons, the report);
* ``baseline``: what a person would run to try the pair by hand, one after the other:
  ``python stop_after.py 3 ORIGINAL`` then
  ``python -m torch.distributed.run --standalone --nproc_per_node=2 stop_after.py 3 CONVERTED``.
  ``stop_after.py`` (written to a temporary folder) registers an optimizer post-step hook that
  ends the process after 3 steps, and, since this machine has no GPU, maps `.to("cuda")` /
  `.cuda()` to the CPU (the original hard-codes CUDA and would not run otherwise); then it
  runs the script with runpy. Nothing else: no seeding, recording or comparing.

Each script runs in a fresh temporary folder in both cases. The two commands alternate after
one warm-up round, so that drift in the machine's load affects them alike. The figure of
merit is median(verify) / median(baseline); the target is at most 1.5x. Nothing is asserted.

    python bench/verify_speed.py               # the seed 000 pair, 5 rounds
    python bench/verify_speed.py --runs 7
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ORIGINAL = REPO_ROOT / "fixtures" / "convert" / "seeds" / "seed000_single_gpu.py"
CONVERTED = REPO_ROOT / "fixtures" / "convert" / "expected" / "seed000_single_gpu.py"
MIN_RUNS = 5
TARGET_RATIO = 1.5
STEPS = 3

STOP_AFTER = '''\
"""python stop_after.py STEPS SCRIPT [ARGS...]: run SCRIPT, end the process after STEPS steps."""
import os
import runpy
import sys

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

wanted, taken = int(sys.argv[1]), 0


def stop(*_):
    global taken
    taken += 1
    if taken >= wanted:
        sys.stdout.flush()
        os._exit(0)  # every rank stops after the same step: nobody waits in a collective


register_optimizer_step_post_hook(stop)
if not torch.cuda.is_available():  # the original hard-codes CUDA; there is no GPU here
    real_tensor_to, real_module_to = torch.Tensor.to, torch.nn.Module.to

    def cpu(args):
        return tuple("cpu" if str(a).startswith("cuda") else a for a in args)

    torch.Tensor.to = lambda self, *a, **k: real_tensor_to(self, *cpu(a), **k)
    torch.nn.Module.to = lambda self, *a, **k: real_module_to(self, *cpu(a), **k)
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.nn.Module.cuda = lambda self, *a, **k: self
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def timed(commands: Sequence[Sequence[str]], cwd: Path | None = None) -> float:
    """Wall time of running the commands one after the other; each must succeed."""
    start = time.perf_counter()
    for command in commands:
        completed = subprocess.run(
            command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        if completed.returncode != 0:
            message = completed.stderr.decode(errors="replace").strip()[-2000:]
            raise SystemExit(f"failed ({completed.returncode}): {' '.join(command)}\n{message}")
    return time.perf_counter() - start


def verify_once(original: Path, converted: Path) -> float:
    command = [
        sys.executable, "-m", "ddpify.verify", str(original), str(converted),
        "--nproc", "2", "--steps", str(STEPS), "--epochs", "1",
    ]  # fmt: skip
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"verify exit {completed.returncode}:\n{completed.stdout.decode()}")
    return elapsed


def baseline_once(original: Path, converted: Path, helper: Path) -> float:
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        shutil.copy(original, first)
        shutil.copy(converted, second)
        start = time.perf_counter()
        timed([[sys.executable, str(helper), str(STEPS), original.name]], cwd=Path(first))
        timed(
            [[sys.executable, "-m", "torch.distributed.run", "--standalone",
              "--nproc_per_node=2", str(helper), str(STEPS), converted.name]],
            cwd=Path(second),
        )  # fmt: skip
        return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=MIN_RUNS)
    parser.add_argument("original", type=Path, nargs="?", default=ORIGINAL)
    parser.add_argument("converted", type=Path, nargs="?", default=CONVERTED)
    args = parser.parse_args(argv)
    runs = max(args.runs, MIN_RUNS)
    with tempfile.TemporaryDirectory() as folder:
        helper = Path(folder) / "stop_after.py"
        helper.write_text(STOP_AFTER)
        verify_once(args.original, args.converted)  # warm-up: page cache, bytecode
        baseline_once(args.original, args.converted, helper)
        verify_times, baseline_times = [], []
        for _ in range(runs):
            verify_times.append(verify_once(args.original, args.converted))
            baseline_times.append(baseline_once(args.original, args.converted, helper))
    verify = statistics.median(verify_times)
    baseline = statistics.median(baseline_times)
    print(f"pair: {args.original.name} -> {args.converted.name}, 2 processes, {STEPS} steps")
    print(f"verify   median {verify:6.2f} s  runs {' '.join(f'{t:.2f}' for t in verify_times)}")
    print(f"baseline median {baseline:6.2f} s  runs {' '.join(f'{t:.2f}' for t in baseline_times)}")
    ratio = verify / baseline
    verdict = "within" if ratio <= TARGET_RATIO else "over"
    print(f"ratio {ratio:.2f}x ({verdict} the {TARGET_RATIO}x target)")


if __name__ == "__main__":
    main()
