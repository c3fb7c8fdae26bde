"""DDP115: a checkpoint of the bare module loaded into the DDP wrapper."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.tree import dotted, is_attribute, is_method_call, walk
from ddpify.rule import CheckContext, CheckRule, Example


class LoadIntoWrapper(CheckRule):
    """
    ## What it does
    Finds `model.load_state_dict(...)` where `model` holds the DDP wrapper, the state comes
    from `torch.load`, and the script saves its model with `model.module.state_dict()`: the
    checkpoint it reads back holds the bare module's keys.

    ## Why is this bad?
    The wrapper's keys all start with `module.`: loading the bare module's keys into it
    fails on every key at the resume (or, with `strict=False`, silently loads nothing and
    training restarts from scratch). Load into `model.module`, which has the keys the
    checkpoint was saved with.
    """

    code = "DDP115"
    name = "load-into-wrapper"
    message = (
        "load_state_dict on the DDP wrapper of a checkpoint saved from `.module`: every key "
        "misses its `module.` prefix; load into model.module"
    )
    selection = (
        "the resume fails on every key, or with strict=False loads nothing; the checkpoint "
        "is the script's own, saved from `.module`."
    )
    requires = ("DistributedDataParallel", "load_state_dict", r"module\.state_dict")
    fix_safety = "Safe: `model.module` has exactly the keys the checkpoint was saved with."
    valid = (
        # PyTorch's tutorial: the snapshot is loaded in __init__, before the wrap.
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Trainer:
            def __init__(self, model, path):
                self.model = model
                if os.path.exists(path):
                    self._load_snapshot(path)
                self.model = DDP(self.model)

            def _load_snapshot(self, path):
                snapshot = torch.load(path, map_location="cpu")
                self.model.load_state_dict(snapshot["MODEL_STATE"])

            def _save_snapshot(self):
                torch.save({"MODEL_STATE": self.model.module.state_dict()}, "snapshot.pt")
        """,
        # Saved from the wrapper, loaded into the wrapper: the keys match.
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        model.load_state_dict(torch.load("ckpt.pt", map_location="cpu")["model"])
        torch.save({"model": model.state_dict()}, "ckpt.pt")
        """,
        # Loaded into the bare module (torchvision's model_without_ddp).
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        model_without_ddp = model.module
        checkpoint = torch.load("ckpt.pt", map_location="cpu")
        model_without_ddp.load_state_dict(checkpoint["model"])
        torch.save({"model": model.module.state_dict()}, "ckpt.pt")
        """,
    )
    invalid = (
        Example(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            if resume:
                checkpoint = torch.load("ckpt.pt", map_location="cpu")
                model.load_state_dict(checkpoint["model"])
            torch.save({"model": model.module.state_dict()}, "ckpt.pt")
            """,
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            if resume:
                checkpoint = torch.load("ckpt.pt", map_location="cpu")
                model.module.load_state_dict(checkpoint["model"])
            torch.save({"model": model.module.state_dict()}, "ckpt.pt")
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not _saves_bare_keys_only(anatomy):
            return
        for call in anatomy.calls:
            if not (is_method_call(call, "load_state_dict") and call.args):
                continue
            assert isinstance(call.func, cst.Attribute)
            target = call.func.value
            if not anatomy.bindings.holds(dotted(target), call) or _before_the_wrap(
                anatomy, call, dotted(target)
            ):
                continue
            if _loaded_from_file(anatomy, call.args[0].value, anatomy.function_of(call)):
                ctx.report(call.func, fix=partial(_fix, value=target))


DDP = "torch.nn.parallel.DistributedDataParallel"


def _before_the_wrap(anatomy: Anatomy, call: cst.Call, name: str | None) -> bool:
    """The load runs before `name` is wrapped: in place, or in a method every call of which
    comes before `self.model = DDP(self.model)` in its function (PyTorch's tutorial resumes
    in `__init__`, then wraps)."""
    wraps = [
        node
        for line in anatomy.simple_statements
        if isinstance(line, cst.SimpleStatementLine)
        for node in line.body
        if isinstance(node, cst.Assign)
        and isinstance(node.value, cst.Call)
        and anatomy.is_call_to(node.value, {DDP})
        and any(dotted(target.target) == name for target in node.targets)
    ]

    def precedes_a_wrap(site: cst.CSTNode) -> bool:
        scope = anatomy.function_of(site)
        return any(
            anatomy.function_of(wrap) is scope and anatomy.precedes(site, wrap) for wrap in wraps
        )

    if precedes_a_wrap(call):
        return True
    function = anatomy.function_of(call)
    sites = anatomy.graph.call_sites(function) if function is not None else []
    return bool(sites) and all(precedes_a_wrap(site) for site in sites)


def _saves_bare_keys_only(anatomy: Anatomy) -> bool:
    """The script's model state comes from `<model>.module.state_dict()`, never from the
    wrapper's own `state_dict()`."""
    bare = wrapper = False
    for call in anatomy.calls:
        if not is_method_call(call, "state_dict"):
            continue
        assert isinstance(call.func, cst.Attribute)
        owner = call.func.value
        if is_attribute(owner, "module"):
            bare = True
        elif anatomy.bindings.holds(dotted(owner), call):
            wrapper = True
    return bare and not wrapper


def _loaded_from_file(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 0
) -> bool:
    """`expr` is (an entry of) what `torch.load` returned."""
    if depth > 3:
        return False
    for origin in anatomy.values.origins(expr, scope):
        for node in walk(origin):
            if isinstance(node, cst.Call) and anatomy.is_call_to(node, {"torch.load"}):
                return True
        if (
            isinstance(origin, cst.Subscript)
            and origin.value is not expr
            and _loaded_from_file(anatomy, origin.value, scope, depth + 1)
        ):
            return True
    return False


def _fix(ctx: CheckContext, value: cst.BaseExpression) -> None:
    ctx.plan.replace(value, lambda updated: cst.Attribute(updated, cst.Name("module")))
