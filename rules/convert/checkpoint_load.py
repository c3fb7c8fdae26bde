"""DDP006: torch.load maps a checkpoint onto the process's own device."""

from __future__ import annotations

from ddpify.analysis.tree import call_arg
from ddpify.emit import expression, with_keyword
from ddpify.rule import ConvertContext, ConvertRule, Example


class CheckpointLoad(ConvertRule):
    """
    ## What it does
    Adds `map_location=device` (the process's own device) and `weights_only=True` to
    `torch.load` calls that lack them.

    ## Why is this bad?
    A checkpoint saved from `cuda:0` loads back onto `cuda:0` in every process: GPU 0 holds
    N copies and runs out of memory, the other GPUs hold none. `weights_only=True` is
    torch's default since 2.6; spelling it out keeps older versions from unpickling
    arbitrary objects.
    """

    code = "DDP006"
    step = 6
    name = "checkpoint-load"
    message = "torch.load gets map_location (the process's device) and weights_only"
    fix_safety = """
        `weights_only=True` refuses checkpoints that pickle arbitrary Python objects (an
        `argparse.Namespace`, say); such a load then fails loudly, never silently.
    """
    examples = (
        Example(
            """
            import torch

            def main():
                model = Net().to(device)
                state = torch.load("model.pt")
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()

            main()
            """,
            """
            import torch

            def main():
                model = Net().to(device)
                state = torch.load("model.pt", map_location=device, weights_only=True)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()

            main()
            """,
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        for call in anatomy.distributed.torch_load_calls:
            added = []
            if call_arg(call, 1, "map_location") is None:
                added.append(("map_location", ctx.device(call)))
            if call_arg(call, None, "weights_only") is None:
                added.append(("weights_only", expression("True")))
            if not added:
                continue

            def extend(updated, added=tuple(added)):  # type: ignore[no-untyped-def]
                for keyword, value in added:
                    updated = with_keyword(updated, keyword, value)
                return updated

            ctx.plan.replace(call, extend)
            ctx.changed(call, f"torch.load gets {' and '.join(k for k, _ in added)}")
