"""DDP110: a hard-coded MASTER_PORT (or tcp:// port)."""

from __future__ import annotations

import re

import libcst as cst

from ddpify.analysis.tree import call_arg, dotted
from ddpify.rule import CheckContext, CheckRule, Example, Severity

PORT_IN_URL = re.compile(r"^tcp://[^/]*:\d+")


class HardCodedMasterPort(CheckRule):
    """
    ## What it does
    Finds `os.environ["MASTER_PORT"] = "12355"` and `init_method="tcp://host:12355"`.

    ## Why is this bad?
    A second job on the same machine, or a run that has not released the port yet, fails to
    bind it. Launch with torchrun (its rendezvous picks the port: `--standalone`, or
    `--rdzv-endpoint`), or choose a free port at run time.
    """

    code = "DDP110"
    name = "hard-coded-master-port"
    message = "hard-coded MASTER_PORT: two jobs on one machine collide; let torchrun choose"
    default = False
    severity = Severity.NOTE
    selection = (
        "a fixed port is what PyTorch's own `mp.spawn` tutorial does; it collides "
        "only when two jobs share a machine."
    )
    requires = ("MASTER_PORT|init_process_group",)
    valid = (
        """
        import torch.distributed as dist

        dist.init_process_group("nccl")
        """,
    )
    invalid = (
        Example(
            """
            import os

            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "12355"
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for node in anatomy.assigns:
            if isinstance(node.value, cst.SimpleString | cst.Integer):
                for target in node.targets:
                    if _names_port(target.target):
                        ctx.report(node)
        for init in anatomy.distributed.initialises_process_group:
            method = call_arg(init, None, "init_method")
            if method is not None and isinstance(method.value, cst.SimpleString):
                value = method.value.evaluated_value
                if isinstance(value, str) and PORT_IN_URL.match(value):
                    ctx.report(method)


def _names_port(target: cst.BaseExpression) -> bool:
    """`os.environ["MASTER_PORT"]`"""
    if not isinstance(target, cst.Subscript) or len(target.slice) != 1:
        return False
    index = target.slice[0].slice
    return (
        dotted(target.value) == "os.environ"
        and isinstance(index, cst.Index)
        and isinstance(index.value, cst.SimpleString)
        and index.value.evaluated_value == "MASTER_PORT"
    )
