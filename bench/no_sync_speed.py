"""What `no_sync()` on the micro-batches that do not step (DDP012) saves, against the naive
conversion that all-reduces at every backward.

One single-GPU script (below: an MLP of 6.3M parameters, 25 MB of gradients, trained with
4-batch gradient accumulation, 2 epochs of 32 batches) is converted twice through ddpify's
API in the same run: with every rule, and with every rule but DDP012 (the baseline). Each
conversion runs under ``torchrun --standalone --nproc_per_node=2`` (gloo, CPU) and times its
own training loop (``time.perf_counter`` around the epochs, printed by rank 0), so process
start-up and the process group's set-up are left out. The two alternate after one warm-up
round; the figure is median(baseline) / median(no_sync). Nothing is asserted.

    python bench/no_sync_speed.py            # 5 rounds
    python bench/no_sync_speed.py --runs 9
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ddpify.convert import convert_source
from ddpify.options import ConvertOptions
from ddpify.rule import convert_rules

SCRIPT = '''\
"""An MLP trained with gradient accumulation: the bench's single-GPU script."""
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

ACCUM_STEPS = 4


def main():
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(512, 1024), torch.randint(0, 10, (512,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Sequential(
        nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for epoch in range(2):
        for i, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            loss = criterion(model(x), y) / ACCUM_STEPS
            loss.backward()
            if (i + 1) % ACCUM_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
    print(f"trained in {time.perf_counter() - start:.3f} s")


if __name__ == "__main__":
    main()
'''
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
TRAINED = re.compile(rb"trained in ([0-9.]+) s")


def conversions(folder: Path) -> dict[str, Path]:
    every = frozenset(rule.code for rule in convert_rules())
    made = {}
    for label, select in (("no_sync", every), ("baseline", every - {"DDP012"})):
        result = convert_source(SCRIPT.encode(), "accumulate.py", ConvertOptions(select=select))
        assert result.changed and not result.refused, result.notes
        assert (b"no_sync()" in result.output) is (label == "no_sync")
        path = folder / f"{label}.py"
        path.write_bytes(result.output)
        made[label] = path
    return made


def trained_seconds(script: Path) -> float:
    ran = subprocess.run(
        [*TORCHRUN, script.name], cwd=script.parent, capture_output=True, timeout=600, check=True
    )
    found = TRAINED.findall(ran.stdout)
    assert len(found) == 1, ran.stdout  # rank 0 alone prints
    return float(found[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scripts = conversions(Path(folder))
        for script in scripts.values():
            trained_seconds(script)  # warm-up
        times: dict[str, list[float]] = {label: [] for label in scripts}
        for _ in range(args.runs):
            for label, script in scripts.items():
                times[label].append(trained_seconds(script))
    medians = {label: statistics.median(values) for label, values in times.items()}
    for label, values in times.items():
        shown = ", ".join(f"{value:.2f}" for value in values)
        print(f"{label:9} median {medians[label]:.3f} s  ({shown})")
    print(
        f"no_sync speed-up: {medians['baseline'] / medians['no_sync']:.2f}x "
        f"(2 processes, gloo on CPU, {args.runs} runs, 64 backward passes, 16 optimizer steps)"
    )


if __name__ == "__main__":
    main()
