"""How big the conversion's diff is: for every converted fixture, and against hand-written DDP.

What it measures, for every script under ``fixtures/convert/`` (``scripts/``, ``seeds/`` and
each project's ``train.py``) that converts:

* ``+/-``: the lines the conversion adds and removes (``difflib``, as ``--diff`` shows them);
* re-indented lines: removed lines that come back with only their indentation changed, by the
  block the conversion opened around them: a rank guard (``if dist.get_rank() == 0:`` before
  a print or a save: the guard itself), ``with model.no_sync()`` (gradient accumulation), a
  ``try:`` (the cleanup around ``main()``) or anything else. Each should be the few
  statements the block is about: a conversion that re-indents the script (the whole module
  body in a ``try:``) makes a diff as long as the script;
* ``moved``: removed lines that come back unchanged elsewhere in the file.

And against a DDP version written by hand from the same single-GPU script, where one exists
(the ratio is ddpify's lines changed over the hand-written version's; below 1 means a smaller
diff than the human's):

* the seed 000 tutorial's own DDP script (``fixtures/check/broken/seed000_handwritten_ddp.py``,
  copied from the document the product was specified from, mistakes included);
* with ``--examples DIR`` (a clone of pytorch/examples, e.g. the ``repo`` folder that
  ``fetch github:pytorch/examples`` makes, or any checkout): PyTorch's DDP tutorial series,
  ``single_gpu.py`` against ``multigpu_torchrun.py`` (torchrun) and ``multigpu.py`` (mp.spawn,
  compared with ``--launcher spawn``). A bare git directory is read with ``git show HEAD:``.

Nothing is asserted: the figures are printed for a human to judge. Run from anywhere::

    python bench/diff_size.py
    python bench/diff_size.py --examples /work/.mirror/pytorch+examples/repo
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from ddpify.convert import convert_source  # noqa: E402
from ddpify.options import ConvertOptions, Launcher  # noqa: E402

FIXTURES = REPO_ROOT / "fixtures" / "convert"
SEED000_HAND = REPO_ROOT / "fixtures" / "check" / "broken" / "seed000_handwritten_ddp.py"
TUTORIAL = "distributed/ddp-tutorial-series"


def _guard(opened: str) -> bool:
    return opened.startswith("if ") and "rank" in opened


def _no_sync(opened: str) -> bool:
    return opened.startswith("with ") and "no_sync" in opened


def _try(opened: str) -> bool:
    return opened == "try:"


def _other(opened: str) -> bool:
    return False


BLOCKS: dict[str, Callable[[str], bool]] = {
    "guard": _guard,
    "no_sync": _no_sync,
    "try": _try,
    "other": _other,
}


@dataclass
class DiffSize:
    added: int
    removed: int
    # Removed lines that come back re-indented, by the new block they are in: a rank guard,
    # `with model.no_sync()`, a `try:` (cleanup) or anything else.
    reindented: dict[str, int]
    moved: int

    @property
    def changed(self) -> int:
        return self.added + self.removed


def diff_size(before: str, after: str) -> DiffSize:
    """Lines added and removed from `before` to `after`, and how many of the removed lines
    come back re-indented (into a new rank guard, or elsewhere) or unchanged (moved)."""
    old, new = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    added: list[int] = []
    removed: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            removed.extend(old[i1:i2])
            added.extend(range(j1, j2))
    new_lines = set(added)
    pool = [line for line in removed if line.strip()]
    reindented = dict.fromkeys(BLOCKS, 0)
    kinds: dict[int, str] = {}  # the re-indented lines' kinds, by their index in `new`
    moved = 0
    for j in added:
        line = new[j]
        if not line.strip():
            continue
        if line in pool:
            pool.remove(line)
            moved += 1
            continue
        same = next((gone for gone in pool if gone.strip() == line.strip()), None)
        if same is None:
            continue
        pool.remove(same)
        header = _enclosing(new, j)
        while header is not None and not new[header].rstrip().endswith(":"):
            header = _enclosing(new, header)  # a continuation line: the statement's block
        if header in kinds:  # inside a re-indented block: re-indented by the same block
            kind = kinds[header]
        else:
            opened = new[header].strip() if header is not None and header in new_lines else ""
            kind = next((kind for kind, opens in BLOCKS.items() if opens(opened)), "other")
        kinds[j] = kind
        reindented[kind] += 1
    return DiffSize(len(added), len(removed), reindented, moved)


def _enclosing(lines: list[str], j: int) -> int | None:
    """The line that opens the block line `j` is in: the nearest line above it that is
    indented less."""
    depth = len(lines[j]) - len(lines[j].lstrip())
    for i in range(j - 1, -1, -1):
        text = lines[i]
        if text.strip() and len(text) - len(text.lstrip()) < depth:
            return i
    return None


def convert(path: Path, options: ConvertOptions, text: str | None = None) -> str | None:
    """The conversion of `path` (or of `text` under its name), None when it does not convert."""
    source = text.encode() if text is not None else path.read_bytes()
    result = convert_source(source, path.name, options, path=path if text is None else None)
    if result.refused or result.skipped or not result.changed:
        return None
    return result.output.decode()


def fixture_scripts() -> list[Path]:
    scripts = sorted((FIXTURES / "scripts").glob("*.py")) + sorted(
        (FIXTURES / "seeds").glob("*.py")
    )
    return scripts + sorted(FIXTURES.glob("projects/*/train.py"))


def read_examples(root: Path, relative: str) -> str:
    """A file of a pytorch/examples checkout, or of a bare git directory's HEAD."""
    if (root / relative).is_file():
        return (root / relative).read_text()
    shown = subprocess.run(
        ["git", f"--git-dir={root}", "show", f"HEAD:{relative}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return shown.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=Path, help="a clone of pytorch/examples")
    args = parser.parse_args(argv)
    torchrun = ConvertOptions()

    kinds = " ".join(f"{kind:>7}" for kind in BLOCKS)
    print(f"{'fixture':44} {'+':>4} {'-':>4} {kinds} {'moved':>5}   (re-indented into a new ...)")
    sizes: list[DiffSize] = []
    skipped: list[str] = []
    for path in fixture_scripts():
        name = str(path.relative_to(FIXTURES))
        after = convert(path, torchrun)
        if after is None:
            skipped.append(name)
            continue
        size = diff_size(path.read_text(), after)
        sizes.append(size)
        counts = " ".join(f"{size.reindented[kind]:7}" for kind in BLOCKS)
        print(f"{name:44} {size.added:4} {size.removed:4} {counts} {size.moved:5}")
    totals = ", ".join(f"{sum(s.reindented[kind] for s in sizes)} {kind}" for kind in BLOCKS)
    largest = max(sum(s.reindented.values()) for s in sizes) if sizes else 0
    print(
        f"{len(sizes)} converted fixtures: median {median([s.changed for s in sizes])} lines "
        f"changed; lines re-indented: {totals}; at most {largest} in one fixture; "
        f"not converted: {', '.join(skipped) or 'none'}"
    )

    print()
    print(f"{'against a hand-written DDP version':44} {'ddpify':>6} {'hand':>6} {'ratio':>6}")
    pairs: list[tuple[str, Path, str, str, ConvertOptions]] = []
    seed000 = FIXTURES / "seeds" / "seed000_single_gpu.py"
    pairs.append(("seed000 (the document's DDP script)", seed000, seed000.read_text(),
                  SEED000_HAND.read_text(), torchrun))  # fmt: skip
    if args.examples is not None:
        single = read_examples(args.examples, f"{TUTORIAL}/single_gpu.py")
        spawn = ConvertOptions(launcher=Launcher.SPAWN)
        for hand, options in (("multigpu_torchrun.py", torchrun), ("multigpu.py", spawn)):
            label = f"tutorial single_gpu.py -> {hand}"
            hand_text = read_examples(args.examples, f"{TUTORIAL}/{hand}")
            pairs.append((label, Path("single_gpu.py"), single, hand_text, options))
    for label, path, before, hand_text, options in pairs:
        after = convert(path, options, text=before)
        if after is None:
            print(f"{label:44} not converted")
            continue
        ours = diff_size(before, after).changed
        theirs = diff_size(before, hand_text).changed
        print(f"{label:44} {ours:6} {theirs:6} {ours / theirs:6.2f}")
    return 0


def median(values: list[int]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2


if __name__ == "__main__":
    raise SystemExit(main())
