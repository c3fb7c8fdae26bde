"""Loaded by every Python process a test starts with this folder on PYTHONPATH and
DDPIFY_TEST_WRITES set: records what each process writes, and makes rank 0's saves slow.

- Every path opened for writing, removed or renamed (Python's audit events, plus
  torch.save, whose C++ writer raises none) is appended to DDPIFY_TEST_WRITES/writes.RANK.PID
  as "RANK<TAB>EVENT<TAB>ABSOLUTE PATH" (RANK: torchrun's RANK, "-" for a plain process).
- With DDPIFY_TEST_SAVE_DELAY=SECONDS, rank 0 of a job of several processes writes each
  torch.save in two halves with that pause between them: a rank that reads the file
  before rank 0 has finished fails to load it, every time, instead of once in a while.
"""

from __future__ import annotations

import os
import sys

_FOLDER = os.environ.get("DDPIFY_TEST_WRITES")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _install(folder: str) -> None:
    rank = os.environ.get("RANK", "-")
    if "LOCAL_WORLD_SIZE" not in os.environ and "RANK" not in os.environ and _launcher():
        return  # torchrun's own process: it starts the ranks, it writes nothing of theirs
    log = open(os.path.join(folder, f"writes.{rank}.{os.getpid()}"), "a", buffering=1)  # noqa: SIM115 - open for the life of the process
    own = os.path.abspath(folder)

    def note(event: str, path: object) -> None:
        if isinstance(path, int):
            return
        try:
            where = os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]
        except TypeError:
            return
        if not where.startswith(own) and "__pycache__" not in where:
            log.write(f"{rank}\t{event}\t{where}\n")

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event == "open":
            path, mode, flags = args
            if isinstance(mode, str):
                writes = any(flag in mode for flag in "wax+")
            else:
                writes = isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
            if writes:
                note("open", path)
        elif event in ("os.remove", "os.rmdir"):  # a folder made on every rank is no race
            note(event, args[0])
        elif event == "os.rename":
            note("os.rename", args[0])
            note("os.rename", args[1])

    sys.addaudithook(hook)
    if "torch" in sys.modules or _imports_torch():
        _patch_save(note, rank)


def _launcher() -> bool:
    argv = getattr(sys, "orig_argv", sys.argv)
    return any(arg == "torch.distributed.run" or arg.endswith("torchrun") for arg in argv)


def _imports_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _patch_save(note: object, rank: str) -> None:
    import io
    import time

    import torch

    real_save = torch.save
    delay = float(os.environ.get("DDPIFY_TEST_SAVE_DELAY", "0") or 0)
    several = int(os.environ.get("WORLD_SIZE", "1")) > 1

    def save(obj: object, f: object, *args: object, **kwargs: object) -> None:
        if not isinstance(f, (str, bytes, os.PathLike)):
            real_save(obj, f, *args, **kwargs)  # type: ignore[arg-type]
            return
        note("torch.save", f)  # type: ignore[operator]
        if not (delay and several and rank == "0"):
            real_save(obj, f, *args, **kwargs)  # type: ignore[arg-type]
            return
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)  # type: ignore[arg-type]
        data = buffer.getvalue()
        with open(f, "wb") as out:
            out.write(data[: len(data) // 2])
            out.flush()
            time.sleep(delay)
            out.write(data[len(data) // 2 :])

    torch.save = save  # type: ignore[assignment]
    torch.serialization.save = save  # type: ignore[assignment]


if _FOLDER:
    _install(_FOLDER)
