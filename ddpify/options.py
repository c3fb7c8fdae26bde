"""Options gathered once by the CLI and passed down unchanged: the conversion's, the
check's, and the check's output format."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path


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


@dataclass(frozen=True)
class CheckOptions:
    """Everything one `ddpify check` run needs, from `[tool.ddpify]` and the command line."""

    # Codes or code prefixes (`ALL`: every rule); None selects the default set.
    select: frozenset[str] | None = None
    # Added to the selection, whichever it is (opt-in rules on top of the default set).
    extend_select: frozenset[str] = frozenset()
    ignore: frozenset[str] = frozenset()
    # (glob, codes) pairs: the codes are ignored in the files the glob matches.
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = ()
    # Globs of files and folders left out when walking folders (and, with force_exclude,
    # when named on the command line too, as pre-commit does).
    exclude: tuple[str, ...] = ()
    force_exclude: bool = False
    fix: bool = False
    # Print what --fix would change as a unified diff; write nothing.
    diff: bool = False
    # The folder the globs are relative to: the configuration file's, else the current one.
    root: Path = field(default_factory=Path.cwd)
    config: Path | None = None
