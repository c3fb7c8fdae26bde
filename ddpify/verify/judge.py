"""Judge a verification: the seven named checks, each pass, fail, not exercised or could not
check, from what the processes recorded and what the original's process measured.

Tolerance. The converted ranks average float32 gradients computed over N slices of the
batch; the original sums the whole batch at once. The two agree to the last bits, not
bitwise, so parameters are compared elementwise with |converted - original| <= atol +
rtol * |original| (rtol 1e-5, atol 1e-6). Adaptive optimizers (Adam and its family) divide
each element's step by its own gradient scale: where a gradient nearly cancels to zero a
last-bit difference in it becomes a step difference of up to about lr. For them, and only
for them, a few elements (at most ADAPTIVE_SHARE of the elements) may exceed the tolerance
if each stays within 2 x lr per step taken; the report counts and names them. With one
process nothing is averaged and the parameters must be identical.

Each named check is a class of its own; all of them read one frozen _Facts, built once from
the verification.
"""

from __future__ import annotations

import difflib
import math
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, ClassVar

from ddpify.verify.records import (
    DRAWING,
    ProcessRecord,
    StepRecord,
    as_named_by,
    by_position,
    unwrapped_keys,
)
from ddpify.verify.runner import ProcessRun, Run, Verification, VerifyOptions

ADAPTIVE_OPTIMIZERS = frozenset(
    {"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "SparseAdam", "Adagrad", "Adadelta",
     "RMSprop", "Adafactor", "Rprop"}
)  # fmt: skip
ADAPTIVE_SHARE = 1e-3
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
NUMBER = re.compile(_NUMBER)
LINE_SIMILARITY = 0.8
CHECK_NAMES = (
    "runs", "replicas-in-sync", "equivalence", "data-sharding", "side-effects-once", "evaluation",
    "resume",
)  # fmt: skip
# A map_location naming one GPU: `"cuda:1"`, `1`, `device(type='cuda', index=1)`.
FIXED_GPU = re.compile(r"^'cuda:(\d+)'$|^(\d+)$|^device\(type='cuda', index=(\d+)\)$")
# Numbers in a printed line that no two runs share: durations, clocks and dates, rates,
# memory, a progress bar's counters.
VOLATILE = re.compile(
    r"\d+:\d\d(?::\d\d)?(?:\.\d+)?"  # 12:04, 0:00:03.5
    r"|\d{4}-\d\d-\d\d"  # 2026-11-26
    rf"|{_NUMBER}\s*"
    r"(?:ms|s|sec|secs|seconds|min|mins|minutes|h|hours|it/s|s/it|samples/s|MB|GB|KB|MiB|GiB)\b"
    rf"|(?:time|took|elapsed|eta|duration|speed|throughput)\W{{0,3}}\s*{_NUMBER}",
    re.IGNORECASE,
)
PROGRESS_BAR = re.compile(r"\|\s*\d+/\d+\s*\[")
# A number standing on its own: not the `1` of `f1` or `top1`.
FREE_NUMBER = re.compile(rf"(?<![A-Za-z_\d.]){_NUMBER}")
_HELD_OUT = r"val|test|eval|dev\b"
HELD_OUT = re.compile(_HELD_OUT)
EVALUATION_LABEL = re.compile(
    rf"{_HELD_OUT}|acc|top-?\d|f1|auc|\bmap\b|iou|psnr|ssim|bleu|rouge|perplex|ppl"
    r"|precision|recall|score|correct|error|\berr\b|wer\b|cer\b|dice"
)
# Printed numbers count as the same when they differ by at most a unit of their last printed
# digit and EVALUATION_RTOL of their size: the parameters agree to about 1e-5.
EVALUATION_RTOL = 1e-3


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_EXERCISED = "not exercised"
    UNCHECKED = "could not check"


@dataclass
class Check:
    name: str
    status: Status
    summary: str
    details: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    checks: list[Check]
    # 0 equivalent, 1 not equivalent, 2 could not run or establish, 3 equivalent except
    # what each process computes over its own part (BatchNorm's statistics, a reported loss)
    exit_code: int
    verdict: str
    setup: list[str]  # how the runs were made: processes, device, batch, tolerance
    changes: list[str]  # exactly what the harness changed to make the check possible


def judge(verification: Verification) -> Outcome:
    facts = _Facts.of(verification)
    # judged first: whether the parameters diverged decides how side-effects-once reads
    # checkpoints that differ
    equivalence = _Equivalence(facts).check()
    if equivalence.data.get("per_process"):
        facts = replace(facts, per_process=True)
    checks = [
        _Runs(facts).check(),
        _ReplicasInSync(facts).check(),
        equivalence,
        _DataSharding(facts).check(),
        _SideEffectsOnce(
            facts,
            diverged=equivalence.status is Status.FAIL,
            unchecked=equivalence.status is Status.UNCHECKED,
        ).check(),
        _Evaluation(
            facts,
            diverged=equivalence.status is Status.FAIL,
            unchecked=equivalence.status is Status.UNCHECKED,
        ).check(),
        _Resume(facts).check(),
    ]
    if not facts.original_ran:
        exit_code, verdict = 2, "could not run the original script"
    elif any(check.status is Status.FAIL for check in checks):
        exit_code, verdict = 1, "not equivalent"
    elif any(check.status is Status.UNCHECKED for check in checks):
        exit_code, verdict = 2, "could not establish equivalence"
    elif facts.batch_norm and facts.per_process:
        exit_code, verdict = (
            3,
            (
                "equivalent except BatchNorm statistics and the loss, which each process "
                "computes over its own part, as the conversion reported"
            ),
        )
    elif facts.batch_norm:
        exit_code, verdict = (
            3,
            (
                "equivalent except BatchNorm statistics, which are per process "
                "(SyncBatchNorm makes them global)"
            ),
        )
    elif facts.per_process:
        exit_code, verdict = (
            3,
            (
                "equivalent except the loss, which each process computes over its own part, as "
                "the conversion reported (DDP007)"
            ),
        )
    else:
        exit_code, verdict = 0, "equivalent"
    return Outcome(checks, exit_code, verdict, _setup(facts), _changes(facts))


def fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2g}" if value else "0"


def shown(indices: Iterable[int], limit: int = 8) -> str:
    items = sorted(indices)
    text = ", ".join(map(str, items[:limit]))
    return f"[{text}{', ...' if len(items) > limit else ''}]"


def tail(text: str, lines: int = 12) -> list[str]:
    return [f"    {line}" for line in text.rstrip().splitlines()[-lines:]]


def follows_a_peer(stderr: str) -> bool:
    """A rank's error only says a peer went away (gloo's, NCCL's wording)."""
    return any(
        words in stderr
        for words in ("Connection closed by peer", "Connection reset by peer", "remote worker")
    )


def stack_lines(process: ProcessRun, script_name: str) -> list[str]:
    if not process.stack:
        return [f"rank {process.rank}: no stack (the process ended before the dump)"]
    innermost = process.stack[0]
    own = next((f for f in process.stack if f.source or f.file.endswith("/" + script_name)), None)
    where = f"{innermost.file.rsplit('/', 1)[-1]}:{innermost.line} in {innermost.function}"
    if own is None:
        return [f"rank {process.rank}: stuck in {where}"]
    text = f"rank {process.rank}: stuck at {script_name}:{own.line} in {own.function}"
    text += f": {own.source}" if own.source else ""
    if own is not innermost:
        text += f"  (innermost: {where})"
    return [text]


# A TensorBoard event file: its writer's thread writes it whenever it flushes, so how many
# times it is written says nothing of how many events it got (pytorch-cifar100: 392 writes
# by rank 0 against the original's 104).
TENSORBOARD_EVENTS = "events.out.tfevents."


def _counted(path: str) -> bool:
    """Whether how many times rank 0 writes `path` is compared with the original's: not for
    what a writer's own thread flushes when it likes (a TensorBoard event file)."""
    return not path.rsplit("/", 1)[-1].startswith(TENSORBOARD_EVENTS)


def _named_as(mine: Counter[str], theirs: Counter[str], options: VerifyOptions) -> Counter[str]:
    """The converted rank's writes, under the original's names where the two runs name one
    file differently: a copy of the script itself (`shutil.copy(__file__, out)`, the
    converted script's name), or a name made of the time or the process id (TensorBoard's
    `events.out.tfevents.<time>.<host>.<pid>.0`, a run folder stamped with the date: round-16
    audit s15, s17; `as_named_by`)."""
    renamed = {path: path.replace(options.converted.name, options.original.name) for path in mine}
    names = as_named_by(list(renamed.values()), list(theirs))
    named: Counter[str] = Counter()
    for path, count in mine.items():
        named[names[renamed[path]]] += count
    return named


@dataclass(frozen=True)
class _Facts:
    """What every check reads: the two runs, their processes' records and what the original's
    process measured. Frozen, so that no check can change what the checks after it see."""

    verification: Verification
    options: VerifyOptions
    n: int  # the converted run's processes
    original: Run | None
    converted: Run | None
    comparison: dict[str, Any] | None
    orig_record: ProcessRecord  # an empty record if the original never started
    ranks: tuple[ProcessRecord, ...]  # the converted run's, by rank
    original_ran: bool  # it succeeded and took a step
    converted_ran: bool  # every rank succeeded and took the same, nonzero, number of steps
    # The N processes' steps differ from the original's only as the conversion reported
    # (DDP007), established with one process of it: the other checks read that process too.
    per_process: bool = False

    @classmethod
    def of(cls, verification: Verification) -> _Facts:
        original, converted = verification.original, verification.converted
        first = original.processes[0] if original else None
        orig_record = first.record if first else ProcessRecord()
        ranks = tuple(p.record for p in converted.processes) if converted else ()
        return cls(
            verification=verification,
            options=verification.options,
            n=verification.options.nproc,
            original=original,
            converted=converted,
            comparison=verification.comparison,
            orig_record=orig_record,
            ranks=ranks,
            original_ran=bool(original and original.succeeded and orig_record.primary_steps),
            converted_ran=bool(
                converted
                and converted.succeeded
                and len({len(r.primary_steps) for r in ranks}) == 1
                and ranks[0].primary_steps
            ),
        )

    @property
    def batch_norm(self) -> bool:
        """BatchNorm trained across several processes: its statistics were made global for
        the check, and are per process in the conversion as written."""
        return self.n > 1 and any(c.kind == "batchnorm" for r in self.ranks for c in r.changes)

    @property
    def drawn(self) -> list[str]:
        """Random numbers the ranks, or the original, drew while training that the check
        could not draw per sample (`random.random`, `multinomial`; noise of a fixed count,
        `torch.randn(args.batch, nz)`, a batch's shape in each rank but not in the original,
        given the global batch: round-29 audit A stylegan_lazy_regularization): the
        original's and the ranks' differ."""
        records = (*self.ranks, self.orig_record)
        return sorted(
            {c.detail.split()[0] for r in records for c in r.changes if c.kind == "random"}
        )

    @property
    def bound_text(self) -> str:
        """Why the original ran with its own batch, not the ranks' global one."""
        return (
            f"the original fails when given the {self.n} ranks' global batch "
            f"({self.verification.batch_bound}), and runs with its own: its shapes are fixed "
            "to its batch size; one process of the conversion, taking that batch, was run "
            "against it"
        )

    @property
    def ghost(self) -> bool:
        """BatchNorm over parts of each batch (Ghost BatchNorm's virtual batches): a rank's
        k-th part holds other samples than the original's k-th."""
        return self.n > 1 and any(c.kind == "ghost" for r in self.ranks for c in r.changes)

    @property
    def expected_steps(self) -> int:
        """The steps both runs should have recorded (fewer than --steps if a script ends)."""
        counts = [len(r.primary_steps) for r in [self.orig_record, *self.ranks]]
        return min(counts) if counts else 0

    def complete(self) -> bool:
        return self.original_ran and self.converted_ran

    def why_no_comparison(self) -> str:
        if self.comparison is not None and "error" in self.comparison:
            return f"measuring the tensors failed: {self.comparison['error']}"
        if not self.original_ran:
            return "the original did not run"
        return "the converted run left no parameters to compare"

    def batch_semantics(self) -> tuple[str | None, str]:
        """("per-gpu" | "global" | None, explanation)."""
        batch, ordinal = self.verification.train_batch, self.verification.train_loader
        if ordinal is None and self.verification.whole_batch and self.n == 1:
            return "whole", "full batch: one process trains on all of the samples, as the original"
        if ordinal is None and self.verification.whole_batch:
            return "whole", (
                f"full batch: every step trains on all of the samples, which the {self.n} "
                "ranks split between them and the original takes whole"
            )
        if ordinal is None and self.n == 1:
            return "single", (
                "one process, batches from no DataLoader: it draws them as the original does "
                "(rank 0's seed is the script's own)"
            )
        if ordinal is None:
            return None, "the converted script's training batches do not come from a DataLoader"
        if batch is None:
            return None, (
                "the training DataLoader's batches come from a batch sampler with no batch size "
                "(the script's own): the original's cannot be made the ranks' global batch"
            )
        drawing = self.ranks[0].loader(ordinal) if self.ranks and self.n > 1 else None
        if drawing is not None and drawing.draws:
            return None, (
                f"the training sampler draws its samples ({drawing.sampler.removesuffix(DRAWING)}"
                ", with replacement or by weights)"
            )
        per_rank = batch // self.n
        loader = self.orig_record.loader(ordinal)
        if loader is None or loader.declared_batch_size is None:
            return None, "the original has no matching DataLoader to compare batches with"
        declared = loader.declared_batch_size
        if loader.batch_size != batch:
            return None, (
                f"could not give the original's DataLoader #{loader.ordinal} a batch of "
                f"{batch} (a custom batch_sampler?)"
            )
        if per_rank == declared:
            kind = "per-gpu" if self.n > 1 else "per-gpu (= global with one process)"
            return "per-gpu", (
                f"batch {kind}: {per_rank} per rank, {batch} in all; the original "
                f"ran at {batch} (its script says {declared})"
            )
        if per_rank * self.n == declared:
            return "global", (
                f"batch global: {per_rank} per rank x {self.n} = the original's {declared}"
            )
        return "neither", (
            f"the converted script's per-rank batch {per_rank} is neither the original's "
            f"{declared} (per-gpu) nor {declared}/{self.n} (global)"
        )

    def step_record(self, record: ProcessRecord, optimizer: int, step: int) -> StepRecord | None:
        return next((s for s in record.steps if s.optimizer == optimizer and s.step == step), None)

    def allowance(self, row: dict[str, Any]) -> tuple[bool, str]:
        """Whether an adaptive optimizer's few amplified elements explain `row`."""
        step = self.step_record(self.orig_record, row["optimizer"], row["step"])
        if step is None or step.kind not in ADAPTIVE_OPTIMIZERS or not step.lr:
            return False, ""
        bound = 2 * max(step.lr) * row["step"]
        share = row["outside"] / max(1, row["elements"])
        if share <= ADAPTIVE_SHARE and row["max_abs"] <= bound:
            return True, f"allowed for {step.kind}, each <= 2 x lr x step = {fmt(bound)}"
        return False, ""


class _NamedCheck(ABC):
    """One of the seven named checks, judged from the facts they all share."""

    name: ClassVar[str]  # as the report shows it, one of CHECK_NAMES

    def __init__(self, facts: _Facts) -> None:
        self.facts = facts

    @abstractmethod
    def check(self) -> Check: ...


class _Runs(_NamedCheck):
    """Both runs ran: the original as one process taking steps, the converted one as N
    processes that formed one process group and took as many steps each."""

    name = "runs"

    def check(self) -> Check:
        facts = self.facts
        details: list[str] = []
        status = Status.PASS
        original, converted = facts.original, facts.converted
        if original is None or converted is None:
            return Check(self.name, Status.UNCHECKED, "the runs did not take place")
        process = original.processes[0]
        steps = len(facts.orig_record.primary_steps)
        if original.timed_out:
            status = Status.FAIL
            details += [f"original: timed out after {facts.options.timeout:g} s"]
            details += stack_lines(process, original.script.name)
        elif not process.succeeded:
            status = Status.FAIL
            details += [f"original: exit code {process.returncode}", *tail(process.stderr)]
        elif not steps:
            status = Status.FAIL
            details.append("original: it took no optimizer step (does it train?)")
        original_text = f"original: 1 process, {steps} step(s) in {original.duration:.1f} s"

        conv_steps = [len(r.primary_steps) for r in facts.ranks]
        if converted.timed_out:
            status = Status.FAIL
            details.append(
                f"converted: hung: timed out after {facts.options.timeout:g} s; all "
                f"{facts.n} processes killed; where each rank was:"
            )
            for proc in converted.processes:
                details += ["  " + line for line in stack_lines(proc, converted.script.name)]
        elif not converted.succeeded:
            status = Status.FAIL
            crashed = [p for p in converted.processes if p.returncode and not p.killed]
            # the rank that failed first is the cause; its peers' errors usually follow from it
            first = min(crashed, key=lambda p: (follows_a_peer(p.stderr), p.duration), default=None)
            for proc in converted.processes:
                if proc.killed:
                    state = "killed after a peer failed"
                else:
                    last = proc.stderr.strip().splitlines()[-1:] or [""]
                    state = f"exit {proc.returncode} after {proc.duration:.1f} s: {last[0][:160]}"
                details.append(f"converted rank {proc.rank}: {state}")
            if first is not None:
                details += [f"rank {first.rank}'s stderr ends:", *tail(first.stderr)]
            for proc in converted.processes:
                if proc.killed:
                    details += ["  " + line for line in stack_lines(proc, converted.script.name)]
        else:
            sizes = {r.world_size for r in facts.ranks}
            if sizes != {facts.n}:
                status = Status.FAIL
                details.append(
                    f"converted: its processes did not form one process group of {facts.n} "
                    f"(world sizes seen: {sorted(map(str, sizes))})"
                )
            if len(set(conv_steps)) > 1:
                status = Status.FAIL
                details.append(f"converted: the ranks took different numbers of steps {conv_steps}")
            if not any(conv_steps):
                status = Status.FAIL
                details.append("converted: it took no optimizer step")
        backend = facts.ranks[0].backend if facts.ranks else None
        device = "CPU" if not (facts.ranks and facts.ranks[0].cuda) else "GPU"
        converted_text = (
            f"converted: {facts.n} processes ({backend or 'no process group'}, {device}), "
            f"{min(conv_steps, default=0)} step(s) each in {converted.duration:.1f} s"
        )
        if status is Status.PASS and steps < facts.options.steps:
            details.append(f"the scripts ended after {facts.expected_steps} steps")
        if facts.verification.batch_bound:
            details.append(
                f"original: with its own batch; given the {facts.n} ranks' global batch it "
                f"failed: {facts.verification.batch_bound}"
            )
        return Check(
            self.name,
            status,
            f"{original_text}; {converted_text}",
            details,
            {
                "original_seconds": round(original.duration, 2),
                "converted_seconds": round(converted.duration, 2),
                "timed_out": converted.timed_out or original.timed_out,
                "steps": {"original": steps, "converted": conv_steps},
                "stacks": {
                    f"{p.role}{p.rank}": [f"{f.file}:{f.line} in {f.function}" for f in p.stack]
                    for p in [*converted.processes, process]
                    if p.stack and (p.timed_out or p.killed)
                },
            },
        )


class _ReplicasInSync(_NamedCheck):
    """Every rank holds the same parameters as rank 0 after each step."""

    name = "replicas-in-sync"

    def check(self) -> Check:
        facts = self.facts
        name = self.name
        if facts.n == 1:
            return Check(name, Status.NOT_EXERCISED, "one process: no replicas to compare")
        if facts.comparison is None or "error" in facts.comparison:
            return Check(name, Status.UNCHECKED, facts.why_no_comparison())
        # The cause before its effect: rates that differ make the parameters differ.
        disagreeing = _learning_rates_disagree(facts.ranks)
        if disagreeing is not None:
            step, rank, lr, rank_zeros = disagreeing
            return Check(
                name,
                Status.FAIL,
                f"at step {step} rank {rank} steps with learning rate(s) {list(lr)}, rank 0 with "
                f"{list(rank_zeros)}",
                [
                    "the ranks' schedules disagree: a scheduler stepped on a value of each "
                    "rank's own (ReduceLROnPlateau on its own loss) cuts the rate at different "
                    "epochs, and the replicas drift apart"
                ],
                {"step": step, "rank": rank},
            )
        rows = sorted(facts.comparison["replicas"], key=lambda r: (r["step"], r["rank"]))
        for row in rows:
            if not row["exact"]:
                first = row["first_outside"] or {}
                return Check(
                    name,
                    Status.FAIL,
                    f"after step {row['step']} rank {row['rank']} differs from rank 0: "
                    f"{first.get('name', row['worst'])} by up to {fmt(row['max_abs'])}",
                    [
                        "the ranks' models drift apart: is the model wrapped in DDP (and are "
                        "the initial parameters the same on every rank)?"
                    ],
                    {"step": row["step"], "rank": row["rank"], "max_abs": row["max_abs"]},
                )
        steps = sorted({row["step"] for row in rows})
        wanted = min((len(r.primary_steps) for r in facts.ranks), default=0)
        if not facts.converted_ran or len(steps) < wanted or not steps:
            return Check(
                name, Status.UNCHECKED,
                f"identical after steps {steps or 'none'}, but the converted run did not finish",
            )  # fmt: skip
        return Check(
            name,
            Status.PASS,
            f"all {facts.n} ranks hold bit-identical parameters after each of steps "
            f"{steps[0]}-{steps[-1]}",
            data={"steps": steps},
        )


def _learning_rates_disagree(
    ranks: Sequence[ProcessRecord],
) -> tuple[int, int, tuple[float, ...], tuple[float, ...]] | None:
    """The first step at which a rank's learning rates differ from rank 0's."""
    if not ranks:
        return None
    first = {(s.optimizer, s.step): s.lr for s in ranks[0].steps}
    for rank, record in enumerate(ranks[1:], start=1):
        for step in record.steps:
            theirs = first.get((step.optimizer, step.step))
            if theirs is not None and theirs != step.lr:
                return step.step, rank, step.lr, theirs
    return None


def _replayed_rates(facts: _Facts, semantics: str | None) -> list[str]:
    """Where the original's own schedule gave other learning rates than the conversion's,
    which the original's run stepped with instead."""
    differ = [s for s in facts.orig_record.steps if s.own_lr and s.own_lr != s.lr]
    if not differ:
        return []
    first = differ[0]
    ratio = first.lr[0] / first.own_lr[0] if first.own_lr[0] else math.nan
    lines = [
        f"learning rates: from step {first.step} the conversion's schedule gives "
        f"{[float(f'{lr:.6g}') for lr in first.lr]} where the original's gives "
        f"{[float(f'{lr:.6g}') for lr in first.own_lr]} (x{ratio:.4g}); the original's run "
        f"stepped with the conversion's rates ({len(differ)} step(s)), so the parameters "
        "compare like for like"
    ]
    if semantics == "per-gpu":
        lines.append(
            "expected for a schedule sized from the data: each process takes 1/N of the "
            "steps per epoch, and the check resized the original's batch but not the numbers "
            "its schedule was sized from"
        )
    return lines


class _Equivalence(_NamedCheck):
    """The converted run's parameters match the original's after each step, within the tolerance."""

    name = "equivalence"

    def check(self) -> Check:
        facts = self.facts
        name = self.name
        tolerance = f"rtol {facts.options.rtol:g}, atol {facts.options.atol:g}"
        if facts.comparison is None or "error" in facts.comparison:
            return Check(name, Status.UNCHECKED, facts.why_no_comparison())
        semantics, batch_text = facts.batch_semantics()
        single = facts.verification.single
        if facts.verification.batch_bound and single is not None:
            return _with_one_process(facts, _Facts.of(single), "", intro=facts.bound_text)
        if semantics is None and single is not None:
            return _with_one_process(facts, _Facts.of(single), batch_text)
        if semantics is None:
            return Check(name, Status.UNCHECKED, batch_text)
        rows = sorted(facts.comparison["equivalence"], key=lambda r: (r["step"], r["optimizer"]))
        details = [batch_text]
        if semantics == "neither":
            return Check(name, Status.FAIL, batch_text, [])
        notes = _replayed_rates(facts, semantics)
        if facts.batch_norm:
            notes.append(
                "BatchNorm in training mode: for the check both runs took its statistics over "
                "the whole global batch (every rank's part all-reduced, as SyncBatchNorm does); "
                "the conversion as written normalises each process's part with its own"
            )
        keyed = sorted(
            {c.detail.split()[0] for r in facts.ranks for c in r.changes if c.kind == "keyed"}
        )
        if keyed:
            notes.append(
                f"random numbers drawn while training ({', '.join(keyed)}): for the check "
                "each sample's were drawn from a generator seeded by its dataset index, in "
                "both runs alike, so the original's whole batch and each rank's part got the "
                "same numbers for the same sample (data-sharding says whether the ranks' own "
                "draws differ)"
            )
        if facts.ghost and single is not None:
            why = "BatchNorm over parts of each batch (virtual, or ghost, batches)"
            return _with_one_process(
                facts,
                _Facts.of(single),
                why,
                intro=f"{why}: a rank's k-th part holds other samples than the original's k-th; "
                "one process of the conversion was run against the original",
            )
        drawn = facts.drawn
        if drawn and single is not None and facts.n > 1:
            # (round-24 audits: word2vec's negatives, a collate's neighbour sampling, teacher
            # forcing by `random.random()` failed here, each a correct conversion)
            why = f"random numbers drawn while training ({', '.join(drawn)})"
            return _with_one_process(facts, _Facts.of(single), why)
        if drawn:
            notes.append(
                f"random numbers drawn while training ({', '.join(drawn)}): the original "
                "draws them for its whole batch, each rank for its own part, from a stream of "
                "its own when the conversion seeds each rank apart (as ddpify's do) or from "
                "the same stream as the others (identical noise on every rank: a bug of its "
                "own); not expected to match either way"
            )
        exact_needed = facts.n == 1
        worst_abs = max((row["max_abs"] for row in rows), default=0.0)
        worst_rel = max((row["max_rel"] for row in rows), default=0.0)
        allowances = []
        for row in rows:
            label = f"step {row['step']}"
            if row["optimizer"]:
                label += f" (optimizer {row['optimizer']})"
            line = (
                f"{label}: max abs {fmt(row['max_abs'])}, max rel {fmt(row['max_rel'])}, "
                f"{row['outside']} of {row['elements']:,} elements outside ({tolerance})"
            )
            if row["missing"] or row["extra"]:
                return Check(
                    name, Status.FAIL,
                    f"the parameters do not correspond: missing {row['missing'][:5]}, "
                    f"extra {row['extra'][:5]}",
                    details + notes,
                )  # fmt: skip
            allowed, why = (False, "")
            if not row["within"]:
                allowed, why = facts.allowance(row)
                line += f": {why}" if allowed else ""
            if not row["within"] and not allowed:
                first = row["first_outside"] or {}
                mine = facts.step_record(facts.orig_record, row["optimizer"], row["step"])
                kind = f", {mine.kind}" if mine else ""
                which = f" (optimizer {row['optimizer']}{kind})" if row["optimizer"] else ""
                summary = (
                    f"diverged at step {row['step']}{which}: {first.get('name')} differs by up to "
                    f"{fmt(first.get('max_abs', math.inf))} (max rel "
                    f"{fmt(first.get('max_rel', math.inf))}; {first.get('outside', '?')} of "
                    f"{first.get('elements', '?')} elements outside {tolerance})"
                )
                details.append(line)
                theirs = facts.step_record(facts.ranks[0], row["optimizer"], row["step"])
                if mine and theirs and mine.lr != theirs.lr:  # not replayed: groups differ
                    ratio = theirs.lr[0] / mine.lr[0] if mine.lr and mine.lr[0] else math.nan
                    details.append(
                        f"learning rate: {list(theirs.lr)} in the converted run, "
                        f"{list(mine.lr)} in the original (x{ratio:g})"
                    )
                reported = facts.verification.per_process
                if reported and single is not None and facts.n > 1:
                    alone = _with_one_process(
                        facts, _Facts.of(single), "", intro=(
                            f"with {facts.n} processes: {summary}, which the conversion "
                            f"reported: each process computes the loss over its own part "
                            f"({reported[0]}); one process of the conversion was run against "
                            "the original"
                        ),
                    )  # fmt: skip
                    if alone.status is Status.PASS:
                        alone.data["per_process"] = True
                        return alone
                return Check(
                    name, Status.FAIL, summary, details + notes,
                    {"step": row["step"], "parameter": first.get("name"),
                     "max_abs": first.get("max_abs"), "max_rel": first.get("max_rel"),
                     "rows": rows},
                )  # fmt: skip
            if allowed:
                allowances.append(row["step"])
            details.append(line)
        steps = sorted({row["step"] for row in rows})
        if not facts.complete() or not steps or len(steps) < facts.expected_steps:
            return Check(
                name, Status.UNCHECKED,
                f"steps {steps or 'none'} agree, but a run did not finish",
                details + notes,
            )  # fmt: skip
        data = {
            "steps": steps, "max_abs": worst_abs, "max_rel": worst_rel,
            "rtol": facts.options.rtol, "atol": facts.options.atol, "batch": semantics,
            "rows": rows,
        }  # fmt: skip
        summary = (
            f"steps {steps[0]}-{steps[-1]} match: max abs {fmt(worst_abs)}, "
            f"max rel {fmt(worst_rel)} ({tolerance})"
        )
        if exact_needed:
            if all(row["exact"] for row in rows):
                summary = f"steps {steps[0]}-{steps[-1]}: bit-identical (one process)"
            else:
                details.append(
                    f"not bit-identical with one process: it needs the tolerance {tolerance} "
                    "(max abs above); a single rank still goes through DDP's gradient buckets "
                    "and the division by the world size"
                )
        if allowances:
            summary += "; a few elements within the adaptive-optimizer allowance"
            details.append(
                "adaptive-optimizer allowance: Adam-like steps divide by each element's own "
                "gradient scale, so where a gradient nearly cancels to 0 a last-bit difference "
                f"becomes a step difference up to ~lr; at most {ADAPTIVE_SHARE:.1%} of the "
                "elements may exceed the tolerance, each by at most 2 x lr x steps"
            )
        return Check(name, Status.PASS, summary, details + notes, data)


def _one_process(facts: _Facts) -> _Facts | None:
    """The run of one process of the conversion, when the N ranks each drew or sliced their
    own batches (which no step of the original matches): what to judge the training's
    effects by."""
    single = facts.verification.single
    if single is not None and (
        facts.batch_semantics()[0] is None
        or facts.drawn
        or facts.per_process
        or facts.ghost
        or facts.verification.batch_bound
    ):
        return _Facts.of(single)
    return None


def _with_one_process(facts: _Facts, one: _Facts, why: str, intro: str = "") -> Check:
    """Equivalence from the original against one process of the conversion: the N ranks
    each drew their own batches, which no step of the original matches. Judged only where
    that process trained on the original's samples (the rows its model took): a script that
    draws from a stream of its own cannot be compared."""
    intro = intro or (
        f"{why}: each of {facts.n} ranks draws its own, which no step of the original "
        "matches; one process of the conversion was run against the original"
    )
    skipped = sorted({c.detail for r in one.ranks for c in r.changes if c.kind == "seeds"})
    if not one.ranks:
        return Check(_Equivalence.name, Status.UNCHECKED, intro)
    pairs = zip(one.orig_record.primary_steps, one.ranks[0].primary_steps, strict=False)
    for mine, theirs in pairs:
        if mine.rows is not None and theirs.rows is not None and mine.rows != theirs.rows:
            return Check(
                _Equivalence.name,
                Status.UNCHECKED,
                f"with one process the conversion trained on other samples than the original "
                f"at step {mine.step}: it draws its batches from a stream of its own",
                [intro, *skipped],
            )
    found = _Equivalence(one).check()
    found.summary = f"with one process of the conversion: {found.summary}"
    found.details[:0] = [intro, *skipped]
    return found


class _DataSharding(_NamedCheck):
    """Each step the ranks train on disjoint samples that together are the original's batch."""

    name = "data-sharding"

    def check(self) -> Check:
        facts = self.facts
        name = self.name
        if not facts.ranks or not facts.orig_record.primary_steps:
            return Check(name, Status.UNCHECKED, "no steps to compare")
        steps = facts.expected_steps
        whole = facts.batch_semantics()[0] == "whole"
        if facts.verification.train_loader is None and not whole:
            return _drawn_apart(facts, steps)
        drawing = facts.ranks[0].loader(facts.verification.train_loader)
        if drawing is not None and drawing.draws:
            return _drawn_apart(facts, steps, drawing.sampler.removesuffix(DRAWING))
        bound = bool(facts.verification.batch_bound)  # the original took a batch of its own
        # A batch sampler of the script's own, dealt out by rank (no batch size to resize
        # the original's by): step k of the N ranks is the original's batches kN+1..kN+N.
        grouped = facts.verification.train_batch is None and not whole and facts.n > 1
        compared = 0
        repeated = False  # steps whose shared samples are the original's own repeats
        for k in range(steps):
            original = facts.orig_record.primary_steps[k].indices
            if grouped:  # in the first pass, where both runs' steps start together
                group = facts.orig_record.primary_steps[k * facts.n : (k + 1) * facts.n]
                given = [step.indices for step in group]
                original = (
                    tuple(i for indices in given for i in indices or ())
                    if (k + 1) * facts.n <= facts.options.steps and None not in given
                    else ()
                )
            per_rank = [r.primary_steps[k].indices for r in facts.ranks]
            if whole:  # no sampler: the rows the model took, fingerprinted
                original = facts.orig_record.primary_steps[k].rows
                per_rank = [r.primary_steps[k].rows for r in facts.ranks]
            if original is None or any(indices is None for indices in per_rank):
                return Check(
                    name, Status.UNCHECKED,
                    "the rows the model took could not be read (its first argument not a "
                    "tensor)" if whole else
                    "the batches' sample indices could not be read (not a DataLoader with a "
                    "sampler)",
                )  # fmt: skip
            shards = [list(i) for i in per_rank if i is not None]
            if grouped and not original:
                continue  # past the original's capped pass: the script's own sampler may
                # repeat samples across its batches, which no step of the original shows
            if _repeats_of_the_original(shards, original) and not bound:
                compared, repeated = compared + 1, True
                continue  # a sampler drawing with replacement: the original's own repeats
            for a in range(len(shards)):
                for b in range(a + 1, len(shards)):
                    shared = set(shards[a]) & set(shards[b])
                    if shared:
                        return Check(
                            name, Status.FAIL,
                            f"step {k + 1}: ranks {a} and {b} both trained on samples "
                            f"{shown(shared)} ({len(shared)} of {len(shards[a])} shared)",
                            ["each rank trains on the same data: is the training DataLoader "
                             "missing a DistributedSampler?"]
                            if len(shared) == len(shards[a]) else [],
                            {"step": k + 1, "ranks": [a, b], "shared": len(shared)},
                        )  # fmt: skip
            together = sorted(i for shard in shards for i in shard)
            compared += 1
            if not bound and together != sorted(original):
                missing = set(original) - set(together)
                extra = set(together) - set(original)
                return Check(
                    name, Status.FAIL,
                    f"step {k + 1}: the ranks' samples together are not the original's batch: "
                    f"missing {shown(missing)}, extra {shown(extra)}",
                    [f"original batch {k + 1}: {len(original)} samples; ranks: "
                     f"{[len(s) for s in shards]}"],
                    {"step": k + 1},
                )  # fmt: skip
        if not facts.complete() or steps == 0:
            return Check(
                name, Status.UNCHECKED,
                f"steps 1-{steps} were sharded, but a run did not finish" if steps
                else "no step completed on every rank",
            )  # fmt: skip
        same = _never_reshuffled(facts) or _same_draws(facts)
        if same is not None:
            return same
        field = "rows" if whole else "indices"
        sizes = [len(getattr(r.primary_steps[0], field) or ()) for r in facts.ranks]
        if grouped:
            return Check(
                name,
                Status.PASS if compared else Status.UNCHECKED,
                f"steps 1-{steps}: {facts.n} ranks on batches of the script's own batch "
                f"sampler; steps 1-{compared} are the original's batches, {facts.n} to a step, "
                "in its order" if compared else
                f"steps 1-{steps}: {facts.n} ranks on batches of the script's own batch "
                "sampler; too few of the original's steps to compare them with (raise --steps)",
                data={"steps": steps, "per_rank": sizes, "compared": compared},
            )  # fmt: skip
        total = len(getattr(facts.orig_record.primary_steps[0], field) or ())
        whole_of = (
            f"(the original ran with its own batch of {total})"
            if bound
            else f"= the original's batch of {total}"
        )
        kind = (
            "samples, shared only as the original repeats them," if repeated else "disjoint samples"
        )
        return Check(
            name,
            Status.PASS,
            f"steps 1-{steps}: {facts.n} ranks x {sizes[0] if len(set(sizes)) == 1 else sizes} "
            f"{kind} {whole_of}",
            data={"steps": steps, "per_rank": sizes, "original": total},
        )


def _repeats_of_the_original(shards: list[list[int]], original: Sequence[int] | None) -> bool:
    """The ranks' samples together are the original's batch, repeats and all: samples the
    ranks share are ones the original's batch holds as often (a sampler of the script's own
    that draws with replacement, `random.choices(ids, k=n)`), not the same data on every
    rank."""
    if not original or len(set(original)) == len(original):
        return False
    return Counter(i for shard in shards for i in shard) == Counter(original)


def _drawn_apart(facts: _Facts, steps: int, sampler: str | None = None) -> Check:
    """Batches from no DataLoader and not split whole (nanoGPT's random `get_batch`), or
    from a `sampler` that draws them (`WeightedRandomSampler`): each rank draws its own,
    which only has to differ from the others' (samples in common by chance are expected;
    the same batch on every rank is the bug)."""
    name = _DataSharding.name
    field = "rows" if sampler is None else "indices"
    source = (
        "the batches come from no DataLoader"
        if sampler is None
        else f"the training sampler ({sampler}) draws the samples"
    )
    rows = [[getattr(r.primary_steps[k], field) for r in facts.ranks] for k in range(steps)]
    if not steps or any(row is None for step in rows for row in step):
        return Check(
            name, Status.UNCHECKED,
            f"{source}, and the rows the model took could not be read (its first argument "
            "not a tensor)",
        )  # fmt: skip
    for k, per_rank in enumerate(rows, start=1):
        for a in range(len(per_rank)):
            for b in range(a + 1, len(per_rank)):
                if sorted(per_rank[a] or ()) == sorted(per_rank[b] or ()):
                    return Check(
                        name, Status.FAIL,
                        f"step {k}: ranks {a} and {b} trained on the same batch: every rank "
                        "draws the same random batches (seed each process apart, with its rank)",
                        data={"step": k, "ranks": [a, b]},
                    )  # fmt: skip
    if not facts.complete():
        return Check(name, Status.UNCHECKED, f"steps 1-{steps} differ, but a run did not finish")
    shared = [
        len(set(step[0] or ()) & set(step[1] or ())) / max(1, len(step[0] or ()))
        for step in rows
        if len(step) > 1
    ]
    how = "no DataLoader: each draws at random" if sampler is None else source
    return Check(
        name,
        Status.PASS,
        f"steps 1-{steps}: the {facts.n} ranks drew batches of their own ({how}); "
        f"{field} in common by chance: at most {max(shared, default=0):.0%}",
        data={"steps": steps},
    )


def _never_reshuffled(facts: _Facts) -> Check | None:
    """The training DistributedSampler shuffles, but its epoch is the same at every pass:
    `set_epoch` is never called, and every epoch repeats the first one's order (the check
    runs without shuffling, so the order itself cannot show it). A FAIL."""
    if not facts.ranks:
        return None
    loader = facts.verification.train_loader
    passes = [
        p
        for p in facts.ranks[0].passes
        if p.loader == loader and p.shuffled and p.sampler_epoch is not None
    ]
    if len(passes) < 2 or len({p.sampler_epoch for p in passes}) > 1:
        return None
    return Check(
        "data-sharding",
        Status.FAIL,
        f"the training DistributedSampler shuffles, but its epoch is {passes[0].sampler_epoch} "
        f"at each of {len(passes)} passes: set_epoch is never called, so every epoch "
        "repeats the first one's order",
        ["call `loader.sampler.set_epoch(epoch)` before each pass over the loader"],
        {"passes": len(passes), "epoch": passes[0].sampler_epoch},
    )


def _same_draws(facts: _Facts) -> Check | None:
    """Every rank drew the same random numbers for its batch (GAN noise, diffusion
    timesteps): each rank's samples get the noise the others' get, and the global batch
    sees N times fewer distinct draws than the original. A FAIL, with the first draw."""
    if facts.n < 2:
        return None
    by_draw: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for record in facts.ranks:
        for draw in record.draws:
            by_draw.setdefault((draw.step, draw.ordinal), []).append((draw.name, draw.digest))
    compared = [draws for draws in by_draw.values() if len(draws) == facts.n]
    if not compared or any(len({digest for _, digest in draws}) > 1 for draws in compared):
        return None
    step, _ = min(key for key, draws in by_draw.items() if len(draws) == facts.n)
    name = compared[0][0][0]
    return Check(
        "data-sharding",
        Status.FAIL,
        f"every rank drew the same random numbers ({name}, {len(compared)} draw(s) from step "
        f"{step + 1} on): identical noise on every rank",
        [
            "seed each process apart before training (e.g. torch.manual_seed(seed + rank)), "
            "so that each rank draws its own"
        ],
        {"draws": len(compared)},
    )


class _AfterEquivalence(_NamedCheck, ABC):
    """A check of what the runs wrote or printed, read knowing whether the parameters
    diverged: then checkpoints and evaluations differ for that reason, not their own."""

    def __init__(self, facts: _Facts, diverged: bool, unchecked: bool = False) -> None:
        super().__init__(facts)
        self.diverged = diverged
        # equivalence could not be checked: the runs trained on batches no step of the other
        # matches (a batch sampler of the script's own), so their tensors may differ
        self.unchecked = unchecked


class _SideEffectsOnce(_AfterEquivalence):
    """Prints, file writes and checkpoints happen once, on rank 0, as the original's do."""

    name = "side-effects-once"

    def epochs_differ(self) -> str:
        """Why rank 0 may legitimately print or save less often within the run: its epochs
        have more steps than the original's (empty when they have as many)."""
        facts = self.facts
        mine = facts.orig_record.loader(facts.verification.train_loader)
        theirs = facts.ranks[0].loader(facts.verification.train_loader) if facts.ranks else None
        if mine is None or theirs is None or mine.length is None or theirs.length is None:
            return ""
        if mine.length == theirs.length:
            return ""
        return (
            f"not comparable within {facts.options.steps} steps: a converted rank's epoch has "
            f"{theirs.length} steps, the original's {mine.length} (see data-sharding)"
        )

    def check(self) -> Check:
        facts = self.facts
        name = self.name
        if not facts.complete():
            return Check(name, Status.UNCHECKED, "a run did not finish: outputs not comparable")
        assert facts.original is not None and facts.converted is not None
        parts = [self._prints(), self._files(), self._checkpoints()]
        statuses = [status for status, _, _ in parts]
        if Status.FAIL in statuses:
            status = Status.FAIL
        elif Status.UNCHECKED in statuses:
            status = Status.UNCHECKED
        elif Status.PASS in statuses:
            status = Status.PASS
        else:
            status = Status.NOT_EXERCISED
        failing = [f"{label}: {text}" for s, label, text in parts if s is Status.FAIL]
        summary = (
            "; ".join(failing)
            if failing
            else "; ".join(f"{label} {s.value}" for s, label, _ in parts)
        )
        details = [f"{label} [{s.value}]: {text}" for s, label, text in parts]
        return Check(
            name, status, summary, details,
            {label: {"status": s.value, "detail": text} for s, label, text in parts},
        )  # fmt: skip

    def _prints(self) -> tuple[Status, str, str]:
        """Each line the original printed is printed by rank 0, as often, and by no other
        rank. Lines match with their numbers masked and a little slack, since a conversion
        may change what a line shows (a device index becomes `cpu`)."""
        facts = self.facts
        assert facts.original is not None and facts.converted is not None
        label = "prints"
        original = mask(facts.original.processes[0].stdout)
        if not original:
            return Status.NOT_EXERCISED, label, "the original printed nothing within the run"
        printed = [mask(p.stdout) for p in facts.converted.processes]
        # what other files of the script's folder print (engine.py's `print`): a conversion
        # rewrites the script alone, and reports those prints; they are noted, not failed
        elsewhere = {
            masked(text): where
            for process in facts.converted.processes
            for text, where in process.record.elsewhere.items()
        }
        noted: dict[str, str] = {}
        for rank in range(1, facts.n):
            for line in printed[rank]:
                if line in elsewhere and similar_to_any(line, original):
                    noted.setdefault(elsewhere[line], line)
            printed[rank] = [line for line in printed[rank] if line not in elsewhere]
        besides = "".join(
            f"; {line!r} is printed by every rank from {where}, which the conversion leaves "
            "as it is (and reports)"
            for where, line in sorted(noted.items())
        )
        for rank in range(1, facts.n):
            repeated = next(
                (line for line in printed[rank] if similar_to_any(line, original)), None
            )
            if repeated is not None:
                times = 1 + sum(1 for line in printed[rank] if similar(line, repeated))
                return (
                    Status.FAIL,
                    label,
                    (
                        f"{repeated!r} printed by rank {rank} too ({times} times on ranks 0 and "
                        f"{rank}, where the original prints it once): print on rank 0 only"
                    ),
                )
        remaining = list(printed[0])
        for line in original:
            match = next((i for i, mine in enumerate(remaining) if similar(mine, line)), None)
            if match is None and (why := self.epochs_differ()):
                return Status.UNCHECKED, label, f"{line!r} not printed by rank 0: {why}"
            if match is None:
                return (
                    Status.FAIL,
                    label,
                    (f"{line!r}, printed by the original, is not printed by rank 0 (as often)"),
                )
            del remaining[match]
        return (
            Status.PASS,
            label,
            (f"the original's {len(original)} line(s) printed once each, by rank 0 only{besides}"),
        )

    def _files(self) -> tuple[Status, str, str]:
        facts = self.facts
        assert facts.converted is not None
        label = "files"
        written = Counter(w.path for w in facts.orig_record.writes if w.inside)
        if not written:
            return Status.NOT_EXERCISED, label, "the original wrote no file within the run"
        by_rank = [
            _named_as(Counter(w.path for w in r.writes if w.inside), written, facts.options)
            for r in facts.ranks
        ]
        for path, count in written.items():
            writers = [rank for rank in range(facts.n) if by_rank[rank][path]]
            if [w for w in writers if w != 0]:
                times = sum(by_rank[rank][path] for rank in writers)
                return (
                    Status.FAIL,
                    label,
                    (
                        f"{path} written by ranks {', '.join(map(str, writers))} ({times} writes; "
                        f"the original wrote it {count} times): write it on rank 0 only"
                    ),
                )
            if not _counted(path):
                continue
            if by_rank[0][path] != count and (why := self.epochs_differ()):
                return Status.UNCHECKED, label, f"{path} not written as often by rank 0: {why}"
            one = _one_process(facts)
            if by_rank[0][path] != count and one is not None and one.ranks:
                # rank 0 walks its own part of the samples, in fewer steps an epoch
                alone = Counter(w.path for w in one.ranks[0].writes if w.inside)
                if _named_as(alone, written, facts.options)[path] == count:
                    continue
            if by_rank[0][path] != count:
                return (
                    Status.FAIL,
                    label,
                    (f"{path} written {by_rank[0][path]} times by rank 0, {count} by the original"),
                )
        names = ", ".join(sorted(written))
        return Status.PASS, label, f"{names}: written by rank 0 only, as often as the original"

    def _checkpoints(self) -> tuple[Status, str, str]:
        facts = self.facts
        label = "checkpoints"
        saves = facts.orig_record.saves
        if not saves:
            return Status.NOT_EXERCISED, label, "the original saved no checkpoint within the run"
        # Ranks that each drew their own batches trained on samples no original step
        # matches: the tensors are those of the one process run against the original.
        tensors, one = facts, ""
        if (alone := _one_process(facts)) is not None:
            tensors, one = alone, " (tensors: with one process)"
        compared = {(row["path"], row["occurrence"]): row for row in (tensors.comparison or {}).get(
            "checkpoints", [])}  # fmt: skip
        seen: Counter[str] = Counter()
        figures: set[str] = set()
        schedule: set[str] = set()
        unwrapped: set[str] = set()
        made: set[str] = set()
        names = as_named_by([s.path for s in facts.ranks[0].saves], [s.path for s in saves])
        for save in saves:
            occurrence = seen[save.path]
            seen[save.path] += 1
            theirs = [s for s in facts.ranks[0].saves if names[s.path] == save.path]
            if len(theirs) <= occurrence and (why := self.epochs_differ()):
                return Status.UNCHECKED, label, f"rank 0 did not save {save.path}: {why}"
            if len(theirs) <= occurrence:
                return Status.FAIL, label, f"rank 0 never saved {save.path} (save {occurrence + 1})"
            keys = set(by_position(save.keys).values())
            other = set(by_position(theirs[occurrence].keys).values())
            if unwrapped_keys(keys, other) is not None:
                unwrapped.add(save.path)  # DataParallel's `module.`, gone with it
            elif keys != other:
                prefixed = sorted(k for k in other - keys if "module." in k)
                if prefixed and {k.replace("module.", "", 1) for k in prefixed} <= keys:
                    return (
                        Status.FAIL,
                        label,
                        (
                            f"{save.path}: keys carry DDP's `module.` prefix "
                            f"({', '.join(prefixed[:3])}...): save model.module.state_dict()"
                        ),
                    )
                return (
                    Status.FAIL,
                    label,
                    (
                        f"{save.path}: keys differ: missing {sorted(keys - other)[:5]}, "
                        f"extra {sorted(other - keys)[:5]}"
                    ),
                )
            row = compared.get((save.path, occurrence))
            if row is None:
                return Status.UNCHECKED, label, f"{save.path}: the tensors were not compared"
            if keys == {""} == other and (row["values_differ"] or not row["within"]):
                # one tensor, not a state: samples the model made from rank 0's own noise
                # and batch (PyTorch-GAN's `torch.save(gen_imgs.data[:25], ...)`, round-38
                # audit B: failed as a checkpoint whose values differ)
                made.add(save.path)
                continue
            if row["values_differ"]:
                return (
                    Status.FAIL,
                    label,
                    (f"{save.path}: values differ for {', '.join(row['values_differ'][:5])}"),
                )
            figures.update(row.get("figures_differ", ()))
            schedule.update(row.get("schedule_differ", ()))
            if not row["within"] and (self.diverged or self.unchecked):
                return (
                    Status.UNCHECKED,
                    label,
                    (
                        f"{save.path}: same keys; its tensors differ as the parameters do (see "
                        "equivalence)"
                        if self.diverged
                        else f"{save.path}: same keys; its tensors not compared, as the "
                        "parameters could not be (see equivalence)"
                    ),
                )
            if not row["within"]:
                step = theirs[occurrence].step
                allowed, _ = facts.allowance({**row, "optimizer": 0, "step": max(step, 1)})
                if not allowed:
                    first = row["first_outside"] or {}
                    return (
                        Status.FAIL,
                        label,
                        (
                            f"{save.path}: {first.get('name')} differs by up to "
                            f"{fmt(first.get('max_abs', math.inf))}"
                        ),
                    )
        paths = ", ".join(sorted(seen))
        own = (
            f"; {', '.join(sorted(figures))}: a number saved beside the state, rank 0's own "
            "(as what it prints), not compared"
            if figures
            else ""
        )
        rates = (
            f"; {', '.join(sorted(schedule)[:3])}: where the schedule had got to, compared "
            "step by step in equivalence"
            if schedule
            else ""
        )
        unwrapped_ = (
            f"; {', '.join(sorted(unwrapped))}: the original's keys carry the `module.` of its "
            "nn.DataParallel, which the conversion replaced (its keys are the bare model's)"
            if unwrapped
            else ""
        ) + (
            f"; {', '.join(sorted(made)[:3])}: one tensor each, not a state, that differs "
            "(what the model made from rank 0's own batch and noise)"
            if made
            else ""
        )
        return (
            Status.PASS,
            label,
            (
                f"{paths}: {sum(seen.values())} save(s), same keys (no `module.` prefix) and the "
                f"same tensors as the original's{one}{own}{rates}{unwrapped_}"
            ),
        )


class _Evaluation(_AfterEquivalence):
    """What the original prints right after an evaluation pass (a pass over a loader other
    than the training one, run to its end) is what rank 0 prints after the same steps,
    number by number: an evaluation that reads only rank 0's shard, or counts the samples a
    DistributedSampler pads with twice, prints other numbers (issue 13)."""

    name = "evaluation"

    def check(self) -> Check:
        facts, name = self.facts, self.name
        if not facts.complete():
            return Check(name, Status.UNCHECKED, "a run did not finish: outputs not comparable")
        original = facts.orig_record.reports
        if not original:
            return Check(
                name,
                Status.NOT_EXERCISED,
                "the original printed nothing right after an evaluation pass within the run",
            )
        if self.diverged:
            return Check(
                name, Status.NOT_EXERCISED, "not compared: the parameters diverged (equivalence)"
            )
        if self.unchecked:
            return Check(
                name,
                Status.NOT_EXERCISED,
                "not compared: the parameters could not be (equivalence), nor what they evaluate",
            )
        if _one_process(facts) is not None:  # (round-24 audit B teacher_forcing_blog)
            return Check(
                name,
                Status.NOT_EXERCISED,
                "not compared: each rank drew or computed over its own part what the original "
                "takes over the whole batch, so its parameters are no run of the original's; "
                "and one process of the conversion, against which equivalence was judged, "
                "evaluates every sample whatever it reads",
            )
        remaining = list(facts.ranks[0].reports)
        compared: list[str] = []
        for report in original:
            match = next(
                (
                    mine
                    for mine in remaining
                    if mine.step == report.step and similar(masked(mine.text), masked(report.text))
                ),
                None,
            )
            if match is None:
                continue
            remaining.remove(match)
            theirs, mine = reported_numbers(report.text), reported_numbers(match.text)
            if len(theirs) != len(mine):
                continue
            apart = next(
                ((a, b) for a, b in zip(theirs, mine, strict=True) if not same_printed(a, b)),
                None,
            )
            if apart is not None:
                return Check(
                    name,
                    Status.FAIL,
                    (
                        f"after step {report.step} the original prints {report.text.strip()!r}, "
                        f"rank 0 {match.text.strip()!r} ({apart[0]} against {apart[1]}): an "
                        "evaluation over this rank's shard only, or over a DistributedSampler's "
                        "padded samples, reports other numbers"
                    ),
                )
            compared.append(report.text.strip())
        if not compared:
            return Check(
                name,
                Status.NOT_EXERCISED,
                "no line printed after an evaluation pass had a counterpart on rank 0 to compare",
            )
        return Check(
            name,
            Status.PASS,
            f"{len(compared)} line(s) printed after evaluation show the original's numbers",
            [f"compared: {line!r}" for line in compared[:5]],
        )


class _Resume(_NamedCheck):
    """Both scripts, run again in the folders their first runs left (with --resume's
    arguments, or by themselves when they look for their checkpoint), resume from it: the
    conversion loads what the original loads, every rank loads onto its own device, and
    the second runs pass runs, replicas-in-sync and equivalence as the first did."""

    name = "resume"

    def check(self) -> Check:
        verification = self.facts.verification
        again = verification.resumed
        if again is None:
            return Check(
                self.name,
                Status.NOT_EXERCISED,
                "not run again to resume: --resume ARGS runs both scripts a second time with "
                "their resume flag (a script that looks for its checkpoint resumes by itself)",
            )
        facts = _Facts.of(again)
        written = {write.path for write in self.facts.orig_record.writes if write.inside}
        taken = sorted({load.path for load in facts.orig_record.loads} & written)
        ran = f"run again ({verification.resumed_why})"
        if not taken and facts.original_ran:
            return Check(
                self.name,
                Status.NOT_EXERCISED,
                f"{ran}: the original loaded nothing its first run wrote, it started afresh",
            )
        if taken and facts.original is not None and not facts.orig_record.primary_steps:
            return Check(
                self.name,
                Status.NOT_EXERCISED,
                f"{ran}: the original resumed from {', '.join(taken)} and had nothing left to "
                "train (give it more epochs)",
            )
        details = [*self._loads(facts, taken), *self._devices(facts, taken)]
        statuses = {Status.FAIL} if details else set()
        checks = [_Runs(facts).check(), _ReplicasInSync(facts).check()]
        if facts.complete():
            checks.append(_Equivalence(facts).check())
        for check in checks:
            if check.status in (Status.FAIL, Status.UNCHECKED):
                statuses.add(check.status)
                details += [f"second run, {check.name}: {check.summary}", *check.details]
        status = min(statuses, key=[Status.FAIL, Status.UNCHECKED].index, default=Status.PASS)
        steps = len(facts.orig_record.primary_steps)
        summary = (
            f"{ran}: both resumed from {', '.join(taken)}; {steps} more step(s), in sync and "
            "equivalent"
            if status is Status.PASS
            else f"{ran}: resuming from {', '.join(taken) or 'its files'} goes wrong"
        )
        return Check(self.name, status, summary, details, {"resumed_from": taken})

    @staticmethod
    def _loads(facts: _Facts, taken: list[str]) -> list[str]:
        loaded = {load.path for record in facts.ranks for load in record.loads}
        left = [path for path in taken if path not in loaded]
        if not left or not facts.ranks:
            return []
        return [
            f"converted: no rank loaded {', '.join(left)}, which the original resumed from: "
            "the conversion started afresh"
        ]

    @staticmethod
    def _devices(facts: _Facts, taken: list[str]) -> list[str]:
        """A rank past the first that loads a checkpoint with no map_location, or onto one
        fixed GPU, in a run on GPUs (or one the harness ran on the CPU for want of them):
        its tensors go to the GPU they were saved from, rank 0's, not its own."""
        found = []
        for rank, record in enumerate(facts.ranks):
            on_gpus = record.cuda or any(change.kind == "cuda" for change in record.changes)
            if rank == 0 or not on_gpus:
                continue
            for load in record.loads:
                if load.path not in taken:
                    continue
                fixed = FIXED_GPU.match(load.map_location or "")
                gpu = next((int(g) for g in fixed.groups() if g is not None), 0) if fixed else 0
                if load.map_location is None or (fixed and gpu != rank):
                    given = (
                        "no map_location"
                        if load.map_location is None
                        else (f"map_location={load.map_location}")
                    )
                    found.append(
                        f"converted: rank {rank} loads {load.path} with {given}: on GPUs its "
                        f"tensors go to cuda:{gpu}, not the process's cuda:{rank} (give "
                        "map_location the process's device)"
                    )
        return found


def masked(line: str) -> str:
    return NUMBER.sub("#", line.rstrip())


def reported_numbers(line: str) -> list[str]:
    """The numbers of a printed line that report an evaluation: labelled as one (`val_loss`,
    `accuracy 28/45`, anything on a `Test set:` line), not as training (`train_loss`; a bare
    `loss` or, Keras-style, `acc` beside `val_loss` or `val_acc`: rank 0's own batches), and
    none from a progress bar."""
    if PROGRESS_BAR.search(line):
        return []
    line = VOLATILE.sub(" ", line)
    labelled: list[tuple[str, str]] = []
    label, end = "", 0
    training = False  # in a part of the line about training: `| train loss 1.13 acc 46.3 |`
    for found in FREE_NUMBER.finditer(line):
        between = line[end : found.start()].lower()
        if any(c.isalnum() for c in between):
            label = between  # `28/45` and `91.2 (%)` share their label
            if HELD_OUT.search(label) or any(mark in label for mark in "|;"):
                training = False
            training = training or "train" in label
        end = found.end()
        labelled.append(("train " + label if training else label, found.group()))
    if not labelled:
        return []
    twins = {_metric(label) for label, _ in labelled if HELD_OUT.search(label)}
    about_held_out = bool(HELD_OUT.search(labelled[0][0]))  # `Test set: Average loss: ...`
    return [
        number
        for label, number in labelled
        if "train" not in label
        and (
            HELD_OUT.search(label)
            or (
                _metric(label) not in twins
                and (about_held_out or EVALUATION_LABEL.search(label) is not None)
            )
        )
    ]


def _metric(label: str) -> str:
    """The last word of a label: `acc` in `- val_acc: `, `loss` in `Average loss: `."""
    words = re.findall(r"[a-z]+", label)
    return words[-1] if words else ""


def same_printed(a: str, b: str) -> bool:
    """Two printed numbers agree to within a unit of the last digit printed and
    EVALUATION_RTOL; counts (no point, no exponent) must be equal."""
    x, y = float(a), float(b)
    if x == y:
        return True
    if not any(c in a + b for c in ".eE"):
        return False
    return abs(x - y) <= max(_unit(a), _unit(b)) + EVALUATION_RTOL * max(abs(x), abs(y))


def _unit(number: str) -> float:
    """A unit of the last digit `number` shows: 0.01 for "3.14", 1e-5 for "1.0e-4"."""
    mantissa, _, exponent = number.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _setup(facts: _Facts) -> list[str]:
    """How the runs were made: processes, device, batch, tolerance."""
    lines = []
    if facts.ranks:
        backend = facts.ranks[0].backend or "?"
        device = "GPU" if facts.ranks[0].cuda else "CPU"
        lines.append(
            f"{facts.n} processes ({backend}, {device}) against 1; {facts.options.epochs} "
            f"epoch(s) of at most {facts.options.steps} optimizer steps each"
        )
    semantics, text = facts.batch_semantics()
    if semantics:
        lines.append(text)
    lines.append(
        f"tolerance: |converted - original| <= {facts.options.atol:g} + "
        f"{facts.options.rtol:g} x |original| elementwise"
        + (" (bit-identical required with one process)" if facts.n == 1 else "")
    )
    return lines


def _changes(facts: _Facts) -> list[str]:
    """Exactly what the harness changed to make the check possible."""
    lines = [
        "every process seeded (torch, random, numpy: 0 plus its rank), one intra-op thread each",
        *(f"the original's text: {line}" for line in facts.verification.normalised),
    ]
    by_kind: dict[tuple[str, str], list[str]] = {}
    for role, records in (("original", (facts.orig_record,)), ("converted", facts.ranks)):
        for record in records:
            for change in record.changes:
                roles = by_kind.setdefault((change.kind, change.detail), [])
                if role not in roles:
                    roles.append(role)
    titles = {
        "cuda": "no GPU here: CUDA runs on the CPU",
        "shuffle": "shuffling made deterministic",
        "batch": "the original's training batch",
        "dropout": "dropout neutralised",
        "batchnorm": "BatchNorm statistics made global",
        "precision": "rounding noise removed",
        "half": "rounding noise removed",
        "float32": "rounding noise left in",
        "random": "noticed, not changed",
        "keyed": "random draws made per sample",
        "writes": "checkpoints written slowly, so a read before the write ends fails",
        "launcher": "the verifier starts the processes",
    }
    for (kind, detail), roles in sorted(by_kind.items()):
        lines.append(f"{titles.get(kind, kind)}: {detail} ({' and '.join(roles)})")
    return lines


def similar(a: str, b: str) -> bool:
    return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= LINE_SIMILARITY


def similar_to_any(line: str, lines: list[str]) -> bool:
    return any(similar(line, other) for other in lines)


def mask(stdout: str) -> list[str]:
    """Printed lines with their numbers masked: losses differ in the last digits, batch
    sizes differ between the runs; the line itself is what must appear once."""
    return [masked(line) for line in stdout.splitlines() if line.strip()]
