"""What `ddpify check` finds in real, hand-written DDP code, listed in bench/check_corpus.tsv.

The list names files, not their code: one line per file, tab-separated,

    repo  commit  path  note

(``repo`` is ``owner/name`` on GitHub, ``commit`` the 40-hex commit the file was read at).
No public code is kept in this repository: the files are read from git directories brought
onto the machine beforehand (the search tool's ``fetch``), under MIRROR_DIR as
``OWNER+NAME/repo``, the same layout bench/corpus.py reads.

Each file is extracted at its commit into one temporary folder (``OWNER+NAME/PATH``), then
``python -m ddpify check --format json`` runs once over the folder, with the default rule
set unless ``--select`` says otherwise (``--select ALL``: every rule). It prints a row per
file, the findings per rule, then every finding with its source line, for a human to
classify (true bug / debatable / false). ``--ddpify DIR`` runs the ddpify found in DIR (a
source checkout of another commit) instead of the installed one. Exit 0 whatever it finds.

    python bench/check_corpus.py bench/check_corpus.tsv /work/.mirror
    python bench/check_corpus.py bench/check_corpus.tsv /work/.mirror --select ALL
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import git_dir  # bench/corpus.py: the same mirror layout


@dataclass(frozen=True)
class Entry:
    repo: str
    commit: str
    path: str

    @property
    def relative(self) -> str:
        return f"{self.repo.replace('/', '+')}/{self.path}"


def read_list(path: Path) -> list[Entry]:
    with path.open(newline="") as stream:
        rows = list(csv.DictReader(stream, delimiter="\t"))
    return [Entry(row["repo"], row["commit"], row["path"]) for row in rows]


def extract(entries: list[Entry], mirror: Path, into: Path) -> list[Entry]:
    """Write each listed file at its commit under `into`; the entries that could be read."""
    found = []
    for entry in entries:
        git = git_dir(mirror, entry.repo)
        if git is None:
            print(f"  not fetched: {entry.repo}", file=sys.stderr)
            continue
        shown = subprocess.run(
            ["git", f"--git-dir={git}", "show", f"{entry.commit}:{entry.path}"],
            capture_output=True,
            check=False,
        )
        if shown.returncode != 0:
            print(f"  not readable: {entry.repo} {entry.path}", file=sys.stderr)
            continue
        target = into / entry.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(shown.stdout)
        found.append(entry)
    return found


def check(folder: Path, select: str | None, ddpify: Path | None) -> list[dict[str, object]]:
    command = [sys.executable, "-m", "ddpify", "check", "--format", "json", "."]
    if select:
        command += ["--select", select]
    env = dict(os.environ)
    if ddpify is not None:
        env["PYTHONPATH"] = str(ddpify)
    done = subprocess.run(command, cwd=folder, capture_output=True, env=env, check=False)
    if done.returncode not in (0, 1):
        sys.exit(f"ddpify check failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    for line in done.stderr.decode().splitlines():
        print(f"  {line}", file=sys.stderr)
    findings: list[dict[str, object]] = json.loads(done.stdout or b"[]")
    return findings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("list", type=Path)
    parser.add_argument("mirror", type=Path)
    parser.add_argument("--select", help="codes or prefixes (ALL: every rule)")
    parser.add_argument("--ddpify", type=Path, help="a source checkout to run instead")
    args = parser.parse_args()
    entries = read_list(args.list)
    with tempfile.TemporaryDirectory(prefix="ddpify-check-corpus-") as temporary:
        folder = Path(temporary)
        present = extract(entries, args.mirror, folder)
        findings = check(folder, args.select, args.ddpify)
        by_file: dict[str, list[dict[str, object]]] = collections.defaultdict(list)
        for finding in findings:
            by_file[str(finding["filename"]).removeprefix("./")].append(finding)
        repos = {entry.repo for entry in present}
        rules = args.select or "default"
        print(f"{len(present)} files from {len(repos)} repositories, rules: {rules}")
        print()
        print(f"{'repo':<36} {'path':<52} findings")
        for entry in present:
            found = by_file.get(entry.relative, [])
            codes = ", ".join(sorted(str(f["code"]) for f in found))
            print(f"{entry.repo:<36} {entry.path:<52} {len(found)} {codes}")
        print()
        per_rule = collections.Counter(str(f["code"]) for f in findings)
        files_per_rule = {
            code: len({str(f["filename"]) for f in findings if f["code"] == code})
            for code in per_rule
        }
        print(f"{'rule':<8} findings  files")
        for code, count in sorted(per_rule.items()):
            print(f"{code:<8} {count:>8}  {files_per_rule[code]:>5}")
        print(f"{'total':<8} {len(findings):>8}  {len(by_file):>5}")
        print()
        named = {entry.relative: entry for entry in present}
        for finding in sorted(findings, key=lambda f: (str(f["filename"]), int(str(f["line"])))):
            name = str(finding["filename"]).removeprefix("./")
            lines = (folder / name).read_text(errors="replace").splitlines()
            line = int(str(finding["line"]))
            text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            known = named.get(name)
            where = f"{known.repo} {known.path}" if known else name
            print(f"{where}:{line}:{finding['column']} {finding['code']} {finding['message']}")
            print(f"    {text}")


if __name__ == "__main__":
    main()
