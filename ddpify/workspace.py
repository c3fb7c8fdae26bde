"""The files `ddpify check` reads and the configuration it reads them with: walking folders,
`[tool.ddpify]`, fanning the files out over processes.

Nothing here prints. `run_check` returns a `CheckReport` (findings and errors per file) for
the CLI to render; with `fix=True` it also rewrites the files it fixed, atomically.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ddpify.check import ALL, CheckResult, check_source, selected_rules
from ddpify.options import CheckOptions
from ddpify.rule import Finding
from ddpify.source import InputError, atomic_write, read_source

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    from ddpify.rule import CheckRule

# Folders never walked into (a path named on the command line is still checked).
SKIPPED_FOLDERS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".bzr",
        ".venv",
        "venv",
        "env",
        ".tox",
        ".nox",
        ".eggs",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "__pycache__",
        "__pypackages__",
        "build",
        "dist",
        "node_modules",
        "site-packages",
    }
)
CONFIG_KEYS = frozenset(
    {"select", "extend-select", "ignore", "per-file-ignores", "exclude", "force-exclude"}
)
# A pool pays for itself only past a handful of files; the one-file pre-commit run never
# starts one.
PARALLEL_THRESHOLD = 8


class ConfigError(Exception):
    """`[tool.ddpify]` or a command-line code list is wrong: one line, exit code 2."""


@dataclass(frozen=True)
class FileResult:
    """One file's outcome: its findings (what remains after fixing), or why it was not
    checked."""

    path: str
    findings: tuple[Finding, ...] = ()
    # With fix=True: how many findings the rewrite fixed (0 when the file was not written).
    fixed: int = 0
    error: str | None = None
    # With diff=True: what `--fix` would change, as a unified diff (the file is not written).
    diff: str = ""


@dataclass(frozen=True)
class CheckReport:
    files: tuple[FileResult, ...]
    rules: tuple[type[CheckRule], ...] = ()

    @property
    def findings(self) -> list[tuple[str, Finding]]:
        return [(result.path, finding) for result in self.files for finding in result.findings]

    @property
    def errors(self) -> list[str]:
        return [result.error for result in self.files if result.error is not None]

    @property
    def fixed(self) -> int:
        return sum(result.fixed for result in self.files)

    @property
    def fixable(self) -> int:
        return sum(finding.fixable for _, finding in self.findings)

    @property
    def diff(self) -> str:
        return "".join(result.diff for result in self.files)


def parse_codes(text: str) -> frozenset[str]:
    """`"DDP101, ddp11"` -> {"DDP101", "DDP11"}."""
    return frozenset(code.strip().upper() for code in text.split(",") if code.strip())


def validate_codes(codes: Iterable[str], where: str) -> None:
    """Every code must name a check rule or be a prefix of one."""
    known = [rule.code for rule in selected_rules(frozenset({ALL}))]
    for code in sorted(codes):
        if code != ALL and not any(rule_code.startswith(code) for rule_code in known):
            raise ConfigError(f"{where}: no check rule matches {code!r}; `ddpify rules` lists them")


def find_config(paths: Sequence[str], cwd: Path) -> Path | None:
    """The nearest `pyproject.toml` with a `[tool.ddpify]` table, looking upward from the
    folder that holds every checked path."""
    folders = []
    for path in paths:
        absolute = Path(os.path.abspath(cwd / path))
        folders.append(str(absolute if absolute.is_dir() else absolute.parent))
    start = Path(os.path.commonpath(folders)) if folders else cwd
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "ddpify" in _load_toml(candidate).get("tool", {}):
            return candidate
    return None


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as stream:
            return tomllib.load(stream)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the configuration: {error}") from None


def load_options(
    paths: Sequence[str],
    *,
    select: frozenset[str] | None = None,
    extend_select: frozenset[str] | None = None,
    ignore: frozenset[str] | None = None,
    fix: bool = False,
    diff: bool = False,
    cwd: Path | None = None,
) -> CheckOptions:
    """`[tool.ddpify]` from the nearest `pyproject.toml`, then the command line on top.

    A command-line `--select` replaces the configuration's `select`, `extend-select` and
    `ignore`; a command-line `--extend-select` or `--ignore` alone adds to the
    configuration's."""
    cwd = cwd or Path.cwd()
    config_path = find_config(paths, cwd)
    table: dict[str, Any] = {}
    if config_path is not None:
        table = _load_toml(config_path)["tool"]["ddpify"]
    where = f"{config_path} [tool.ddpify]"
    unknown = sorted(set(table) - CONFIG_KEYS)
    if unknown:
        known = ", ".join(sorted(CONFIG_KEYS))
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: {known}")

    config_select = _codes(table, "select", where)
    config_extend = _codes(table, "extend-select", where) or frozenset()
    config_ignore = _codes(table, "ignore", where) or frozenset()
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigError(f"{where}: per-file-ignores must be a table of glob = [codes]")
    per_file_ignores = tuple(
        (glob, _codes(per_file, glob, f"{where} per-file-ignores") or frozenset())
        for glob in per_file
    )
    exclude = table.get("exclude", [])
    if not _is_list_of_str(exclude):
        raise ConfigError(f"{where}: exclude must be a list of globs")
    force_exclude = table.get("force-exclude", False)
    if not isinstance(force_exclude, bool):
        raise ConfigError(f"{where}: force-exclude must be true or false")

    if select is not None:
        final_select: frozenset[str] | None = select
        final_extend = extend_select or frozenset()
        final_ignore = ignore or frozenset()
    else:
        final_select = config_select
        final_extend = config_extend | (extend_select or frozenset())
        final_ignore = config_ignore | (ignore or frozenset())
    validate_codes(final_select or (), "--select" if select is not None else where)
    validate_codes(extend_select or (), "--extend-select")
    validate_codes(config_extend, where)
    validate_codes(ignore or (), "--ignore")
    validate_codes(config_ignore, where)
    for glob, codes in per_file_ignores:
        validate_codes(codes, f"{where} per-file-ignores {glob!r}")
    return CheckOptions(
        select=final_select,
        extend_select=final_extend,
        ignore=final_ignore,
        per_file_ignores=per_file_ignores,
        exclude=tuple(exclude),
        force_exclude=force_exclude,
        fix=fix,
        diff=diff,
        root=config_path.parent if config_path is not None else cwd,
        config=config_path,
    )


def _codes(table: dict[str, Any], key: str, where: str) -> frozenset[str] | None:
    if key not in table:
        return None
    value = table[key]
    if isinstance(value, str):
        value = [value]
    if not _is_list_of_str(value):
        raise ConfigError(f"{where}: {key} must be a list of codes")
    return frozenset(code.strip().upper() for code in value)


def _is_list_of_str(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def matches(path: Path, globs: Iterable[str], root: Path) -> bool:
    """Whether a glob names `path` or a folder above it. A glob without a `/` matches a
    file or folder name anywhere (`*_old.py`, `legacy`); one with a `/` matches the path
    relative to `root` (`scripts/*.py`, `src/legacy`)."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = PurePosixPath(absolute.relative_to(root).as_posix())
    except ValueError:
        relative = PurePosixPath(absolute.as_posix())
    prefixes = [relative, *list(relative.parents)[:-1]]
    for glob in globs:
        pattern = glob.strip().removeprefix("./").rstrip("/")
        if not pattern:
            continue
        if "/" in pattern:
            if any(fnmatch.fnmatchcase(str(prefix), pattern) for prefix in prefixes):
                return True
        elif any(fnmatch.fnmatchcase(part, pattern) for part in relative.parts):
            return True
    return False


def find_files(
    paths: Sequence[str], exclude_globs: Sequence[str] = (), *, root: Path | None = None
) -> tuple[list[str], list[str]]:
    """The files to check, in order and without repeats, and the paths that do not exist.

    A file named in `paths` is always checked, whatever its name. Folders are walked for
    `.py` files, skipping version control, virtual environments, build output, caches and
    whatever `exclude_globs` names."""
    root = root or Path.cwd()
    files: list[str] = []
    missing: list[str] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        key = os.path.realpath(name)
        if key not in seen:
            seen.add(key)
            files.append(name)

    for given in paths:
        if os.path.isdir(given):
            for found in _walk(given, exclude_globs, root):
                add(found)
        elif os.path.exists(given):
            add(given)
        else:
            missing.append(given)
    return files, missing


def _walk(top: str, exclude_globs: Sequence[str], root: Path) -> Iterator[str]:
    for folder, subfolders, names in os.walk(top):
        subfolders[:] = sorted(
            name
            for name in subfolders
            if not _skipped_folder(os.path.join(folder, name), name)
            and not matches(Path(folder, name), exclude_globs, root)
        )
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.normpath(os.path.join(folder, name))
                if not matches(Path(path), exclude_globs, root):
                    yield path


def _skipped_folder(path: str, name: str) -> bool:
    return (
        name in SKIPPED_FOLDERS
        or name.endswith(".egg-info")
        or os.path.isfile(os.path.join(path, "pyvenv.cfg"))
    )


def run_check(paths: Sequence[str], options: CheckOptions) -> CheckReport:
    """Check every file under `paths`; with `options.fix`, rewrite the files it can fix."""
    files, missing = find_files(paths, options.exclude, root=options.root)
    if options.force_exclude:
        files = [path for path in files if not matches(Path(path), options.exclude, options.root)]
    jobs = [
        _Job(
            path,
            options.select,
            options.extend_select,
            options.ignore | _ignored_in(path, options),
            options.fix,
            options.diff,
        )
        for path in files
    ]
    workers = os.cpu_count() or 1
    if len(jobs) > PARALLEL_THRESHOLD and workers > 1:
        results = _in_parallel(jobs, workers)
    else:
        results = [_check_one(job) for job in jobs]
    results += [FileResult(path, error=f"{path}: no such file or folder") for path in missing]
    rules = selected_rules(options.select, options.ignore, options.extend_select)
    return CheckReport(tuple(results), tuple(rules))


def _in_parallel(jobs: list[_Job], workers: int) -> list[FileResult]:
    """Check the files in a pool of processes; the results in the order of `jobs`."""
    from concurrent.futures import ProcessPoolExecutor  # only paid for when used

    # Largest first, one file at a time: a few big files take most of the time, and no
    # worker must be left alone with several of them at the end.
    order = sorted(range(len(jobs)), key=lambda index: -_size(jobs[index].path))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = pool.map(_check_one, [jobs[index] for index in order])
        by_index = dict(zip(order, done, strict=True))
    return [by_index[index] for index in range(len(jobs))]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _ignored_in(path: str, options: CheckOptions) -> frozenset[str]:
    ignored: set[str] = set()
    for glob, codes in options.per_file_ignores:
        if matches(Path(path), [glob], options.root):
            ignored |= codes
    return frozenset(ignored)


@dataclass(frozen=True)
class _Job:
    path: str
    select: frozenset[str] | None
    extend_select: frozenset[str]
    ignore: frozenset[str]
    fix: bool
    diff: bool = False

    def check(self, source: bytes, fix: bool = False) -> CheckResult:
        return check_source(
            source,
            self.path,
            select=self.select,
            extend_select=self.extend_select,
            ignore=self.ignore,
            fix=fix,
        )


def _check_one(job: _Job) -> FileResult:
    """Check (and fix) one file; runs in a worker process when there are many."""
    try:
        source = read_source(Path(job.path))
        result = job.check(source)
        fixable = sum(finding.fixable for finding in result.findings)
        if job.diff and fixable:
            fixed = job.check(source, fix=True)
            changes = unified_diff(source, fixed.fixed, job.path) if fixed.fixed else ""
            return FileResult(job.path, tuple(result.findings), diff=changes)
        if not (job.fix and fixable):
            return FileResult(job.path, tuple(result.findings))
        fixed = job.check(source, fix=True)
        if fixed.fixed is None:
            return FileResult(job.path, tuple(fixed.findings))
        atomic_write(Path(job.path), fixed.fixed)
        still_fixable = sum(finding.fixable for finding in fixed.findings)
        return FileResult(job.path, tuple(fixed.findings), fixed=max(0, fixable - still_fixable))
    except InputError as error:
        return FileResult(job.path, error=str(error))
    except Exception as error:  # a bug in a rule must not hide the other files' findings
        return FileResult(
            job.path, error=f"{job.path}: internal error: {type(error).__name__}: {error}"
        )


def check_stdin(source: bytes, name: str, options: CheckOptions) -> tuple[FileResult, bytes]:
    """Check source read from stdin as the file `name` (its per-file-ignores apply): the
    result, and the source with `--fix`'s fixes applied (the source itself without)."""
    job = _Job(
        name,
        options.select,
        options.extend_select,
        options.ignore | _ignored_in(name, options),
        options.fix,
        options.diff,
    )
    try:
        original = job.check(source)
        fixable = sum(finding.fixable for finding in original.findings)
        if not ((options.fix or options.diff) and fixable):
            return FileResult(name, tuple(original.findings)), source
        fixed = job.check(source, fix=True)
    except InputError as error:
        return FileResult(name, error=str(error)), source
    after = fixed.fixed if fixed.fixed is not None else source
    if options.diff:
        return FileResult(name, tuple(original.findings), diff=unified_diff(source, after, name)), (
            source
        )
    still = sum(finding.fixable for finding in fixed.findings)
    return FileResult(name, tuple(fixed.findings), fixed=max(0, fixable - still)), after


def unified_diff(before: bytes, after: bytes, name: str) -> str:
    """`--diff`'s output for one file: `a/NAME` to `b/NAME`, as git and ruff print it."""
    import difflib

    old = before.decode("utf-8", "replace").splitlines(keepends=True)
    new = after.decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}"))
