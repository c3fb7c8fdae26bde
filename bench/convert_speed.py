"""How long converting one script takes, against the cost of merely starting Python with LibCST.

What it measures:

* ``convert``: the wall time of the CLI in a fresh process,
  ``python -m ddpify SCRIPT -o TMPFILE -q``;
* ``baseline``: the wall time of ``python -c "import libcst"`` in a fresh process, the floor
  that any LibCST-based tool pays before doing any work;
* ``import ddpify.cli``: the wall time of ``python -c "import ddpify.cli"`` (interpreter start,
  LibCST, Typer and the rules, but no conversion);
* ``convert_source``: the in-process time of the engine alone on the script (parse, analyse,
  rewrite), after a warm-up call, so no import cost is counted.

The three commands run alternately, after one warm-up round, so that drift in the machine's
load affects them alike. The figure of merit is median(convert) / median(baseline); the target
is at most 1.5x. Nothing is asserted: the figures are printed for a human to judge.

Run from anywhere::

    python bench/convert_speed.py                 # default script, 9 rounds
    python bench/convert_speed.py --runs 15
    python bench/convert_speed.py path/to/train.py

The default script is ``fixtures/convert/seeds/seed000_single_gpu.py`` under the repository
root (the parent of ``bench/``), or ``fixtures/convert/scripts/module_level.py`` when that does
not exist.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCRIPT = REPO_ROOT / "fixtures" / "convert" / "seeds" / "seed000_single_gpu.py"
FALLBACK_SCRIPT = REPO_ROOT / "fixtures" / "convert" / "scripts" / "module_level.py"
MIN_RUNS = 7
TARGET_RATIO = 1.5


def default_script() -> Path:
    return DEFAULT_SCRIPT if DEFAULT_SCRIPT.is_file() else FALLBACK_SCRIPT


def time_command(command: Sequence[str]) -> float:
    """Seconds of wall time for one run of `command`, which must succeed."""
    start = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        message = completed.stderr.decode(errors="replace").strip()
        raise SystemExit(
            f"command failed with exit code {completed.returncode}: {' '.join(command)}\n{message}"
        )
    return elapsed


def time_call(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def describe(label: str, samples: list[float]) -> str:
    return (
        f"  {label:<20} median {milliseconds(statistics.median(samples))}"
        f"   (min {milliseconds(min(samples)).strip()}, max {milliseconds(max(samples)).strip()},"
        f" n={len(samples)})"
    )


def measure_processes(script: Path, output: Path, runs: int) -> dict[str, list[float]]:
    """Alternate the three fresh-process commands, after one untimed warm-up round."""
    commands: dict[str, list[str]] = {
        "baseline": [sys.executable, "-c", "import libcst"],
        "convert": [sys.executable, "-m", "ddpify", str(script), "-o", str(output), "-q"],
        "import ddpify.cli": [sys.executable, "-c", "import ddpify.cli"],
    }
    for command in commands.values():
        time_command(command)
    samples: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, command in commands.items():
            samples[label].append(time_command(command))
    return samples


def measure_engine(script: Path, runs: int) -> tuple[float, list[float], str]:
    """In-process times of `convert_source` alone: the first (cold) call, the warm calls, and
    what it did to the script."""
    from ddpify.convert import convert_source
    from ddpify.options import ConvertOptions

    source = script.read_bytes()
    options = ConvertOptions()
    start = time.perf_counter()
    result = convert_source(source, script.name, options)  # warm-up: lazy imports, caches
    first = time.perf_counter() - start
    if result.skipped is not None:
        outcome = f"skipped: {result.skipped}"
    elif result.refused:
        outcome = "refused"
    else:
        outcome = "changed" if result.changed else "unchanged"
    samples = [time_call(lambda: convert_source(source, script.name, options)) for _ in range(runs)]
    return first, samples, outcome


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "script",
        nargs="?",
        type=Path,
        default=None,
        help=f"script to convert (default: {DEFAULT_SCRIPT.relative_to(REPO_ROOT)}, "
        f"else {FALLBACK_SCRIPT.relative_to(REPO_ROOT)})",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=9,
        help=f"timed runs of each command, alternated (at least {MIN_RUNS}; default 9)",
    )
    arguments = parser.parse_args(argv)
    if arguments.runs < MIN_RUNS:
        parser.error(f"--runs must be at least {MIN_RUNS}")
    if arguments.script is None:
        arguments.script = default_script()
    if not arguments.script.is_file():
        parser.error(f"{arguments.script}: no such file")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    script: Path = arguments.script.resolve()
    runs: int = arguments.runs
    source = script.read_bytes()
    lines = source.count(b"\n")
    print(f"script:  {script} ({len(source)} bytes, {lines} lines)")
    print(f"python:  {sys.executable} ({sys.version.split()[0]})")
    print(f"runs:    {runs} of each command, alternated, after 1 warm-up round")
    print()

    with tempfile.TemporaryDirectory(prefix="ddpify-bench-") as folder:
        output = Path(folder) / f"ddp_{script.name}"
        process_samples = measure_processes(script, output, runs)
    first_call, engine_samples, outcome = measure_engine(script, runs)

    print("fresh processes (wall time):")
    for label, samples in process_samples.items():
        print(describe(label, samples))
    print("in-process:")
    print(describe("convert_source", engine_samples) + f"   [{outcome}]")
    print(f"  {'first (cold) call':<20}        {milliseconds(first_call)}")
    print()

    baseline = statistics.median(process_samples["baseline"])
    convert = statistics.median(process_samples["convert"])
    imports = statistics.median(process_samples["import ddpify.cli"])
    ratio = convert / baseline
    verdict = "within" if ratio <= TARGET_RATIO else "over"
    print(
        f"ratio median(convert) / median(baseline) = {ratio:.2f}x "
        f"(target: at most {TARGET_RATIO}x; {verdict} target)"
    )
    print("where the time goes (medians; the first call is a single sample):")
    print(f"  start Python + import libcst   {milliseconds(baseline)}")
    print(f"  + rest of `import ddpify.cli`  {milliseconds(imports - baseline)}")
    print(f"  + convert_source, first call   {milliseconds(first_call)}")
    rest = convert - imports - first_call
    print(f"  other (CLI, I/O, unexplained)  {milliseconds(rest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
