"""How ddpify does on real public single-GPU training scripts, listed in bench/corpus.tsv.

The corpus file names scripts, not their code: one line per script, tab-separated,

    repo  commit  path  runnable  args  note

(``repo`` is ``owner/name`` on GitHub, ``commit`` the 40-hex commit the script was read at,
``runnable`` is ``yes`` when the script runs on a CPU-only machine with no network and no
torchvision, ``standins`` when it runs there only with --python and --standins (below),
``no`` otherwise (the note says why), ``args`` the command-line arguments of a short CPU run,
``note`` free text). No public code is kept in this repository: the scripts are read from git
directories brought onto the machine beforehand (the search tool's ``fetch``), under
MIRROR_DIR as ``OWNER+NAME/repo`` (a git directory, or a clone holding ``.git``).

For each line, in a fresh temporary folder:

1. the repository's tree at that commit is extracted whole (blobs the snapshot lacks are
   skipped and counted): scripts import their siblings, packages from the repository root
   (``mingpt``, ``TCN``, ...) and data kept beside them (``../data/names``);
2. data the note asks for is synthesized: each ``make:PATH=KIND`` token writes PATH (relative
   to the script's folder) with KIND ``text`` (lines of words, after two holding every letter)
   or ``names`` (one lowercase name a line), or fills the folder PATH with KIND ``images``
   (random RGB PNGs ``000.png``, ...) or ``masks`` (PNGs of 0 and 255, ``000_mask.png``, ...),
   8 of 64x64 or as ``make:PATH=images:COUNTxWIDTHxHEIGHT`` says, all from a fixed seed; KIND
   ``folder`` makes PATH an empty folder (one the script's README says to create first);
   each ``set:NAME=VALUE`` token gives a module-level constant the script hard-codes
   (``max_iters = 5000``) a short-run value, in the original, before it is converted;
   ``set:FILE:NAME=VALUE`` does it in FILE (relative to the script's folder: a settings
   module such as ``conf/global_settings.py``);
3. ``python -m ddpify SCRIPT -o SCRIPT_ddp.py`` runs in the script's folder and is classified:
   *converted* (exit 0, output differs), *left alone* (exit 0, output identical or not
   written; the reason is ddpify's ``unchanged:`` line), *refused* (exit 1; the reason is the
   first ``cannot:`` line), *error* (anything else, or a timeout);
4. a runnable script that was converted then runs as
   ``PYTHON -m torch.distributed.run --standalone --nproc_per_node=2 SCRIPT_ddp.py ARGS``
   (gloo on the loopback interface, OMP_NUM_THREADS=1, the repository root on PYTHONPATH;
   PYTHON is --python, by default the interpreter running this file):
   *ok* (exit 0), *crashed* (the last exception line of its stderr), or *timeout* (still
   running at --timeout: hung, or merely training longer than that);
5. and ``PYTHON -m ddpify.verify SCRIPT SCRIPT_ddp.py --steps N -- ARGS`` gives its verdict
   (verify runs both scripts with its own interpreter, so PYTHON again): *equivalent* (exit
   0), *not equivalent* (1), *could not run* (2) or *equivalent except per-process
   statistics* (3: equal with BatchNorm's statistics made global, or with one process where
   the conversion reports a loss each process computes over its own part), with the first
   check that did not pass.

``{work}`` in ``args`` stands for the absolute path of the script's folder (``verify`` runs
each script in a fresh folder of its own, so data must be named by absolute path to be found).
Every subprocess runs in its own process group and the whole group is killed at its timeout.
The run prints one row per script, totals, then the full reason of every crash and failed
verification. Nothing is asserted; the exit status is 0 unless the arguments are unusable.

    python bench/corpus.py bench/corpus.tsv /work/.mirror
    python bench/corpus.py bench/corpus.tsv /work/.mirror --only makemore --steps 3
    python bench/corpus.py bench/corpus.tsv /work/.mirror --timeout 120 --keep

Scripts that need torchvision and downloads (the ``standins`` lines): ddpify's venv has a
CPU-only torch and no torchvision, and the machine no network. ``--python PATH`` runs the
scripts and verify with another interpreter (ddpify's folder is appended to their PYTHONPATH,
and ddpify itself still converts with this one); ``--standins DIR`` puts DIR first on every
run's PYTHONPATH and sets DDPIFY_BENCH_STANDINS=1, so that bench/standins/sitecustomize.py
loads: offline stand-ins for torchvision's MNIST/FashionMNIST/KMNIST/CIFAR10/CIFAR100
downloads, ImageFolder, pretrained weights, the BSDS300 archive and wandb (its docstring says
what each does and what it leaves out). The venv, layered on ddpify's for torch (the PyPI
torchvision 0.28.0 is the one built against torch 2.13; its CUDA C++ ops do not load on the
CPU torch, and the stand-ins make it import anyway), built and checked from scratch with

    /work/main/.venv/bin/python -m venv /tmp/corpus-venv \
      && echo /work/main/.venv/lib/python3.11/site-packages \
         > /tmp/corpus-venv/lib/python3.11/site-packages/ddpify-main-venv.pth \
      && /tmp/corpus-venv/bin/pip install torchvision==0.28.0 pillow tqdm six matplotlib \
         tensorboard tensorboardX einops timm thop pandas

(about 10 s from the local package index; pip finds torch 2.13.0+cpu and numpy through the
.pth and installs neither), then

    python bench/corpus.py bench/corpus.tsv /work/.mirror \
      --python /tmp/corpus-venv/bin/python --standins bench/standins --timeout 200

Without --standins the ``standins`` lines are converted but not run (the totals count them).
To measure a fixed ddpify while the source changes, run from a worktree of HEAD with
PYTHONPATH=WORKTREE; the editable install maps ``ddpify.rules`` to the main checkout's
``rules/``, so link it in the worktree too (``ln -s ../rules WORKTREE/ddpify/rules``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib.util import find_spec
from pathlib import Path

COLUMNS = ("repo", "commit", "path", "runnable", "args", "note")
MAKE = re.compile(r"make:(?P<path>[^\s=]+)=(?P<kind>\w+)(?::(?P<size>\d+x\d+x\d+))?")
SET = re.compile(r"set:(?:(?P<file>[^\s:=]+):)?(?P<name>\w+)=(?P<value>[^\s;]+)")
# The last line of a traceback: `ValueError: ...`, `torch.OutOfMemoryError: ...`.
EXCEPTION = re.compile(
    r"^(?:\[rank\d+\]:\s*)?(?P<line>[A-Za-z_][\w.]*(?:Error|Exception|Exit)\b.*)$"
)
LINE_NUMBER = re.compile(r" \(line \d+\)")  # reasons differing only by line count as one
RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s*")
LAUNCHER_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
)  # fmt: skip
VERIFY_EXITS = {
    0: "equivalent",
    1: "not equivalent",
    2: "could not run",
    3: "equivalent except per-process statistics",
}
CONVERT_TIMEOUT = 120.0
REASON_WIDTH = 58
NAME_WIDTH = 56
# Character-level scripts prime their samplers with fixed strings (minGPT's chargpt: "O God,
# O God!"): the text kind holds every letter so that any prime encodes.
PANGRAM = (
    "The quick brown fox jumps over the lazy dog! O God, O God? 0123456789; 'a' \"b\" (c) [d]: e-f."
)
SYLLABLES = ("ka", "lo", "mi", "ten", "ra", "su", "ve", "don", "pa", "li", "or", "the", "an", "es")
IMAGES = (8, 64, 64)  # make:DIR=images: count, width, height
RUNNABLE = ("yes", "standins")  # the runnable column: "standins" runs only with --standins
STANDINS_VARIABLE = "DDPIFY_BENCH_STANDINS"  # what bench/standins/sitecustomize.py acts on


@dataclass(frozen=True)
class Entry:
    """One line of the corpus file."""

    line: int
    repo: str
    commit: str
    path: str
    runnable: bool
    args: str
    note: str
    needs_standins: bool = False  # runnable only with --standins (and a --python that has them)

    @property
    def name(self) -> str:
        return f"{self.repo}/{self.path}"


@dataclass
class Finished:
    """How one subprocess ended."""

    returncode: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


@dataclass
class Result:
    entry: Entry
    outcome: str = "error"  # converted, left alone, refused, error
    reason: str = ""
    run: str = ""  # ok, crashed, timeout; empty when not run
    run_reason: str = ""
    verify: str = ""  # equivalent, not equivalent, could not run, timeout; empty when not run
    verify_reason: str = ""
    missing_blobs: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def read_corpus(path: Path) -> list[Entry]:
    """The corpus file's entries; a malformed line is reported on stderr and skipped."""
    entries: list[Entry] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip() or raw.startswith("#"):
            continue
        cells = raw.split("\t")
        if tuple(cell.strip() for cell in cells[: len(COLUMNS)]) == COLUMNS[: len(cells)]:
            continue  # the header
        if len(cells) < 5:
            print(f"{path}:{number}: expected at least 5 tab-separated cells", file=sys.stderr)
            continue
        cells += [""] * (len(COLUMNS) - len(cells))
        repo, commit, script, runnable, args, note = (cell.strip() for cell in cells[:6])
        flag = runnable.lower()
        entries.append(
            Entry(number, repo, commit, script, flag in RUNNABLE, args, note, flag == "standins")
        )
    return entries


def git_dir(mirror: Path, repo: str) -> Path | None:
    """The git directory fetched for `repo`: MIRROR/OWNER+NAME/repo or .../repo/.git."""
    prefix = repo.replace("/", "+")
    try:
        folders = sorted(mirror.iterdir())
    except OSError:
        return None
    exact = [f for f in folders if f.name == prefix]
    loose = [
        f
        for f in folders
        if f.name.lower().startswith(prefix.lower()) and not f.name.endswith((".part", ".tar"))
    ]
    for folder in exact or loose:
        for candidate in (folder / "repo" / ".git", folder / "repo", folder / ".git", folder):
            if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
                return candidate
    return None


def extract(git: Path, commit: str, into: Path) -> tuple[int, int]:
    """Write the tree of `commit` under `into`; (files written, blobs the snapshot lacks)."""
    listing = subprocess.run(
        ["git", f"--git-dir={git}", "ls-tree", "-r", "-z", commit],
        capture_output=True,
        check=True,
    ).stdout
    blobs: list[tuple[str, str, str]] = []
    for item in listing.split(b"\0"):
        if not item:
            continue
        meta, _, raw_name = item.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        if kind == "blob" and mode in ("100644", "100755"):
            blobs.append((mode, sha, raw_name.decode("utf-8", "surrogateescape")))
    request = "".join(f"{sha}\n" for _, sha, _ in blobs).encode()
    output = subprocess.run(
        ["git", f"--git-dir={git}", "cat-file", "--batch"],
        input=request,
        capture_output=True,
        check=True,
    ).stdout
    written = missing = 0
    position = 0
    for mode, _, name in blobs:
        end = output.index(b"\n", position)
        header = output[position:end].decode().split()
        position = end + 1
        if len(header) < 3 or header[1] != "blob":  # "<sha> missing"
            missing += 1
            continue
        size = int(header[2])
        data = output[position : position + size]
        position += size + 1
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if mode == "100755":
            target.chmod(0o755)
        written += 1
    return written, missing


def synthesize(kind: str, rng: random.Random) -> str | None:
    if kind == "text":
        vocabulary = sorted(
            {"".join(rng.choices(SYLLABLES, k=rng.randint(1, 3))) for _ in range(400)}
        )
        lines = [PANGRAM, PANGRAM.upper()]  # every letter, digit and common punctuation mark
        for _ in range(1500):
            words = rng.choices(vocabulary, k=rng.randint(6, 14))
            lines.append(" ".join(words).capitalize() + ".")
        return "\n".join(lines) + "\n"
    if kind == "names":
        letters = "abcdefghijklmnopqrstuvwxyz"
        names = {"".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(2000)}
        return "\n".join(sorted(names)) + "\n"
    return None


def png(width: int, height: int, channels: int, pixels: bytes) -> bytes:
    """A PNG file (8-bit gray or RGB) holding `pixels`, row after row."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    row = width * channels
    raw = b"".join(b"\0" + pixels[y * row : (y + 1) * row] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2 if channels == 3 else 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def make_images(folder: Path, kind: str, size: str | None, rng: random.Random) -> None:
    """COUNT random PNGs in `folder`: RGB ``000.png ...`` (images), or black-and-white
    ``000_mask.png ...`` (masks: two values, 0 and 255, as segmentation masks have)."""
    count, width, height = (int(n) for n in size.split("x")) if size else IMAGES
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        if kind == "images":
            pixels, channels, name = rng.randbytes(width * height * 3), 3, f"{index:03d}.png"
        else:
            pixels = bytes(rng.choice((0, 255)) for _ in range(width * height))
            channels, name = 1, f"{index:03d}_mask.png"
        (folder / name).write_bytes(png(width, height, channels, pixels))


def make_data(entry: Entry, folder: Path) -> list[str]:
    """Write what the note's make: tokens ask for; problems, if any."""
    problems = []
    for match in MAKE.finditer(entry.note):
        rng = random.Random(f"{entry.name}:{match['path']}")
        if match["kind"] in ("images", "masks"):
            make_images(folder / match["path"], match["kind"], match["size"], rng)
            continue
        if match["kind"] == "folder":  # an empty folder the README says to make first
            (folder / match["path"]).mkdir(parents=True, exist_ok=True)
            continue
        text = synthesize(match["kind"], rng)
        if text is None:
            problems.append(f"unknown make kind {match['kind']!r}")
            continue
        target = folder / match["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return problems


def shorten(entry: Entry, script: Path) -> list[str]:
    """Give the module-level constants the note's set: tokens name their short-run values."""
    problems = []
    for match in SET.finditer(entry.note):
        target = script.parent / match["file"] if match["file"] else script
        text = target.read_text(encoding="utf-8")
        line = re.compile(rf"^{match['name']}\s*=[^#\n]*", re.MULTILINE)
        text, count = line.subn(f"{match['name']} = {match['value']} ", text, count=1)
        if not count:
            problems.append(f"no module-level {match['name']} = ... to set in {target.name}")
        target.write_text(text, encoding="utf-8")
    return problems


@dataclass(frozen=True)
class Interpreter:
    """What runs the scripts and verify: --python, --standins, and where ddpify is."""

    python: str = sys.executable
    standins: Path | None = None
    ddpify_root: Path | None = None  # put on PYTHONPATH when `python` is another interpreter


def ddpify_root() -> Path:
    """The folder holding the ddpify package this process would import (without importing it)."""
    spec = find_spec("ddpify")
    if spec is not None and spec.origin:
        return Path(spec.origin).resolve().parent.parent
    return Path(__file__).resolve().parent.parent


def environment(root: Path, interpreter: Interpreter = Interpreter()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    paths = [str(root), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    if interpreter.standins is not None:
        paths.insert(0, str(interpreter.standins))
        env[STANDINS_VARIABLE] = "1"
    if interpreter.ddpify_root is not None:
        paths.append(str(interpreter.ddpify_root))
    env.update(
        PYTHONPATH=os.pathsep.join(paths),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        CUDA_VISIBLE_DEVICES="",
        MPLBACKEND="Agg",
    )
    return env


def run(command: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> Finished:
    """Run `command` in its own process group; kill the whole group at `timeout` and when done
    (a DataLoader worker or a torchrun child must not outlive it)."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        returncode: int | None
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    return Finished(returncode, stdout, stderr, time.monotonic() - started)


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def last_error(stderr: str) -> str:
    """The last exception line of a (possibly multi-rank) stderr, else its last line."""
    found = [
        RANK_PREFIX.sub("", match["line"]).strip()
        for raw in stderr.splitlines()
        if (match := EXCEPTION.match(raw.strip()))
    ]
    found = [line for line in found if not line.startswith(("torch.distributed.elastic", "["))]
    useful = [line for line in found if "ChildFailedError" not in line]
    if useful:
        return useful[-1]
    rest = lines(stderr)
    return RANK_PREFIX.sub("", rest[-1]) if rest else "(no stderr)"


def classify_conversion(finished: Finished, script: Path, output: Path) -> tuple[str, str]:
    err = lines(finished.stderr)
    if finished.timed_out:
        return "error", f"ddpify still running after {CONVERT_TIMEOUT:g} s"
    if finished.returncode == 0:
        if output.is_file() and output.read_bytes() != script.read_bytes():
            return "converted", f"{sum(' DDP' in line for line in err)} changes reported"
        unchanged = [line.split("unchanged:", 1)[1].strip() for line in err if "unchanged:" in line]
        return "left alone", unchanged[0] if unchanged else (err[-1] if err else "no reason given")
    if finished.returncode == 1:
        cannot = [line.split("cannot:", 1)[1].strip() for line in err if "cannot:" in line]
        return "refused", cannot[0] if cannot else (err[-1] if err else "no reason given")
    return "error", f"exit {finished.returncode}: {err[-1] if err else '(no stderr)'}"


def verify_reason(finished: Finished) -> str:
    """The first check that did not pass, from verify's JSON report; else its stderr."""
    try:
        report = json.loads(finished.stdout)
    except ValueError:
        return last_error(finished.stderr)
    if not isinstance(report, dict):
        return last_error(finished.stderr)
    for check in report.get("checks") or []:
        if not isinstance(check, dict):
            continue
        status = str(check.get("status", ""))
        if status not in ("pass", "passed", "ok", "not exercised"):
            reason = f"{check.get('name', '?')} {status}: {check.get('summary', '')}"
            details = "\n".join(str(line) for line in check.get("details") or [])
            if any(EXCEPTION.match(line.strip()) for line in details.splitlines()):
                reason += f" | {last_error(details)}"
            return reason
    return str(report.get("verdict", ""))


def measure(
    entry: Entry,
    mirror: Path,
    work: Path,
    timeout: float,
    steps: int,
    interpreter: Interpreter = Interpreter(),
) -> Result:
    result = Result(entry)
    git = git_dir(mirror, entry.repo)
    if git is None:
        result.reason = f"no git directory for {entry.repo} under {mirror}"
        return result
    root = work / "tree"
    try:
        _, result.missing_blobs = extract(git, entry.commit, root)
    except (subprocess.CalledProcessError, ValueError, OSError) as error:
        result.reason = f"could not extract {entry.commit[:12]}: {error}"
        return result
    script = root / entry.path
    if not script.is_file():
        result.reason = f"{entry.path} not in {entry.commit[:12]} (or its blob is missing)"
        return result
    folder = script.parent
    result.notes += make_data(entry, folder)
    result.notes += shorten(entry, script)
    output = folder / f"{script.stem}_ddp.py"
    env = environment(root, interpreter)
    converted = run(
        [sys.executable, "-m", "ddpify", script.name, "-o", output.name],
        folder,
        env,
        CONVERT_TIMEOUT,
    )  # ddpify converts with this interpreter; the scripts and verify run with --python
    python = interpreter.python
    result.outcome, result.reason = classify_conversion(converted, script, output)
    if result.outcome != "converted" or not entry.runnable:
        return result

    args = shlex.split(entry.args.replace("{work}", str(folder)))
    torchrun = [
        python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        output.name, *args,
    ]  # fmt: skip
    ran = run(torchrun, folder, env, timeout)
    if ran.timed_out:
        result.run, result.run_reason = "timeout", f"still running after {timeout:g} s"
    elif ran.returncode == 0:
        result.run = "ok"
    else:
        result.run, result.run_reason = "crashed", last_error(ran.stderr)

    # verify starts its runs with its own interpreter (sys.executable -m ddpify.verify.harness)
    verify = [
        python, "-m", "ddpify.verify", script.name, output.name, "--steps", str(steps),
        "--timeout", f"{timeout:g}", "--json", "--", *args,
    ]  # fmt: skip
    # verify runs the conversion, then the original, each with --timeout.
    limit = 2 * timeout + 60
    checked = run(verify, folder, env, limit)
    if checked.timed_out:
        result.verify, result.verify_reason = "timeout", f"verify still running at {limit:g} s"
    else:
        code = checked.returncode
        result.verify = VERIFY_EXITS.get(code if code is not None else -1, f"exit {code}")
        if code != 0:
            result.verify_reason = verify_reason(checked)
    return result


def clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def short_name(entry: Entry) -> str:
    name = entry.name
    return name if len(name) <= NAME_WIDTH else "…" + name[-(NAME_WIDTH - 1) :]


def print_row(index: int, result: Result) -> None:
    reason = result.reason
    print(
        f"{index:>3} {short_name(result.entry):<{NAME_WIDTH}} {result.outcome:<10} "
        f"{clip(reason, REASON_WIDTH):<{REASON_WIDTH}} {result.run or '-':<7} "
        f"{result.verify or '-':<14} {result.seconds:>5.0f}",
        flush=True,
    )


def print_header() -> None:
    print(
        f"{'#':>3} {'repo/path':<{NAME_WIDTH}} {'outcome':<10} {'reason':<{REASON_WIDTH}} "
        f"{'run':<7} {'verify':<14} {'secs':>5}"
    )
    print("-" * (3 + NAME_WIDTH + 10 + REASON_WIDTH + 7 + 14 + 5 + 6))


def print_totals(results: list[Result], waiting: int = 0) -> None:
    outcomes = Counter(result.outcome for result in results)
    repos = {result.entry.repo for result in results}
    runnable = [r for r in results if r.entry.runnable]
    tried = [r for r in results if r.outcome == "converted" and r.entry.runnable]
    more = f"; {waiting} more with --standins" if waiting else ""
    print()
    print(
        f"scripts: {len(results)} from {len(repos)} repositories ({len(runnable)} runnable{more})"
    )
    print(
        "ddpify: "
        + ", ".join(
            f"{outcomes.get(name, 0)} {name}"
            for name in ("converted", "left alone", "refused", "error")
        )
    )
    runs = Counter(r.run for r in tried)
    verdicts = Counter(r.verify for r in tried)
    print(
        f"converted and runnable: {len(tried)}; ran ok under torchrun: {runs.get('ok', 0)}"
        f" (crashed {runs.get('crashed', 0)}, timeout {runs.get('timeout', 0)});"
        f" verified equivalent: {verdicts.get('equivalent', 0)}"
        f" (except per-process statistics "
        f"{verdicts.get('equivalent except per-process statistics', 0)},"
        f" not equivalent {verdicts.get('not equivalent', 0)},"
        f" could not run {verdicts.get('could not run', 0)},"
        f" timeout {verdicts.get('timeout', 0)})"
    )
    reasons = Counter(
        LINE_NUMBER.sub("", r.reason) for r in results if r.outcome in ("left alone", "refused")
    )
    if reasons:
        print("reasons for leaving alone or refusing:")
        for reason, count in reasons.most_common():
            print(f"  {count:>3}  {reason}")


def print_details(results: list[Result]) -> None:
    detailed = [
        r for r in results if r.run_reason or r.verify_reason or r.notes or r.outcome == "error"
    ]
    if not detailed:
        return
    print()
    print("details:")
    for result in detailed:
        print(f"  {result.entry.name}")
        if result.outcome == "error":
            print(f"    ddpify: {result.reason}")
        if result.run_reason:
            print(f"    run ({result.run}): {result.run_reason}")
        if result.verify_reason:
            print(f"    verify ({result.verify}): {result.verify_reason}")
        for note in result.notes:
            print(f"    note: {note}")


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Convert, run and verify the public training scripts of a corpus file."
    )
    parser.add_argument("corpus", type=Path, help="the corpus file, e.g. bench/corpus.tsv")
    parser.add_argument("mirror", type=Path, help="folder holding the OWNER+NAME git snapshots")
    parser.add_argument("--only", default="", help="only entries whose repo/path contains this")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for each run and verify run"
    )
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps verify compares")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work folders")
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter that runs the scripts and ddpify verify (default: this one)",
    )
    parser.add_argument(
        "--standins",
        type=Path,
        default=None,
        help="a folder put first on every run's PYTHONPATH, with DDPIFY_BENCH_STANDINS=1 (its "
        "sitecustomize.py loads); the scripts marked 'standins' run only with it",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_arguments(argv)
    if not options.corpus.is_file():
        print(f"{options.corpus}: no such file", file=sys.stderr)
        return 2
    if not options.mirror.is_dir():
        print(f"{options.mirror}: no such folder", file=sys.stderr)
        return 2
    if options.standins is not None and not options.standins.is_dir():
        print(f"{options.standins}: no such folder", file=sys.stderr)
        return 2
    python = shutil.which(options.python)
    if python is None:
        print(f"{options.python}: no such interpreter", file=sys.stderr)
        return 2
    other = Path(python).absolute() != Path(sys.executable).absolute()
    interpreter = Interpreter(
        python=str(Path(python).absolute()) if other else sys.executable,
        standins=options.standins.resolve() if options.standins is not None else None,
        ddpify_root=ddpify_root() if other else None,
    )
    entries = [e for e in read_corpus(options.corpus) if options.only in e.name]
    waiting = 0
    if interpreter.standins is None:
        waiting = sum(e.needs_standins for e in entries)
        entries = [replace(e, runnable=False) if e.needs_standins else e for e in entries]
    temp = Path(tempfile.mkdtemp(prefix="ddpify-corpus-"))
    print(
        f"ddpify on {len(entries)} scripts from {options.corpus}; snapshots in {options.mirror};"
        f" timeout {options.timeout:g} s, verify --steps {options.steps}"
    )
    if other or interpreter.standins is not None:
        print(
            f"scripts and verify run with {interpreter.python}; stand-ins: {interpreter.standins}"
        )
    print_header()
    results: list[Result] = []
    try:
        for index, entry in enumerate(entries, start=1):
            started = time.monotonic()
            work = temp / f"{index:03d}"
            work.mkdir()
            result = measure(
                entry, options.mirror, work, options.timeout, options.steps, interpreter
            )
            result.seconds = time.monotonic() - started
            results.append(result)
            print_row(index, result)
            if not options.keep:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        if options.keep:
            print(f"kept: {temp}")
        else:
            shutil.rmtree(temp, ignore_errors=True)
    print_totals(results, waiting)
    print_details(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
