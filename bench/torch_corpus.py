"""Robustness run: convert every .py file of the installed torch package and count what happens.

The torch sources are a large corpus of real, varied Python (about 2,300 files, 1.2 million
lines) that ddpify was not written against. Each file goes through
``ddpify.convert.convert_source`` with the default options, in a process pool with one worker
per CPU. For each file the run records one outcome:

* parse error: ``InputError`` (not parseable by LibCST or not decodable under Python 3.11);
* crash: any other exception, with the last line of its traceback;
* skipped (by reason category), refused, changed, or converted without change.

Then it checks the output: every changed output must compile (``compile(output, name,
"exec")``), and every unchanged output (including skipped and refused ones) must be
byte-identical to the input. Timing is wall time for the whole pool; nothing timed is asserted.

Exit status: 1 if any file crashed, any changed output does not compile, or any unchanged
output differs from its input; else 0.

Run from anywhere (torch is located with ``importlib.util.find_spec`` and never imported)::

    python bench/torch_corpus.py                  # the whole package, several minutes
    python bench/torch_corpus.py --limit 200      # the first 200 files, sorted by path
    python bench/torch_corpus.py --show-crashes   # also print each crash's traceback
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import re
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import ddpify
from ddpify.convert import convert_source
from ddpify.options import ConvertOptions
from ddpify.source import InputError

LISTED = 20  # how many files each problem list shows unless asked for all
# Where the engine and its rules live, to point at the innermost ddpify frame of a crash.
# (ddpify.rules is installed from the top-level rules/ folder, hence the second entry.)
DDPIFY_FOLDERS = tuple(
    str(Path(module.__file__ or "").parent) + os.sep
    for module in (ddpify, importlib.import_module("ddpify.rules"))
)


@dataclass(frozen=True)
class Record:
    """What converting one file gave."""

    name: str  # path relative to the folder holding the torch package, e.g. torch/nn/init.py
    lines: int
    seconds: float
    outcome: str  # parse-error, crash, skipped, refused, changed, unchanged
    detail: str = ""  # error message, crash's last line, or skip reason category
    where: str = ""  # for a crash: innermost ddpify frame and innermost frame, file:line
    trace: str = ""  # for a crash: the full traceback
    bad_output: str = ""  # a changed output that does not compile: the compiler's message
    not_identical: bool = False  # an unchanged output whose bytes differ from the input


@dataclass
class Summary:
    records: list[Record] = field(default_factory=list)

    def with_outcome(self, outcome: str) -> list[Record]:
        return [record for record in self.records if record.outcome == outcome]

    @property
    def bad_outputs(self) -> list[Record]:
        return [record for record in self.records if record.bad_output]

    @property
    def not_identical(self) -> list[Record]:
        return [record for record in self.records if record.not_identical]


def torch_locations() -> list[Path]:
    """The torch package's folders, found without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torch is not installed in this interpreter's environment")
    return [Path(location) for location in spec.submodule_search_locations]


def corpus_files(locations: Sequence[Path]) -> list[tuple[str, str]]:
    """(display name, path) for every .py file under the locations, sorted by display name."""
    files: dict[str, str] = {}
    for location in locations:
        for path in location.rglob("*.py"):
            if path.is_file():
                name = path.relative_to(location.parent).as_posix()
                files.setdefault(name, str(path))
    return sorted(files.items())


def skip_category(reason: str) -> str:
    """The reason without its particulars: 'already distributed (line 12): ...' gives
    'already distributed'."""
    return re.split(r" \(|:|,", reason, maxsplit=1)[0].strip()


def compile_error(output: bytes, name: str) -> str:
    """The compiler's complaint about `output`, or '' when it compiles."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(output, name, "exec", dont_inherit=True)
    except SyntaxError as error:
        return f"{type(error).__name__}: {error.msg} (line {error.lineno})"
    except (ValueError, RecursionError, MemoryError) as error:
        return f"{type(error).__name__}: {error}"
    return ""


def innermost_frames(error: BaseException) -> str:
    """Where the exception was raised, and the innermost ddpify frame when that is elsewhere."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    places = [frames[-1]]
    ours = [frame for frame in frames if frame.filename.startswith(DDPIFY_FOLDERS)]
    if ours and ours[-1] is not frames[-1]:
        places.insert(0, ours[-1])
    return " -> ".join(f"{frame.filename}:{frame.lineno} in {frame.name}" for frame in places)


def convert_one(name: str, path: str) -> Record:
    source = Path(path).read_bytes()
    lines = source.count(b"\n") + (0 if source.endswith(b"\n") or not source else 1)
    start = time.perf_counter()
    try:
        result = convert_source(source, name, ConvertOptions())
    except InputError as error:
        seconds = time.perf_counter() - start
        return Record(name, lines, seconds, "parse-error", str(error))
    except Exception as error:
        seconds = time.perf_counter() - start
        last_line = traceback.format_exception_only(type(error), error)[-1].strip()
        return Record(
            name,
            lines,
            seconds,
            "crash",
            last_line,
            where=innermost_frames(error),
            trace="".join(traceback.format_exception(error)),
        )
    seconds = time.perf_counter() - start
    changed = result.output != source  # against the bytes read, not `result.source`
    detail = ""
    if result.skipped is not None:
        outcome, detail = "skipped", skip_category(result.skipped)
    elif result.refused:
        outcome = "refused"
        if result.problems:
            first = result.problems[0]
            detail = f"{first.code} line {first.line}: {first.message}"
    else:
        outcome = "changed" if changed else "unchanged"
    bad_output = compile_error(result.output, name) if changed else ""
    if bad_output and compile_error(source, name):
        bad_output += " [the input does not compile either]"
    # Only a conversion may change bytes: skipped and refused files must come back as they were.
    not_identical = changed and outcome != "changed"
    return Record(
        name, lines, seconds, outcome, detail, bad_output=bad_output, not_identical=not_identical
    )


def convert_chunk(chunk: list[tuple[str, str]]) -> list[Record]:
    return [convert_one(name, path) for name, path in chunk]


def chunks(items: list[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def run(files: list[tuple[str, str]], workers: int, chunk_size: int) -> Summary:
    summary = Summary()
    done = 0
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(convert_chunk, chunk): chunk for chunk in chunks(files, chunk_size)}
        for future in as_completed(futures):
            try:
                summary.records.extend(future.result())
            except Exception as error:  # a worker died (e.g. a segfault): blame its whole chunk
                message = traceback.format_exception_only(type(error), error)[-1].strip()
                summary.records.extend(
                    Record(name, 0, 0.0, "crash", f"worker died: {message}")
                    for name, _ in futures[future]
                )
            done += 1
            if done % max(1, len(futures) // 10) == 0 or done == len(futures):
                files_done = sum(len(futures[future]) for future in futures if future.done())
                print(f"progress: {files_done}/{len(files)} files", file=sys.stderr, flush=True)
    summary.records.sort(key=lambda record: record.name)
    return summary


def show_list(title: str, lines: list[str], everything: bool) -> None:
    if not lines:
        return
    print(f"\n{title} ({len(lines)}):")
    shown = lines if everything else lines[:LISTED]
    for line in shown:
        print(f"  {line}")
    if len(shown) < len(lines):
        print(f"  ... and {len(lines) - len(shown)} more")


def report(summary: Summary, seconds: float, workers: int, show_crashes: bool) -> None:
    records = summary.records
    lines = sum(record.lines for record in records)
    outcomes = Counter(record.outcome for record in records)
    skipped = Counter(record.detail for record in summary.with_outcome("skipped"))
    kept = [record for record in records if record.outcome in ("skipped", "refused", "unchanged")]
    byte_identical = sum(1 for record in kept if not record.not_identical)
    print(f"files:                      {len(records)}")
    print(f"lines:                      {lines}")
    print(f"parse errors (InputError):  {outcomes['parse-error']}")
    print(f"crashes:                    {outcomes['crash']}")
    print(f"changed:                    {outcomes['changed']}")
    print(f"refused:                    {outcomes['refused']}")
    print(f"skipped:                    {outcomes['skipped']}")
    for category, count in skipped.most_common():
        print(f"  {count:6d}  {category}")
    print(f"converted, no change:       {outcomes['unchanged']}")
    print(
        f"unchanged, byte-identical:  {byte_identical} of {len(kept)} (skipped, refused, no change)"
    )
    print(f"changed outputs that fail to compile: {len(summary.bad_outputs)}")
    print(f"unchanged outputs that differ from input: {len(summary.not_identical)}")
    print(f"wall time:                  {seconds:.1f} s with {workers} workers")
    print(
        f"throughput:                 {len(records) / seconds:.1f} files/s, "
        f"{lines / seconds:.0f} lines/s"
    )

    slowest = sorted(records, key=lambda record: record.seconds, reverse=True)[:5]
    show_list(
        "slowest files (convert_source time)",
        [f"{record.seconds:7.2f} s  {record.name} ({record.lines} lines)" for record in slowest],
        everything=True,
    )
    show_list(
        "parse errors (not parseable by LibCST / Python 3.11)",
        [record.detail for record in summary.with_outcome("parse-error")],
        everything=True,
    )
    crashes = summary.with_outcome("crash")
    by_error = Counter(record.detail for record in crashes)
    show_list(
        "distinct crash messages",
        [f"{count:4d}x  {message}" for message, count in by_error.most_common()],
        everything=True,
    )
    show_list(
        "crashes",
        [f"{record.name}: {record.detail}\n      at {record.where}" for record in crashes],
        everything=show_crashes,
    )
    if show_crashes:
        for record in crashes:
            print(f"\n--- {record.name}\n{record.trace.rstrip()}")
    show_list(
        "refused (first problem)",
        [f"{record.name}: {record.detail}" for record in summary.with_outcome("refused")],
        everything=True,
    )
    show_list(
        "changed outputs that fail to compile",
        [f"{record.name}: {record.bad_output}" for record in summary.bad_outputs],
        everything=show_crashes,
    )
    show_list(
        "unchanged outputs that differ from their input",
        [f"{record.name} ({record.outcome}: {record.detail})" for record in summary.not_identical],
        everything=show_crashes,
    )


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--limit", type=int, default=None, metavar="N", help="convert only the first N files"
    )
    parser.add_argument(
        "--show-crashes",
        action="store_true",
        help="list every crash with its full traceback, and every bad output",
    )
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="processes (default: CPUs)"
    )
    parser.add_argument(
        "--chunk-size", type=int, default=16, help="files per task sent to a worker (default 16)"
    )
    arguments = parser.parse_args(argv)
    if arguments.limit is not None and arguments.limit < 1:
        parser.error("--limit must be at least 1")
    if arguments.workers < 1 or arguments.chunk_size < 1:
        parser.error("--workers and --chunk-size must be at least 1")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    locations = torch_locations()
    files = corpus_files(locations)
    total = len(files)
    if arguments.limit is not None:
        files = files[: arguments.limit]
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown version"
    print(f"corpus: torch {version} at {', '.join(map(str, locations))}")
    print(
        f"        {len(files)} of {total} .py files" + (" (--limit)" if len(files) < total else "")
    )
    print(f"python: {sys.executable} ({sys.version.split()[0]})\n")

    start = time.perf_counter()
    summary = run(files, arguments.workers, arguments.chunk_size)
    seconds = time.perf_counter() - start
    report(summary, seconds, arguments.workers, arguments.show_crashes)

    failed = summary.with_outcome("crash") or summary.bad_outputs or summary.not_identical
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
