"""The analysis's fast paths agree with the LibCST machinery they stand in for.

`ddpify.analysis.tree` walks nodes by their fields instead of LibCST's visitors,
`ddpify.analysis.names`
settles names by imports before LibCST's QualifiedNameProvider, and the rank-test text
prefilter runs before any parse: each is checked here against what LibCST (or the
analysis itself) says, on every fixture and every rule example.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import LOCAL_RANK_ZERO_TEXT, RANK_ZERO_TEXT
from ddpify.analysis.ranks import Polarity
from ddpify.analysis.tree import child_nodes, dotted, index, walk
from ddpify.rule import check_rules, convert_rules

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SOURCES = sorted(FIXTURES.rglob("*.py")) + sorted(
    (Path(__file__).resolve().parents[2] / "ddpify").rglob("*.py")
)
EXAMPLES = [example.before for rule in convert_rules() for example in rule.examples]
EXAMPLES += [example.before for rule in check_rules() for example in rule.invalid]
EXAMPLES += [textwrap.dedent(code).lstrip("\n") for rule in check_rules() for code in rule.valid]
FORMATTING = (
    cst.BaseParenthesizableWhitespace,
    cst.Comma,
    cst.Dot,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Semicolon,
    cst.TrailingWhitespace,
    cst.EmptyLine,
    cst.AssignEqual,
    cst.Colon,
    cst.Newline,
    cst.Comment,
)


def modules(paths: list[Path] = SOURCES) -> list[tuple[str, str]]:
    found = [(path.name, path.read_text()) for path in paths]
    return found + [(f"example-{n}", code) for n, code in enumerate(EXAMPLES)]


def test_the_walk_is_in_source_order_and_skips_only_formatting() -> None:
    checked = 0
    for name, code in modules():
        wrapper = MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        parents, order = index(wrapper.module)
        assert list(order) == list(walk(wrapper.module))
        for node in order:
            children = child_nodes(node)
            starts = [(positions[c].start.line, positions[c].start.column) for c in children]
            assert starts == sorted(starts), (name, type(node).__name__)
            kept = {id(child) for child in children}
            skipped = [c for c in node.children if id(c) not in kept]
            assert all(isinstance(c, FORMATTING) for c in skipped), (name, skipped)
            assert all(parents[child] is node for child in children)
            checked += 1
    assert checked > 10_000


def test_names_settled_by_imports_are_what_libcst_says() -> None:
    settled = unsettled = 0
    for name, code in modules(sorted(FIXTURES.rglob("*.py"))):
        anatomy = Anatomy(cst.parse_module(code))
        for call in anatomy.calls:
            spelled = dotted(call.func)
            fast = anatomy._imports.resolve(spelled) if spelled else None
            if fast is None:
                unsettled += 1
                continue
            assert fast == anatomy.provider_qualified_names(call.func), (name, spelled)
            settled += 1
    assert settled > 1000 and unsettled > 100


@pytest.mark.parametrize(
    ("code", "names"),
    [
        ("import torch.distributed as dist\ndist.barrier()", {"torch.distributed.barrier"}),
        ("import torch\nimport torch.distributed\ntorch.distributed.barrier()", None),
        ("from torch import distributed as dist\ndist.barrier()", {"torch.distributed.barrier"}),
        ("from torch.nn.parallel import DistributedDataParallel as DDP\nDDP(m)", None),
        ("print('x')", {"builtins.print"}),
        ("import torch.distributed as dist\ndef f(dist):\n    dist.barrier()", None),
        ("import torch.distributed as dist\nfor dist in x:\n    dist.barrier()", None),
        ("import torch.distributed as dist\nwith a as dist:\n    dist.barrier()", None),
        ("import torch.distributed as dist\nglobal dist\ndist.barrier()", None),
        ("from . import dist\ndist.barrier()", None),
        ("import os as dist\nimport torch.distributed as dist\ndist.barrier()", None),
    ],
)
def test_import_resolution_declines_what_imports_do_not_settle(
    code: str, names: set[str] | None
) -> None:
    anatomy = Anatomy(cst.parse_module(code + "\n"))
    call = anatomy.calls[-1]
    fast = anatomy._imports.resolve(dotted(call.func) or "")
    if names is None and fast is not None:
        # Settled after all: then it must be what LibCST says.
        assert fast == anatomy.provider_qualified_names(call.func)
    else:
        assert fast == names
    # Either way the analysis answers as LibCST does.
    assert anatomy.qualified_names(call.func) == anatomy.provider_qualified_names(call.func)


ZERO, OTHERS = Polarity.ZERO, Polarity.OTHERS
RANK_TESTS = [
    ("rank == 0", "global", ZERO),
    ("0 == rank", "global", ZERO),
    ("dist.get_rank() == 0", "global", ZERO),
    ("dist.get_rank()==0", "global", ZERO),
    ("self.global_rank == 0", "global", ZERO),
    ('int(os.environ["RANK"]) == 0', "global", ZERO),
    ('0 == int(\n    os.environ["RANK"]\n)', "global", ZERO),
    ('os.environ.get("RANK", "0") == "0"', "global", ZERO),
    ('int(os.getenv("RANK", -1)) <= 0', "global", ZERO),
    ("not dist.is_initialized() or dist.get_rank() == 0", "global", ZERO),
    ("rank == 0 and epoch % 5 == 0", "global", ZERO),
    ("not rank", "global", ZERO),
    ("rank < 1", "global", ZERO),
    ("rank in (0,)", "global", ZERO),
    ("rank != 0", "global", OTHERS),
    ("dist.get_rank() > 0", "global", OTHERS),
    ("not dist.get_rank() == 0", "global", OTHERS),
    ("rank", "global", OTHERS),
    ("args.local_rank == 0", "local", ZERO),
    ('int(os.environ["LOCAL_RANK"]) == 0', "local", ZERO),
    ("(self.gpu_id) == 0", "local", ZERO),
    ("Local_Rank == 0", "local", ZERO),
    ("args.local_rank in [-1, 0]", "local", ZERO),
    ("args.local_rank not in [-1, 0]", "local", OTHERS),
    ("args.rank % ngpus_per_node == 0", "local", ZERO),
    ("args.node_rank == 0 and args.local_rank == 0", "global", ZERO),
    ('os.environ["GROUP_RANK"] == "0" and local_rank == 0', "global", ZERO),
    # Helpers defined in another file, known by their conventional names.
    ("utils.is_main_process()", "global", ZERO),
    ("not is_master", "global", OTHERS),
    ("self.is_local_master", "local", ZERO),
]
# What the script defines, then a test that reads it.
DEFINED_TESTS = [
    ("ddp_rank = int(os.environ['RANK'])", "ddp_rank == 0", "global", ZERO),
    ("my_rank = dist.get_rank()", "my_rank == 0", "global", ZERO),
    ("master_process = dist.get_rank() == 0", "master_process", "global", ZERO),
    ("RANK = int(os.getenv('RANK', -1))", "RANK in {-1, 0}", "global", ZERO),
    ("def is_main():\n    return get_rank() == 0", "is_main()", "global", ZERO),
    (
        "def get_rank():\n    return dist.get_rank() if dist.is_initialized() else 0",
        "get_rank() == 0",
        "global",
        ZERO,
    ),
    ("writer = SummaryWriter() if rank == 0 else None", "writer is not None", "global", ZERO),
    ("writer = SummaryWriter() if rank == 0 else None", "writer is None", "global", OTHERS),
]


@pytest.mark.parametrize(("test", "kind", "polarity"), RANK_TESTS)
def test_every_rank_test_is_read_and_passes_the_prefilters(
    test: str, kind: str, polarity: Polarity
) -> None:
    code = f"import os\nimport torch.distributed as dist\nif {test}:\n    pass\n"
    anatomy = Anatomy(cst.parse_module(code))
    found = anatomy.ranks.test(anatomy.ifs[0].test)
    assert found is not None and (found.kind, found.polarity) == (kind, polarity)
    assert RANK_ZERO_TEXT(code.encode())
    if kind == "local":
        assert LOCAL_RANK_ZERO_TEXT(code.encode())


@pytest.mark.parametrize(("definition", "test", "kind", "polarity"), DEFINED_TESTS)
def test_rank_tests_follow_the_scripts_own_names_and_functions(
    definition: str, test: str, kind: str, polarity: Polarity
) -> None:
    code = f"import os\nimport torch.distributed as dist\n{definition}\nif {test}:\n    pass\n"
    anatomy = Anatomy(cst.parse_module(code))
    found = anatomy.ranks.test(anatomy.ifs[-1].test)
    assert found is not None and (found.kind, found.polarity) == (kind, polarity)
    assert RANK_ZERO_TEXT(code.encode())


@pytest.mark.parametrize(
    "test",
    [
        "x == 0",
        "rank == 0.5",
        "rank == 10",
        "rank >= 0",
        "rank == -1",
        "lora_rank_ok",
        "n == 0",
        # A local rank or GPU index alone asks whether it is set (-1 is truthy).
        "args.gpu",
        "not args.local_rank",
    ],
)
def test_other_tests_say_nothing_of_the_rank(test: str) -> None:
    code = f"lora_rank_ok = check()\nn = 3\nif {test}:\n    pass\n"
    anatomy = Anatomy(cst.parse_module(code))
    assert anatomy.ranks.test(anatomy.ifs[0].test) is None


@pytest.mark.parametrize("test", ["x == 0", "epoch % 5 == 0", "len(items) > 0"])
def test_files_without_a_rank_do_not_pass_the_rank_prefilter(test: str) -> None:
    assert not RANK_ZERO_TEXT(f"if {test}:\n    pass\n".encode())
