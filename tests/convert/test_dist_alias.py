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


def test_a_functions_own_dist_is_set_aside_everywhere_when_asked() -> None:
    """Parameters too, unless some call passes `dist=` by keyword."""
    local = "def g():\n    dist = 1\n    return dist\n"
    assert hide(cst.parse_module(local)) is None
    hidden = hide(cst.parse_module(local), everywhere=True)
    assert hidden is not None and "dist" not in hidden[0].code.replace(hidden[1], "")
    parameter = "def get_radius(dist, nu):\n    return dist * nu\n\nget_radius(3, 0.1)\n"
    hidden = hide(cst.parse_module(parameter), everywhere=True)
    assert hidden is not None
    assert f"def get_radius({hidden[1]}, nu):\n    return {hidden[1]} * nu\n" in hidden[0].code
    keyword = parameter.replace("get_radius(3, 0.1)", "get_radius(dist=3, nu=0.1)")
    assert hide(cst.parse_module(keyword), everywhere=True) is None


SVDD = """\
import torch
from torch.utils.data import DataLoader


def get_radius(dist, nu):
    return torch.quantile(dist.sqrt(), 1 - nu)


def main():
    loader = DataLoader(train_set, batch_size=8, shuffle=True)
    net = Net()
    c = torch.zeros(4)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for epoch in range(3):
        for x, _ in loader:
            outputs = net(x)
            dist = torch.sum((outputs - c) ** 2, dim=1)
            loss = torch.mean(dist)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(epoch, get_radius(dist, 0.1))


if __name__ == "__main__":
    main()
"""


def test_a_functions_own_dist_where_the_conversion_guards_a_print_is_kept() -> None:
    """Round-36 audit A deep_svdd_center_from_loader: Deep-SVDD's trainer writes `dist =
    torch.sum((outputs - c) ** 2, dim=1)` in the function whose print the conversion guards
    with `dist.get_rank()`; it was refused ("rename the script's dist in it"). The script's
    `dist` (and `get_radius`'s parameter) stay; torch.distributed is `torch_dist`."""
    result = convert_source(SVDD.encode(), "svdd.py", ConvertOptions())
    assert not result.refused, result.problems
    text = result.output.decode()
    assert "import torch.distributed as torch_dist\n" in text
    assert "            dist = torch.sum((outputs - c) ** 2, dim=1)\n" in text
    assert "def get_radius(dist, nu):\n" in text
    assert (
        "        if torch_dist.get_rank() == 0:\n            print(epoch, get_radius(dist, 0.1))"
        in text
    )
    assert "dist.get_rank" not in text.replace("torch_dist.get_rank", "")
