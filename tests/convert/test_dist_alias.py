"""The script's own `dist` and the conversion's `torch.distributed` side by side."""

from __future__ import annotations

import libcst as cst
import pytest

from ddpify.convert import convert_source
from ddpify.dist_alias import hide, restore
from ddpify.options import ConvertOptions

LOOP = """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(train_set, batch_size=8, shuffle=True)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        {binding}
        loss = step(model, x, y, dist)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(epoch)
"""


@pytest.mark.parametrize(
    "binding",
    [
        "dist = torch.cdist(x, x)",
        "dist: torch.Tensor = torch.cdist(x, x)",
        "for dist in [torch.cdist(x, x)]: pass",
        "with torch.no_grad() as dist: pass",
    ],
)
def test_a_module_level_dist_of_the_script_is_kept_as_written(binding: str) -> None:
    source = LOOP.replace("{binding}", binding)
    result = convert_source(source.encode(), "loop.py", ConvertOptions())
    assert not result.problems, result.problems
    text = result.output.decode()
    assert f"        {binding}\n" in text
    assert "        loss = step(model, x, y, dist)\n" in text
    assert "import torch.distributed as torch_dist\n" in text
    assert "if torch_dist.get_rank() == 0:" in text


def test_attributes_keywords_and_an_imported_alias_keep_their_spelling() -> None:
    source = (
        "import torch.distributions as dist\nimport torch.distributed as dist2\n"
        "def f(x, self):\n    return dist.Normal(x, self.dist).sample(dist=1)\n"
    )
    module = cst.parse_module(source)
    hidden = hide(module)
    assert hidden is not None
    renamed, own = hidden
    assert f"import torch.distributions as {own}\n" in renamed.code
    assert f"return {own}.Normal(x, self.dist).sample(dist=1)" in renamed.code
    emitted = cst.parse_module(renamed.code + "import torch.distributed as dist\ndist.barrier()\n")
    assert restore(emitted, own).code == (
        source + "import torch.distributed as torch_dist\ntorch_dist.barrier()\n"
    )


@pytest.mark.parametrize(
    "source",
    [
        "def g():\n    dist = 1\n    return dist\n",  # a function's own: nothing to set aside
        "from scipy.spatial import distance as d\nfrom m import dist\n",  # no `as` to rename
        "dist = 1\ndef g():\n    global dist\n    dist = 2\n",
        "def dist(a, b):\n    return a - b\n",
        "import torch.distributed as dist\n",  # already torch.distributed's
    ],
)
def test_a_dist_that_cannot_be_set_aside_alone_is_left_to_the_conversion(source: str) -> None:
    assert hide(cst.parse_module(source)) is None
