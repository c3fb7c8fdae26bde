"""Run the converted script as N processes and the original as one, each under the harness
in a fresh working directory, with a timeout that kills every process of the run.

Each process gets its own session (so its own process group: a DataLoader worker it forks
dies with it) and its own stdout/stderr files, so what each rank printed is known apart.
The converted run goes first: the batch size its ranks train with decides the batch the
original trains with (N x B for a per-gpu conversion, unchanged for a global one); the
original's process then measures both runs' tensors. This module never imports torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ddpify
from ddpify.emit import DRAWS_OF_ITS_OWN, FOR_EVALUATION, MADE_AGAIN
from ddpify.source import InputError
from ddpify.verify.records import COMPARISON, STACK, STDERR, STDOUT, ProcessRecord

# What torchrun sets; none of it may leak from the caller into the runs.
LAUNCHER_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
)  # fmt: skip
# A rank that died leaves its peers blocked in a collective: how long they get to notice.
PEER_GRACE = 5.0
POLL = 0.05
FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<function>.*)$')

Progress = Callable[[str], None]


# What of the script's own folder is copied next to it, for data it reads by a relative path
# (`open("input.txt")`): files up to this size, this many folders deep, this much in all.
STAGE_FILE_LIMIT = 50 * 2**20
STAGE_TOTAL_LIMIT = 200 * 2**20
STAGE_DEPTH = 2
# A folder or file the script names above its own folder (`"../../data/%s" % name`, as
# PyTorch-GAN does): how many levels up, and its name. Those are copied too, as deep as
# UPWARD_DEPTH, at the same place relative to the copy of the script's folder.
UPWARD = re.compile(r"""(?<![\w./])((?:\.\./){1,3})(\w[\w.-]*)""")
UPWARD_DEPTH = 4


def stage_folder(source: Path, workdir: Path, depth: int = STAGE_DEPTH) -> None:
    """Copy the files of `source` (the script's folder) into `workdir`, within the limits
    above, skipping hidden folders and caches: each run gets its own copy, so whatever a
    script writes over them never reaches the user's files."""
    total = 0
    for folder, folders, files in os.walk(source):
        here = Path(folder)
        level = len(here.relative_to(source).parts)
        folders[:] = [
            name
            for name in sorted(folders)
            if level < depth and not name.startswith(".") and name != "__pycache__"
        ]
        for name in sorted(files):
            path = here / name
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size > STAGE_FILE_LIMIT or total + size > STAGE_TOTAL_LIMIT or path.is_symlink():
                continue
            target = workdir / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.copy2(path, target)
                total += size


def upward(source: Path, args: tuple[str, ...]) -> set[tuple[int, str]]:
    """What the script (or its arguments) names above its folder: (levels up, name)."""
    text = "\n".join([read_text(source), *args])
    return {(found[1].count("../"), found[2]) for found in UPWARD.finditer(text)}


def work_folder(folder: Path, source: Path, args: tuple[str, ...]) -> Path:
    """Where a run's copy of the script's folder goes: `folder/work`, or as many folders
    deeper, named as the script's own folder and its parents, as the script reaches up
    with `../`."""
    levels = max((up for up, _ in upward(source, args)), default=0)
    parts = source.resolve().parent.parts
    return folder.joinpath("work", *parts[len(parts) - levels :])


def stage(source: Path, workdir: Path, args: tuple[str, ...]) -> None:
    """Copy the script's folder, and what it names above it, into the run's folder."""
    here = source.resolve().parent
    stage_folder(here, workdir)
    for up, name in sorted(upward(source, args)):
        if up >= len(here.parents):  # not the file system's root
            continue
        found, target = here.parents[up - 1] / name, workdir.parents[up - 1] / name
        if found.is_dir() and not target.exists():
            stage_folder(found, target, UPWARD_DEPTH)
        elif found.is_file() and found.stat().st_size <= STAGE_FILE_LIMIT:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found, target)


@dataclass(frozen=True)
class VerifyOptions:
    original: Path
    converted: Path
    script_args: tuple[str, ...] = ()
    nproc: int = 2
    steps: int = 3  # per epoch
    epochs: int = 2
    timeout: float = 120.0
    keep: bool = False
    # float32 gradients averaged over ranks differ from the single-process ones in the last
    # bits: the elementwise tolerance on parameters (see ddpify.verify.judge).
    rtol: float = 1e-5
    atol: float = 1e-6
    # Arguments added to script_args for a second run of both scripts in the same folders,
    # which resumes from what the first left (the script's own resume flag); None: a second
    # run only for a script that looked for a file and then wrote it (it resumes by itself).
    resume: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    source: str = ""  # the line's text, when the file is the script


@dataclass
class ProcessRun:
    """One process of a run: how it ended and what it left."""

    role: str
    rank: int
    pid: int
    pgid: int
    returncode: int | None = None
    timed_out: bool = False
    killed: bool = False  # by the runner, after a peer rank failed
    duration: float = 0.0
    stdout: str = ""
    stderr: str = ""
    stack: list[Frame] = field(default_factory=list)  # innermost first; empty if not dumped
    record: ProcessRecord = field(default_factory=ProcessRecord)

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.killed


@dataclass
class Run:
    """The original (one process) or the converted script (N processes)."""

    role: str
    script: Path  # the copy in the working directory
    workdir: Path
    processes: list[ProcessRun]
    duration: float = 0.0
    timed_out: bool = False

    @property
    def succeeded(self) -> bool:
        return all(process.succeeded for process in self.processes)


@dataclass
class Verification:
    """Everything the checks need, gathered before the temporary folder is removed."""

    options: VerifyOptions
    temp_dir: Path
    converted: Run | None = None
    original: Run | None = None
    comparison: dict[str, Any] | None = None
    train_loader: int | None = None
    train_batch: int | None = None
    # The original trains every step on whole tensors, which the conversion splits: the
    # original runs with its own batch, the one the ranks share out.
    whole_batch: bool = False
    # What the original was run with instead of its own text, and why (DDP013's sorted
    # set orders: an arbitrary order the conversion fixed is not a difference).
    normalised: list[str] = field(default_factory=list)
    kept: bool = False
    pgids: list[int] = field(default_factory=list)  # every process group the runner started
    # Both scripts run again in the same folders, to resume from what the first runs left;
    # `resumed_why` says with which arguments, or why the scripts resume by themselves.
    resumed: Verification | None = None
    resumed_why: str = ""
    # The original and one process of the conversion: their steps compare sample for sample
    # where N processes' cannot (training batches drawn without a DataLoader, nanoGPT's
    # `torch.randint` indices: each rank draws its own).
    single: Verification | None = None
    # What the conversion reports each process computes over its own part of the batch
    # (DDP007: a mean weighted by the classes' weights, DETR's `num_boxes`, Barlow Twins'
    # cross-correlation): N processes' steps may differ from the original's for that reason.
    per_process: list[str] = field(default_factory=list)
    # How the original failed when given the N ranks' global batch, where it ran with its own
    # (shapes fixed to its batch size: `x.view(batch_size, -1)`, `torch.ones(batch_size, 1)`
    # labels): it is then the original of `single`, and `comparison` is that pair's.
    batch_bound: str = ""


def free_port() -> int:
    """A port nothing listens on now (the OS picks it): never a fixed one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def validate(options: VerifyOptions) -> None:
    for path in (options.original, options.converted):
        if path.is_dir():
            raise InputError(f"{path}: is a directory, not a Python file")
        if not path.is_file():
            raise InputError(f"{path}: no such file")
    if options.nproc < 1:
        raise InputError(f"--nproc must be at least 1, not {options.nproc}")
    if options.steps < 1:
        raise InputError(f"--steps must be at least 1, not {options.steps}")
    if options.epochs < 1:
        raise InputError(f"--epochs must be at least 1, not {options.epochs}")
    if options.timeout <= 0:
        raise InputError(f"--timeout must be positive, not {options.timeout}")


def base_environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in LAUNCHER_VARIABLES}
    package_root = str(Path(ddpify.__file__).resolve().parent.parent)
    paths = [package_root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(
        PYTHONUNBUFFERED="1",  # a killed rank's prints are still in its file
        PYTHONHASHSEED="0",
        OMP_NUM_THREADS="1",  # what torchrun sets too; the harness also sets 1 thread
        PYTHONPATH=os.pathsep.join(paths),
    )
    return env


def parse_stack(text: str, script: Path) -> list[Frame]:
    """The last faulthandler dump's thread that runs the script, innermost frame first."""
    threads: list[list[Frame]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append([])
        elif threads and (match := FRAME.match(line)):
            threads[-1].append(Frame(match["file"], int(match["line"]), match["function"]))
    if not threads:
        return []
    # a later dump (SIGUSR1 after the timeout dump) lists the same threads again
    script_path = str(script.resolve())
    running = [frames for frames in threads if any(f.file == script_path for f in frames)]
    frames = (running or threads)[-1]
    try:
        lines = script.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    return [
        Frame(f.file, f.line, f.function, lines[f.line - 1].strip())
        if f.file == script_path and 0 < f.line <= len(lines)
        else f
        for f in frames
    ]


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@dataclass
class Started:
    role: str
    folder: Path
    script: Path
    processes: list[tuple[subprocess.Popen[bytes], ProcessRun]]


class ProcessStarter:
    """Starts the runs' processes and makes sure none outlives the verification."""

    def __init__(self, verification: Verification, progress: Progress):
        self.verification = verification
        self.options = verification.options
        self.progress = progress
        self.env = base_environment()
        self.running: list[subprocess.Popen[bytes]] = []

    def kill_all(self) -> None:
        for pgid in self.verification.pgids:
            signal_group(pgid, signal.SIGKILL)
        for process in self.running:
            with contextlib.suppress(Exception):
                process.wait(timeout=5)
        self.running.clear()

    def dump_at(self) -> float:
        """When a process dumps its stack: a little before the timeout kills it."""
        return time.time() + self.options.timeout - min(3.0, self.options.timeout / 4)

    def start(
        self,
        role: str,
        source: Path,
        nproc: int,
        extra: list[str],
        text: bytes | None = None,
        again: tuple[str, ...] | None = None,
    ) -> Started:
        """Start a run's processes; with `--wait-for` in `extra` they wait to be released.
        `text`, when given, is run in place of the source's own. `again`: the arguments of
        a second run in the first one's working folder, with its records apart."""
        first = self.verification.temp_dir / role
        folder = first if again is None else first.with_name(f"{role}-again")
        workdir = work_folder(first, source, self.options.script_args)
        script = workdir / source.name
        if again is None:
            workdir.mkdir(parents=True)
            stage(source, workdir, self.options.script_args)
            shutil.copy2(source, script)
            if text is not None:
                script.write_bytes(text)
        folder.mkdir(exist_ok=True)
        arguments = self.options.script_args if again is None else again
        port = free_port() if role == "converted" else None
        processes: list[tuple[subprocess.Popen[bytes], ProcessRun]] = []
        for rank in range(nproc):
            out = folder / f"rank{rank}"
            out.mkdir()
            env = dict(self.env)
            if role == "converted":
                env.update(
                    RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                    LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK="0", ROLE_RANK=str(rank),
                    MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                )  # fmt: skip
            command = [
                sys.executable, "-m", "ddpify.verify.harness", "--role", role,
                "--out", str(out), "--workdir", str(workdir), "--steps", str(self.options.steps),
                "--epochs", str(self.options.epochs),
                "--dump-at", repr(self.dump_at()), "--source-dir", str(source.resolve().parent),
                "--parent", str(os.getpid()),
                "--nproc", str(self.options.nproc), "--rtol", repr(self.options.rtol),
                "--atol", repr(self.options.atol), *extra, str(script), *arguments,
            ]  # fmt: skip
            with open(out / STDOUT, "wb") as stdout, open(out / STDERR, "wb") as stderr:
                popen = subprocess.Popen(
                    command,
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    start_new_session=True,
                )
            self.running.append(popen)
            self.verification.pgids.append(popen.pid)  # a new session: its pgid is its pid
            processes.append((popen, ProcessRun(role, rank, popen.pid, popen.pid)))
        return Started(role, folder, script, processes)

    def finish(self, started: Started) -> Run:
        """Wait for a started run (the timeout counts from now) and collect its records."""
        begun = time.monotonic()
        processes, folder, script = started.processes, started.folder, started.script
        timed_out = self._wait(processes, begun, begun + self.options.timeout)
        run = Run(
            started.role, script, script.parent, [p for _, p in processes], time.monotonic() - begun
        )
        run.timed_out = timed_out
        for rank, (_, process) in enumerate(processes):
            out = folder / f"rank{rank}"
            process.stdout = read_text(out / STDOUT)
            process.stderr = read_text(out / STDERR)
            process.stack = parse_stack(read_text(out / STACK), script)
            process.record = ProcessRecord.read(out)
        return run

    def _wait(
        self,
        processes: list[tuple[subprocess.Popen[bytes], ProcessRun]],
        started: float,
        deadline: float,
    ) -> bool:
        """Wait for every process; kill them all at the deadline, or a little after one
        failed. True when the timeout struck."""
        grace_until: float | None = None
        try:
            while True:
                now = time.monotonic()
                pending = []
                for popen, process in processes:
                    code = popen.poll()
                    if code is None:
                        pending.append((popen, process))
                    elif process.returncode is None:
                        process.returncode, process.duration = code, now - started
                        if code != 0 and grace_until is None:
                            grace_until = now + PEER_GRACE
                if not pending:
                    return False
                timed_out = now >= deadline
                if timed_out or (grace_until is not None and now >= grace_until):
                    if not timed_out:  # the timeout's dump has not happened: ask for one
                        for popen, _ in pending:
                            signal_group(popen.pid, signal.SIGUSR1)
                        time.sleep(0.5)
                    for popen, process in pending:
                        signal_group(popen.pid, signal.SIGKILL)
                        process.returncode = popen.wait()
                        process.duration = time.monotonic() - started
                        process.timed_out, process.killed = timed_out, not timed_out
                    return timed_out
                time.sleep(POLL)
        finally:
            # Also on Ctrl-C; and a group may hold a forked worker its leader left behind.
            for popen, _ in processes:
                signal_group(popen.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    popen.wait(timeout=5)


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def added_loader_lines(converted: Path) -> set[int]:
    """The lines of the converted script where the conversion makes a DataLoader of its
    own: a loader another file makes, made again to take the sampler, or the training set's
    loader for an evaluation (told by the comments it writes on them). They have no twin in
    the original, whose loaders the converted run's are matched to by the order they are
    made in."""
    try:
        lines = converted.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return set()
    return {
        number
        for number, line in enumerate(lines, start=1)
        if "DataLoader(" in line
        and (FOR_EVALUATION in line or (number > 1 and MADE_AGAIN in lines[number - 2]))
    }


def added_seed_lines(converted: Path) -> set[int]:
    """The lines of the converted script where the conversion seeds each process apart
    (`torch.manual_seed(1337 + dist.get_rank())`, told by its comment, and the seeds right
    after it): a single process skips them and draws on from the script's own seed, as the
    original does."""
    try:
        lines = converted.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return set()
    found: set[int] = set()
    for number, line in enumerate(lines, start=1):
        if DRAWS_OF_ITS_OWN in line or (
            number - 1 in found and line.rstrip().endswith("+ dist.get_rank())")
        ):
            found.add(number)
    return found


def training_batch(run: Run, nproc: int) -> tuple[int | None, int | None]:
    """The DataLoader the converted rank 0 trained from, and N x its batch size: the batch
    the original must train with so that its step k sees what the N ranks saw together."""
    record = run.processes[0].record
    first = next(iter(record.primary_steps), None)
    if first is None or first.loader is None:
        return None, None
    loader = record.loader(first.loader)
    if loader is None or loader.batch_size is None:
        return first.loader, None
    return first.loader, loader.batch_size * nproc


def padded_by_the_sampler(run: Run, train_loader: int | None) -> bool:
    """Whether rank 0 trained through a DistributedSampler, which pads its dataset to a
    multiple of the processes: the original's training sampler is then padded alike."""
    record = run.processes[0].record if run.processes else None
    if record is None or train_loader is None:
        return False
    loader = record.loader(train_loader)
    return loader is not None and loader.sampler == "DistributedSampler"


def sharded_batches(run: Run, nproc: int, train_loader: int | None) -> dict[str, int]:
    """The other loaders rank 0 read through a DistributedSampler (a second training loader,
    read in `zip(...)` with the first: round-16 audit s02), and N x their batch sizes: the
    original trains with those too."""
    record = run.processes[0].record if run.processes else None
    if record is None:
        return {}
    return {
        str(loader.ordinal): loader.batch_size * nproc
        for loader in record.loaders
        if loader.sampler == "DistributedSampler"
        and loader.ordinal != train_loader
        and loader.ordinal >= 0
        and loader.batch_size is not None
    }


def run_verification(options: VerifyOptions, progress: Progress | None = None) -> Verification:
    """Run both scripts and collect their records; InputError for unusable arguments. Both
    run in float64; when that makes one of them fail a dtype check (a GRU given float32
    inputs, quantization-aware training's fake quantizers), both run again as they are."""
    validate(options)
    verification = _run_both(options, progress, float64=True)
    failure = _fails_in_float64(verification)
    if failure is not None:
        if progress is not None:
            progress(f"in float64: {failure}; again in float32")
        again = _run_both(options, progress, float64=False)
        again.pgids[:0] = verification.pgids
        verification = again
    if _fails_with_the_global_batch(verification):
        if progress is not None:
            progress("the original failed with the ranks' global batch: again with its own")
        one = replace(options, nproc=1, resume=None)
        single = _run_both(one, progress, failure is None, resume=False)
        verification.pgids += single.pgids
        if single.original is not None and single.original.succeeded and single.converted:
            stderr = verification.original.processes[0].stderr  # type: ignore[union-attr]
            verification.batch_bound = (stderr.strip().splitlines() or ["failed"])[-1][:200]
            replicas = (verification.comparison or {}).get("replicas")  # the N ranks'
            verification.single, verification.original = single, single.original
            verification.comparison = single.comparison
            if verification.comparison is not None and replicas is not None:
                verification.comparison = {**verification.comparison, "replicas": replicas}
    if verification.single is None and _unmatched_batches(verification):
        if progress is not None:
            progress("batches drawn without a DataLoader: one process of the conversion too")
        one = replace(options, nproc=1, resume=None)
        verification.single = _run_both(one, progress, failure is None, resume=False)
        verification.pgids += verification.single.pgids
    return verification


# What every DDP007 note of a loss each process computes over its own part says: "DDP
# averages the processes' means" (or quotients, or losses); not their gradients, which the
# conversion scales (a summed loss) and verify must still compare.
PER_PROCESS = "DDP averages the processes'"
PER_PROCESS_WHAT = ("means", "quotients", "losses")


def _fails_with_the_global_batch(verification: Verification) -> bool:
    """The converted run succeeded with several processes, and the original, given their
    global batch, failed (not hung): whether that batch is the cause is found by running it
    again with its own."""
    original, converted = verification.original, verification.converted
    return (
        verification.options.nproc > 1
        and verification.train_batch is not None
        and original is not None
        and converted is not None
        and converted.succeeded
        and not original.succeeded
        and not original.timed_out
    )


def _unmatched_batches(verification: Verification) -> bool:
    """Both runs trained, several processes, and batches from no DataLoader that the
    conversion splits whole, or from a sampler that draws them (with replacement), or
    random numbers drawn while training that the check cannot draw per sample: the ranks
    drew their own, which no original step matches."""
    original, converted = verification.original, verification.converted
    if not (
        verification.options.nproc > 1
        and original is not None
        and converted is not None
        and original.succeeded
        and converted.succeeded
    ):
        return False
    record = converted.processes[0].record
    if verification.per_process:  # the N processes' steps may differ by a reported cause
        return True
    if any(change.kind in ("random", "ghost") for change in record.changes):
        return True  # drawn while training, or normalised over parts of the batch
    if any(change.kind == "random" for change in original.processes[0].record.changes):
        return True  # (the original's, of a fixed count: not per sample at its global batch)
    if verification.train_loader is None:
        return not verification.whole_batch
    loader = record.loader(verification.train_loader)
    return loader is not None and loader.draws


# What a script's dtype checks say when float64 meets the float32 it expects.
DTYPE_FAILURE = re.compile(
    r"^\w*(?:Error|Exception)\b.*(?:Double|float64|dtype|scalar type)", re.MULTILINE
)


def _fails_in_float64(verification: Verification) -> str | None:
    """The dtype error a process of either run ended with, if one did."""
    for run in (verification.converted, verification.original):
        for process in run.processes if run else ():
            if process.returncode not in (0, None):
                found = DTYPE_FAILURE.search(process.stderr)
                if found:
                    return found.group().strip()[:200]
    return None


def _run_both(
    options: VerifyOptions, progress: Progress | None, float64: bool, resume: bool = True
) -> Verification:
    say = progress or (lambda _: None)
    temp_dir = Path(tempfile.mkdtemp(prefix="ddpify-verify-"))
    verification = Verification(options=options, temp_dir=temp_dir, kept=options.keep)
    starter = ProcessStarter(verification, say)
    precision = [] if float64 else ["--float32"]
    try:
        _run_pair(starter, verification, say, precision)
        again_with = _resume_arguments(verification) if resume else None
        if again_with is not None:
            arguments, why = again_with
            say(f"again, to resume: {why}")
            again = Verification(
                options=options,
                temp_dir=temp_dir,
                whole_batch=verification.whole_batch,
                normalised=verification.normalised,
            )
            _run_pair(starter, again, say, precision, arguments)
            verification.resumed, verification.resumed_why = again, why
    finally:
        starter.kill_all()
        if options.keep:
            say(f"kept: {temp_dir}")
        else:
            shutil.rmtree(temp_dir, ignore_errors=True)
    return verification


def _run_pair(
    starter: ProcessStarter,
    into: Verification,
    say: Progress,
    precision: list[str],
    again: tuple[str, ...] | None = None,
) -> None:
    """Run the converted script, then the original with the batch the converted ranks
    trained with, and gather both runs' records `into` the verification given. `again`: the
    arguments of a second run of both, in the first runs' folders."""
    options, temp_dir = into.options, into.temp_dir
    suffix = "" if again is None else "-again"
    go = temp_dir / f"go{suffix}.json"
    say(f"converted: {options.converted} as {options.nproc} processes")
    added = added_loader_lines(options.converted)
    listed = ["--added-loaders", ",".join(map(str, sorted(added)))] if added else []
    seeds = added_seed_lines(options.converted) if options.nproc == 1 else set()
    listed += ["--skip-seeds", ",".join(map(str, sorted(seeds)))] if seeds else []
    first = starter.start(
        "converted", options.converted, options.nproc, listed + precision, again=again
    )
    # Read while the converted run trains (the second run's copy is in place already).
    text = _read_the_original(into) if again is None else None
    # The original imports torch meanwhile, then waits for the batch it must train with.
    extra = [
        "--compare-with", str(temp_dir / f"converted{suffix}"), "--wait-for", str(go), *precision
    ]  # fmt: skip
    second = starter.start("original", options.original, 1, extra, text, again=again)
    converted = starter.finish(first)
    into.converted = converted
    say(describe(converted, options))
    loader, batch = training_batch(converted, options.nproc)
    into.train_loader, into.train_batch = loader, batch
    settings = {
        "train_loader": loader,
        "train_batch": batch,
        "also_resized": sharded_batches(converted, options.nproc, loader),
        "padded": padded_by_the_sampler(converted, loader),
        "dump_at": starter.dump_at(),
    }
    go.with_suffix(".tmp").write_text(json.dumps(settings), encoding="utf-8")
    go.with_suffix(".tmp").replace(go)  # whole, at once
    say(f"original: {options.original} as 1 process")
    original = starter.finish(second)
    into.original = original
    say(describe(original, options))
    comparison_file = temp_dir / f"original{suffix}" / "rank0" / COMPARISON
    if comparison_file.exists():
        into.comparison = json.loads(comparison_file.read_text(encoding="utf-8"))


def _resume_arguments(verification: Verification) -> tuple[tuple[str, ...], str] | None:
    """The arguments of a second run that resumes, and why there is one: --resume's, or the
    script's own when the original looked for a file and then wrote it (a checkpoint it
    resumes from when it finds it). None: no second run."""
    options, original, converted = (
        verification.options, verification.original, verification.converted
    )  # fmt: skip
    if original is None or converted is None or not (original.succeeded and converted.succeeded):
        return None
    if options.resume is not None:
        return (*options.script_args, *options.resume), f"with {shlex.join(options.resume)}"
    record = original.processes[0].record
    written = {write.path for write in record.writes if write.inside}
    found = [path for path in record.missing if path in written]
    if not found:
        return None
    return options.script_args, f"the original looked for {found[0]}, then wrote it"


def _read_the_original(verification: Verification) -> bytes | None:
    """What ddpify's own analysis says of the original (no torch needed): whether it trains
    on whole tensors every step, and its text with the set orders DDP013 sorts sorted (None
    when there are none, or it cannot be read)."""
    from ddpify.convert import convert_source
    from ddpify.options import ConvertOptions
    from ddpify.rule import NoteKind

    path = verification.options.original
    try:
        source = path.read_bytes()
        converted = convert_source(source, path.name, ConvertOptions(), path)
        verification.whole_batch = converted.whole_batch
        verification.per_process = [
            f"line {note.line}: {note.message}"
            for note in converted.notes
            if note.code == "DDP007"
            and note.kind is NoteKind.INFO  # a note, not a change (the world-size scaling)
            and any(f"{PER_PROCESS} {what}" in note.message for what in PER_PROCESS_WHAT)
        ]
        sorted_ = convert_source(
            source, path.name, ConvertOptions(select=frozenset({"DDP013"})), path
        )
    except (InputError, OSError, RecursionError):
        return None
    if not sorted_.changed:
        return None
    lines = sorted({note.line for note in sorted_.notes if note.code == "DDP013"})
    verification.normalised.append(
        f"orders taken from a set sorted, as the conversion sorts them (DDP013, line "
        f"{', '.join(map(str, lines))}): Python orders a set of strings differently in every "
        "process"
    )
    return sorted_.output


def describe(run: Run, options: VerifyOptions) -> str:
    steps = [p.record.stop_step or 0 for p in run.processes]
    if run.timed_out:
        return f"{run.role}: timed out after {options.timeout:g} s; killed all its processes"
    failed = [p.rank for p in run.processes if not p.succeeded]
    if failed:
        return f"{run.role}: failed (rank {', '.join(map(str, failed))}) after {run.duration:.1f} s"
    return f"{run.role}: {min(steps, default=0)} steps in {run.duration:.1f} s"
