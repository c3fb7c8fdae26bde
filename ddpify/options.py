"""Options gathered once by the CLI and passed down unchanged: the conversion's, and the
check's output format."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Launcher(str, Enum):
    TORCHRUN = "torchrun"
    SPAWN = "spawn"


class BatchMode(str, Enum):
    PER_GPU = "per-gpu"
    GLOBAL = "global"


class ScaleLR(str, Enum):
    NONE = "none"
    LINEAR = "linear"
    SQRT = "sqrt"


@dataclass(frozen=True)
class ConvertOptions:
    launcher: Launcher = Launcher.TORCHRUN
    batch: BatchMode = BatchMode.PER_GPU
    scale_lr: ScaleLR = ScaleLR.NONE
    # Only these rule codes run (all when None): how each rule's examples are tested alone.
    select: frozenset[str] | None = None


class OutputFormat(str, Enum):
    TEXT = "text"
    JSON = "json"
    SARIF = "sarif"
    GITHUB = "github"
