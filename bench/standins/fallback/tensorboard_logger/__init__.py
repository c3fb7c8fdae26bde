"""A small ``tensorboard_logger`` for bench runs (see ../../sitecustomize.py).

The real package (0.1.0, 2017) builds protobuf descriptors that today's protobuf refuses at
import ("Descriptors cannot be created directly"), so a script that imports it cannot run
here. This one is on sys.path, last, when DDPIFY_BENCH_STANDINS=1, and keeps the package's
module-level API: ``configure(logdir)`` makes the folder and ``log_value(name, value, step)``
appends a line to ``logdir/events.out.tensorboard_logger``; ``log_histogram`` and
``log_images`` are accepted and write nothing. Like the real one, logging before
``configure`` raises ValueError.
"""

from __future__ import annotations

import os
from typing import Any

_logdir: str | None = None


def configure(logdir: str, flush_secs: int = 2) -> None:
    global _logdir
    os.makedirs(logdir, exist_ok=True)
    _logdir = logdir


def log_value(name: str, value: Any, step: int | None = None) -> None:
    if _logdir is None:
        raise ValueError(
            "default logger is not configured. Call tensorboard_logger.configure(logdir)"
        )
    with open(os.path.join(_logdir, "events.out.tensorboard_logger"), "a") as events:
        events.write(f"{step}\t{name}\t{float(value)}\n")


def log_histogram(name: str, value: Any, step: int | None = None) -> None:
    if _logdir is None:
        raise ValueError(
            "default logger is not configured. Call tensorboard_logger.configure(logdir)"
        )


def log_images(name: str, images: Any, step: int | None = None) -> None:
    if _logdir is None:
        raise ValueError(
            "default logger is not configured. Call tensorboard_logger.configure(logdir)"
        )
