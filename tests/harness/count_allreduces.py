"""`python count_allreduces.py SCRIPT ARGS...`: runs SCRIPT as `__main__` with a DDP
communication hook on every model it wraps that counts the buckets it all-reduces, and writes
the count to `allreduces.RANK` in the working folder when the process ends."""

import atexit
import os
import runpy
import sys
from typing import Any

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

counted = [0]
_init = DistributedDataParallel.__init__


def _counting_init(self: DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
    _init(self, *args, **kwargs)

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks real annotations
        counted[0] += 1
        return default_hooks.allreduce_hook(state, bucket)

    self.register_comm_hook(None, hook)


def _write() -> None:
    with open(f"allreduces.{os.environ.get('RANK', '-')}", "w") as out:
        out.write(str(counted[0]))


DistributedDataParallel.__init__ = _counting_init  # type: ignore[method-assign]
atexit.register(_write)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
