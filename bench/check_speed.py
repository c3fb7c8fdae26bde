"""How fast `ddpify check` is: on one script (the pre-commit case) and on the torch package.

What it measures:

* ``one script``: the wall time of ``python -m ddpify check SCRIPT`` in a fresh process,
  against ``python -c "import libcst"`` (the floor any LibCST-based tool pays) and
  ``python -c "import ddpify.workspace"`` (interpreter, LibCST, the engine and its rules, no
  checking). The three alternate after one warm-up round; the figure of merit is
  median(check) / median(import libcst), with a target of at most 1.5x.
* ``torch corpus``: ``ddpify check`` over every ``.py`` file of the installed torch package
  (found with ``importlib.util.find_spec``, without importing torch; ``--limit N`` takes N
  files spread evenly over the sorted list instead), ``--corpus-runs`` times (median), then
  TorchFix and Fixit once each on the same files (each with its default rules and its own
  parallelism), when they are installed in ``--baseline-venv``; ``--install-baselines``
  creates that venv and pip-installs them there, never into this project's environment.
  Every tool reads copies of the files made in a temporary folder: Fixit skips files a
  ``.gitignore`` covers, as a virtual environment inside a checkout is. Fixit, at about
  2 files a second here, runs on ``--fixit-limit`` files spread evenly (ddpify is timed again
  on the same ones). The figure of merit is ddpify's files per second over TorchFix's on
  the same files, target at least 20x.

Every command runs with bytecode writing allowed (as after a pip install, which compiles),
so that the warm-up run leaves ddpify's compiled modules for the timed ones.

Nothing is asserted; the figures are printed for a human to judge. Exit codes of the tools
are shown, not checked: each one finds things in torch and says so with a non-zero code.

    python bench/check_speed.py                       # both parts (about 30 minutes)
    python bench/check_speed.py --runs 15 --skip-corpus
    python bench/check_speed.py --skip-baselines      # ddpify alone on all of torch
    python bench/check_speed.py --limit 300 --install-baselines
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCRIPT = REPO_ROOT / "fixtures" / "convert" / "scripts" / "already_ddp.py"
DEFAULT_BASELINE_VENV = Path("/tmp/benchvenv")
MIN_RUNS = 7
# As installed by pip, which compiles every module: let the warm-up runs write the bytecode
# of an editable install too, rather than compile ddpify's modules in every timed run.
ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
TARGET_RATIO = 1.5


def time_command(command: Sequence[str], ok_codes: Sequence[int] = (0,)) -> tuple[float, int]:
    """Seconds of wall time for one run of `command`, and its exit code."""
    start = time.perf_counter()
    completed = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENVIRONMENT
    )
    elapsed = time.perf_counter() - start
    if ok_codes and completed.returncode not in ok_codes:
        message = completed.stderr.decode(errors="replace").strip()[-2000:]
        raise SystemExit(
            f"exit code {completed.returncode}: {' '.join(command[:6])} ...\n{message}"
        )
    return elapsed, completed.returncode


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def one_script(script: Path, runs: int) -> None:
    commands = {
        "import libcst": [sys.executable, "-c", "import libcst"],
        "ddpify check": [sys.executable, "-m", "ddpify", "check", str(script)],
        "import ddpify.workspace": [sys.executable, "-c", "import ddpify.workspace"],
    }
    # The check may find something in a script given on the command line: 1 is fine too.
    ok = {"ddpify check": (0, 1)}
    for label, command in commands.items():
        time_command(command, ok.get(label, (0,)))
    samples: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, command in commands.items():
            samples[label].append(time_command(command, ok.get(label, (0,)))[0])

    print(f"one script: {script} ({script.stat().st_size} bytes)")
    print(f"  {runs} runs of each command, alternated, after 1 warm-up round; wall time:")
    for label, values in samples.items():
        print(
            f"  {label:<22} median {milliseconds(statistics.median(values))}"
            f"   (min {milliseconds(min(values)).strip()}, max {milliseconds(max(values)).strip()})"
        )
    baseline = statistics.median(samples["import libcst"])
    check = statistics.median(samples["ddpify check"])
    imports = statistics.median(samples["import ddpify.workspace"])
    ratio = check / baseline
    verdict = "within" if ratio <= TARGET_RATIO else "over"
    print(
        f"  ratio median(ddpify check) / median(import libcst) = {ratio:.2f}x "
        f"(target: at most {TARGET_RATIO}x; {verdict} target)"
    )
    print(
        f"  of which: importing the engine and rules beyond libcst "
        f"{milliseconds(imports - baseline)}"
    )
    print(
        f"            CLI, reading and checking the script          {milliseconds(check - imports)}"
    )
    print()


def torch_files() -> tuple[Path, list[Path]]:
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torch is not installed in this interpreter")
    root = Path(next(iter(spec.submodule_search_locations)))
    return root, sorted(root.rglob("*.py"))


def evenly(files: list[T], limit: int) -> list[T]:
    """`limit` files spread evenly over the sorted list: the same subset every run."""
    if limit >= len(files):
        return files
    return [files[index * len(files) // limit] for index in range(limit)]


def measure(label: str, command: list[str], count: int) -> float:
    seconds, code = time_command(command, ok_codes=())
    print(
        f"  {label:<10} {count:5} files  {seconds:8.1f} s  {count / seconds:8.1f} files/s"
        f"  (exit {code})"
    )
    return seconds


def copy_outside_any_repository(root: Path, files: list[Path], into: Path) -> list[str]:
    """The files, copied under `into` with their paths below `root`: Fixit skips what a
    `.gitignore` covers (a virtual environment inside a checkout), so every tool reads copies."""
    copies = []
    for path in files:
        target = into / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copies.append(str(target))
    return copies


def corpus(
    limit: int,
    fixit_limit: int,
    baseline_venv: Path,
    install: bool,
    baselines: bool,
    runs: int,
) -> None:
    root, files = torch_files()
    from ddpify.check import applicable, selected_rules

    rules = selected_rules()
    candidates = sum(bool(applicable(rules, path.read_bytes())) for path in files)
    print(f"torch corpus: {len(files)} .py files under {root}")
    print(f"  {candidates} of them pass the rules' text prefilters and are parsed and analysed")
    print(f"  {os.cpu_count()} CPUs; each tool uses its own parallelism (all cores)")
    chosen = evenly(files, limit) if limit else files
    if limit:
        print(f"  the {len(chosen)} files spread evenly over the sorted list (--limit {limit})")
    with tempfile.TemporaryDirectory(prefix="torch-corpus-") as folder:
        copies = copy_outside_any_repository(root, chosen, Path(folder))
        print(f"  every tool reads copies of them in {folder} (outside any git checkout)")
        subset = evenly(copies, fixit_limit) if fixit_limit else copies
        sets = {"all": copies, "fixit": subset}
        ddpify = [sys.executable, "-m", "ddpify", "check"]
        seconds: dict[tuple[str, str], float] = {}
        for label, paths in sets.items():
            if label == "fixit" and (not baselines or paths is copies):
                continue
            timings = [measure("ddpify", [*ddpify, *paths], len(paths)) for _ in range(runs)]
            seconds["ddpify", label] = statistics.median(timings)
            print(
                f"  ddpify     median of {runs} runs on {len(paths)} files: "
                f"{seconds['ddpify', label]:.1f} s"
            )
        if not baselines:
            return
        if install and not (baseline_venv / "bin" / "torchfix").exists():
            print(f"  installing torchfix and fixit into {baseline_venv} ...")
            subprocess.run([sys.executable, "-m", "venv", str(baseline_venv)], check=True)
            pip = [str(baseline_venv / "bin" / "python"), "-m", "pip", "install", "-q"]
            subprocess.run([*pip, "torchfix", "fixit"], check=True)
        for tool, command, label in (
            ("torchfix", [str(baseline_venv / "bin" / "torchfix")], "all"),
            ("fixit", [str(baseline_venv / "bin" / "fixit"), "lint"], "fixit"),
        ):
            if not Path(command[0]).exists():
                print(
                    f"  {tool:<10} not installed in {baseline_venv} "
                    "(--install-baselines installs it)"
                )
                continue
            paths = sets[label]
            if paths is copies:
                label = "all"
            seconds[tool, label] = measure(tool, [*command, *paths], len(paths))  # minutes
            ratio = seconds[tool, label] / seconds["ddpify", label]
            print(
                f"  on the same {len(paths)} files ddpify checks {ratio:.1f}x as many "
                f"files per second as {tool}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", nargs="?", type=Path, default=DEFAULT_SCRIPT)
    parser.add_argument("--runs", type=int, default=9, help=f"at least {MIN_RUNS} (default 9)")
    parser.add_argument(
        "--limit", type=int, default=0, help="check this many files of torch (default: all)"
    )
    parser.add_argument(
        "--fixit-limit",
        type=int,
        default=300,
        help="Fixit checks about 2 files a second here: run it (and ddpify again) on this many "
        "files spread evenly over the corpus; 0 for all of them (default 300)",
    )
    parser.add_argument(
        "--corpus-runs", type=int, default=3, help="runs of ddpify over the corpus (median)"
    )
    parser.add_argument("--baseline-venv", type=Path, default=DEFAULT_BASELINE_VENV)
    parser.add_argument("--install-baselines", action="store_true")
    parser.add_argument("--skip-corpus", action="store_true", help="the one-script part only")
    parser.add_argument(
        "--skip-baselines", action="store_true", help="time ddpify alone on the corpus"
    )
    arguments = parser.parse_args(argv)
    if arguments.runs < MIN_RUNS:
        parser.error(f"--runs must be at least {MIN_RUNS}")
    print(f"python: {sys.executable} ({sys.version.split()[0]})")
    print()
    one_script(arguments.script.resolve(), arguments.runs)
    if not arguments.skip_corpus:
        corpus(
            arguments.limit,
            arguments.fixit_limit,
            arguments.baseline_venv,
            arguments.install_baselines,
            baselines=not arguments.skip_baselines,
            runs=arguments.corpus_runs,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
