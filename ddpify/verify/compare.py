"""Inside the original's process, once it has trained: measure the tensors against the
converted run's (parameters after every step, replicas against rank 0, checkpoints).

It only measures; ddpify.verify.judge judges. Differences are computed in float64 so the
measurement adds no rounding of its own.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import torch

from ddpify.verify.records import (
    COMPARISON,
    ProcessRecord,
    as_named_by,
    by_position,
    save_copy_name,
    snapshot_name,
    unwrapped_keys,
)

SNAPSHOT = re.compile(r"opt(\d+)_step(\d+)\.pt$")
# a learning rate (or a momentum, a weight decay) of an optimizer's saved param group
HYPERPARAMETER = re.compile(
    r"(^|\.)param_groups\.\d+\.(lr|initial_lr|momentum|betas\.\d|weight_decay)$"
)


def load(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    return loaded if isinstance(loaded, dict) else None


def tensor_difference(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> dict[str, Any]:
    """How far a is from the reference b: max abs, max rel (where |b| > atol), within tolerance."""
    if a.shape != b.shape:
        return {"max_abs": math.inf, "max_rel": math.inf, "within": False, "exact": False,
                "outside": b.numel(), "elements": b.numel(),
                "shape": [list(a.shape), list(b.shape)]}  # fmt: skip
    if not (a.is_floating_point() or a.is_complex()):
        exact = bool(torch.equal(a, b))
        gap = 0.0 if exact else float((a.double() - b.double()).abs().max())
        return {"max_abs": gap, "max_rel": 0.0 if exact else math.inf, "within": exact,
                "exact": exact, "outside": int((a != b).sum()), "elements": b.numel()}  # fmt: skip
    x, y = a.detach().double(), b.detach().double()
    # Equal infinities (a causal mask's -inf) and NaNs in the same places are no difference
    # (inf - inf is NaN: round-16 audit s08's mask buffer "differed by up to inf").
    same = (x == y) | (torch.isnan(x) & torch.isnan(y))
    raw = torch.where(same, torch.zeros_like(x), (x - y).abs())
    nan = bool(torch.isnan(raw).any())
    diff = torch.nan_to_num(raw, nan=math.inf, posinf=math.inf)
    scale = y.abs()
    large = scale > atol
    max_rel = float((diff[large] / scale[large]).max()) if bool(large.any()) else 0.0
    outside = int(((diff > atol + rtol * scale) | torch.isinf(diff)).sum())
    return {
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
        "max_rel": max_rel,
        "within": not nan and outside == 0,
        "exact": bool(same.all()),
        "outside": outside,
        "elements": b.numel(),
    }


def compare_snapshots(
    measured: dict[str, Any], reference: dict[str, Any], rtol: float, atol: float
) -> dict[str, Any]:
    """Every parameter of `measured` against `reference`, in the reference's order."""
    pairs: list[tuple[str, Any, Any]]
    by_position = False
    if set(measured) == set(reference):
        pairs = [(name, measured[name], value) for name, value in reference.items()]
    elif len(measured) == len(reference):
        by_position = True
        pairs = [
            (name, m, value)
            for (name, value), m in zip(reference.items(), measured.values(), strict=True)
        ]
    else:
        pairs = [(name, measured[name], v) for name, v in reference.items() if name in measured]
    per_parameter = []
    for name, m, r in pairs:
        per_parameter.append({"name": name, **tensor_difference(m, r, rtol, atol)})
    worst = max(per_parameter, key=lambda row: row["max_abs"], default=None)
    first_outside = next((row for row in per_parameter if not row["within"]), None)
    return {
        "max_abs": worst["max_abs"] if worst else 0.0,
        "max_rel": max((row["max_rel"] for row in per_parameter), default=0.0),
        "worst": worst["name"] if worst else None,
        "within": all(row["within"] for row in per_parameter) and len(pairs) == len(reference),
        "exact": all(row["exact"] for row in per_parameter) and len(pairs) == len(reference),
        "first_outside": first_outside,
        "by_position": by_position,
        "missing": [name for name in reference if name not in measured] if not by_position else [],
        "extra": [name for name in measured if name not in reference] if not by_position else [],
        "parameters": len(reference),
        "outside": sum(row["outside"] for row in per_parameter),
        "elements": sum(row["elements"] for row in per_parameter),
    }


def snapshots(folder: Path) -> list[tuple[int, int]]:
    found = []
    for path in folder.glob("opt*_step*.pt"):
        match = SNAPSHOT.search(path.name)
        if match:
            found.append((int(match[1]), int(match[2])))
    return sorted(found, key=lambda key: (key[1], key[0]))


def compare_runs(
    original: Path, converted: Path, nproc: int, rtol: float, atol: float
) -> dict[str, Any]:
    """Parameters, replicas and checkpoints of the converted ranks against the original."""
    ranks = [converted / f"rank{r}" for r in range(nproc)]
    equivalence, replicas = [], []
    for optimizer, step in snapshots(original):
        name = snapshot_name(optimizer, step)
        mine = load(original / name)
        theirs = [load(folder / name) for folder in ranks]
        if mine is None or theirs[0] is None:
            continue
        equivalence.append(
            {
                "optimizer": optimizer,
                "step": step,
                **compare_snapshots(theirs[0], mine, rtol, atol),
            }
        )
        for rank, other in enumerate(theirs[1:], start=1):
            if other is not None:
                row = compare_snapshots(other, theirs[0], 0.0, 0.0)
                replicas.append({"optimizer": optimizer, "step": step, "rank": rank, **row})
    # replicas at steps the original did not reach (it stopped early) still count
    reached = {(row["optimizer"], row["step"]) for row in equivalence}
    for optimizer, step in snapshots(ranks[0]):
        if (optimizer, step) in reached:
            continue
        name = snapshot_name(optimizer, step)
        first = load(ranks[0] / name)
        for rank, folder in enumerate(ranks[1:], start=1):
            other = load(folder / name)
            if first is not None and other is not None:
                row = compare_snapshots(other, first, 0.0, 0.0)
                replicas.append({"optimizer": optimizer, "step": step, "rank": rank, **row})
    return {
        "rtol": rtol,
        "atol": atol,
        "equivalence": equivalence,
        "replicas": replicas,
        "checkpoints": compare_checkpoints(original, ranks, rtol, atol),
    }


def compare_checkpoints(
    original: Path, ranks: list[Path], rtol: float, atol: float
) -> list[dict[str, Any]]:
    """The n-th save to a path in the original against the n-th save to it by the lowest
    converted rank that saved there."""
    mine = ProcessRecord.read(original).saves
    theirs = [ProcessRecord.read(folder).saves for folder in ranks]
    results = []
    seen: dict[str, int] = {}
    names = as_named_by([s.path for saves in theirs for s in saves], [s.path for s in mine])
    for save in mine:
        occurrence = seen[save.path] = seen.get(save.path, -1) + 1
        for rank, saves in enumerate(theirs):
            matching = [s for s in saves if names[s.path] == save.path]
            if len(matching) > occurrence:
                other = matching[occurrence]
                a = load(ranks[rank] / save_copy_name(other.index))
                b = load(original / save_copy_name(save.index))
                if a is None or b is None:
                    break
                a = {by_position(list(a))[key]: value for key, value in a.items()}
                b = {by_position(list(b))[key]: value for key, value in b.items()}
                renamed = unwrapped_keys(b, a)  # the original saved a DataParallel's keys
                if renamed is not None:
                    b = {renamed[key]: value for key, value in b.items()}
                tensors_a = {k: v for k, v in a.items() if isinstance(v, torch.Tensor)}
                tensors_b = {k: v for k, v in b.items() if isinstance(v, torch.Tensor)}
                row = compare_snapshots(tensors_a, tensors_b, rtol, atol)
                plain = [
                    key
                    for key, value in b.items()
                    if not isinstance(value, torch.Tensor)
                    and key in a
                    and not same(a[key], value, rtol, atol)
                ]
                # A float saved beside the state (`"loss": epoch_loss`, `"acc": best_acc`):
                # rank 0's own figure, as its prints are (the round-23 audit B resume_glob's
                # epoch loss over rank 0's shard was a false "values differ").
                figures = [key for key in plain if "." not in key and isinstance(b[key], float)]
                # The rate a schedule had reached (`optimizer.param_groups.0.lr`): the
                # learning-rate check compares the schedules step by step, and one sized
                # from the data runs 1/N as long (the round-34 audit's ConvNeXt arrays)
                schedule = [key for key in plain if HYPERPARAMETER.search(key)]
                results.append(
                    {
                        "path": save.path,
                        "occurrence": occurrence,
                        "rank": rank,
                        "values_differ": [
                            key for key in plain if key not in figures and key not in schedule
                        ],
                        "figures_differ": figures,
                        "schedule_differ": schedule,
                        **row,
                    }
                )
                break
    return results


def same(a: object, b: object, rtol: float, atol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rtol, abs_tol=atol) or (math.isnan(a) and math.isnan(b))
    return a == b


def write_comparison(out: Path, comparison: dict[str, Any]) -> None:
    (out / COMPARISON).write_text(json.dumps(comparison, indent=1), encoding="utf-8")
