"""The command line: the only layer that reads arguments, prints, writes files and exits."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ddpify import __version__
from ddpify.options import BatchMode, ConvertOptions, Launcher, OutputFormat, ScaleLR
from ddpify.verify import command as verify_command

# Each command imports what it runs when it runs: `ddpify check one_file.py` in a pre-commit
# hook pays for the checker alone, not for the converter, its edits or the verifier.
if TYPE_CHECKING:
    from ddpify.convert import ConvertResult

SUBCOMMANDS = ("check", "verify", "rules", "explain")
EPILOG = (
    "Other commands: `ddpify check` finds mistakes in scripts already distributed, "
    "`ddpify verify ORIGINAL CONVERTED` proves a conversion trains the same, "
    "`ddpify rules` lists the rules, `ddpify explain CODE` documents one. "
    "Exit codes: 0 done, 1 --check found changes or --strict found something it could not "
    "convert, 2 bad input or usage."
)
CHECK_EPILOG = (
    "By default only the rules that find near-certain bugs run; advice is opt-in "
    "(`ddpify rules` shows which is which; --select ALL runs every rule). "
    "Settings come from \\[tool.ddpify] in the nearest pyproject.toml (select, "
    "extend-select, ignore, per-file-ignores, exclude, force-exclude); --select replaces its "
    "select, extend-select and ignore, --extend-select and --ignore add to its own. "
    "`# noqa: DDP101` silences a line. "
    "Exit codes: 0 no findings, 1 findings remain (also after --fix), 2 a file could not "
    "be read or parsed, or bad usage."
)

convert_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
tools_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"ddpify: error: {message}", err=True)
    return typer.Exit(2)


def _print_version(value: bool) -> None:
    """`--version`, answered before the arguments are checked (SRC is not needed)."""
    if value:
        typer.echo(f"ddpify {__version__}")
        raise typer.Exit(0)


@convert_app.command(epilog=EPILOG)
def convert(
    src: Annotated[str, typer.Argument(help="The training script to convert; - for stdin.")],
    output: Annotated[
        str | None,
        typer.Option("-o", "--output", help="Write the converted script here; - for stdout."),
    ] = None,
    diff: Annotated[
        bool, typer.Option("--diff", help="Print a unified diff, write nothing.")
    ] = False,
    in_place: Annotated[bool, typer.Option("--in-place", help="Rewrite SRC itself.")] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if the script would change.")
    ] = False,
    launcher: Annotated[
        Launcher, typer.Option(help="How the converted script is launched.")
    ] = Launcher.TORCHRUN,
    batch: Annotated[
        BatchMode,
        typer.Option(
            help="per-gpu: each process keeps the batch size (effective batch x N); "
            "global: the batch size is divided by the world size (effective batch unchanged)."
        ),
    ] = BatchMode.PER_GPU,
    scale_lr: Annotated[
        ScaleLR, typer.Option(help="Scale the learning rate by the world size (or its root).")
    ] = ScaleLR.NONE,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when something could not be converted.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No report on stderr.")] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="With -o FILE: then run `ddpify verify SRC FILE` and exit with its code.",
        ),
    ] = False,
    script_args: Annotated[
        list[str] | None,
        typer.Argument(
            help="With --verify: arguments for both scripts, after --.", show_default=False
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Convert a single-GPU PyTorch training script to DistributedDataParallel.

    The converted script runs under `torchrun` (one process per GPU, or several CPU
    processes with gloo) and still runs as one process with plain `python`.
    """
    if sum((diff, in_place, check, output is not None)) > 1:
        raise _fail("choose one of -o, --diff, --in-place and --check")
    if in_place and src == "-":
        raise _fail("--in-place needs a file, not stdin")
    if verify and (src == "-" or output in (None, "-")):
        raise _fail("--verify needs a script file and -o FILE: it runs both")
    if script_args and not verify:
        raise _fail(f"unexpected arguments {' '.join(script_args)!r} (they are for --verify)")
    source_path = None if src == "-" else Path(src)
    target = Path(output) if output not in (None, "-") else None
    if source_path is not None and target is not None and _same_file(source_path, target):
        raise _fail(f"-o {output} is the input itself: use --in-place to rewrite it")
    from ddpify.convert import convert_source
    from ddpify.source import InputError, atomic_write, read_source

    options = ConvertOptions(launcher=launcher, batch=batch, scale_lr=scale_lr)
    name = src if source_path is None else str(source_path)
    try:
        source = sys.stdin.buffer.read() if source_path is None else read_source(source_path)
        result = convert_source(source, name, options, source_path)
        if target is not None and not target.parent.is_dir():
            raise InputError(f"{target}: the output folder {target.parent} does not exist")
    except InputError as error:
        raise _fail(str(error)) from None

    if not quiet:
        _report(result, name, options, output or (name if in_place else None))
    if diff:
        sys.stdout.write(result.diff(name))
    elif check:
        pass
    elif in_place:
        assert source_path is not None
        if result.changed:
            atomic_write(source_path, result.output)
    elif target is not None:
        if not result.refused:
            atomic_write(target, result.output)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(result.output)
    if result.refused:
        raise typer.Exit(1)
    if check and result.changed:
        raise typer.Exit(1)
    if strict and result.problems:
        raise typer.Exit(1)
    if verify and result.changed:
        from ddpify.verify.command import verify as verify_command

        assert source_path is not None and target is not None
        verify_command(source_path, target, script_args=script_args)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _report(result: ConvertResult, name: str, options: ConvertOptions, out: str | None) -> None:
    from ddpify.convert import batch_semantics, launch_command
    from ddpify.rule import NoteKind

    def say(line: str) -> None:
        typer.echo(line, err=True)

    if result.skipped:
        say(f"{name}: unchanged: {result.skipped}")
        return
    for note in result.notes:
        tag = {NoteKind.CHANGED: "", NoteKind.CANNOT: "cannot: ", NoteKind.INFO: "note: "}[
            note.kind
        ]
        say(f"{name}:{note.line}: {note.code} {tag}{note.message}")
    if result.refused:
        say(f"{name}: not converted: a safe conversion needs the changes above made by hand")
        return
    if not result.changed:
        say(f"{name}: unchanged")
        return
    say(f"{name}: {batch_semantics(options, result.whole_batch)}")
    if out and out != "-":
        say(f"launch with: {launch_command(out, options)}")


@tools_app.command(epilog=CHECK_EPILOG)
def check(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PATHS",
            help="Files and folders to check, or - for stdin \\[default: .]",
            show_default=False,
        ),
    ] = None,
    fix: Annotated[
        bool, typer.Option("--fix", help="Apply the fixes, then report what remains.")
    ] = False,
    select: Annotated[
        str | None,
        typer.Option(
            metavar="CODES",
            help="Check only these codes or prefixes: DDP101,DDP11 (ALL: every rule).",
        ),
    ] = None,
    extend_select: Annotated[
        str | None,
        typer.Option(
            metavar="CODES",
            help="Add these codes or prefixes to the selection (opt-in rules: DDP112).",
        ),
    ] = None,
    ignore: Annotated[
        str | None, typer.Option(metavar="CODES", help="Skip these codes or prefixes.")
    ] = None,
    output_format: Annotated[
        OutputFormat, typer.Option("--format", help="How findings are printed.")
    ] = OutputFormat.TEXT,
    diff: Annotated[
        bool,
        typer.Option(
            "--diff", help="Print what --fix would change as a unified diff; write nothing."
        ),
    ] = False,
    statistics: Annotated[
        bool, typer.Option("--statistics", help="Print a count per rule instead of each finding.")
    ] = False,
    exit_zero: Annotated[
        bool, typer.Option("--exit-zero", help="Exit 0 even when findings remain.")
    ] = False,
    stdin_filename: Annotated[
        str | None,
        typer.Option(
            metavar="PATH",
            help="With PATHS `-` (source on stdin): the file's name, for the report, "
            "per-file-ignores and finding the configuration.",
        ),
    ] = None,
) -> None:
    """Find DDP mistakes in training scripts that are already distributed."""
    from ddpify.check import selected_rules
    from ddpify.formats import render, render_statistics
    from ddpify.workspace import (
        CheckReport,
        ConfigError,
        check_stdin,
        load_options,
        parse_codes,
        run_check,
    )

    targets = paths or ["."]
    from_stdin = targets == ["-"]
    if "-" in targets and not from_stdin:
        raise _fail("`-` (stdin) cannot be checked together with other paths")
    if fix and diff:
        raise _fail("choose one of --fix and --diff")
    try:
        options = load_options(
            [stdin_filename or "."] if from_stdin else targets,
            select=parse_codes(select) if select is not None else None,
            extend_select=parse_codes(extend_select) if extend_select is not None else None,
            ignore=parse_codes(ignore) if ignore is not None else None,
            fix=fix,
            diff=diff,
        )
    except ConfigError as error:
        raise _fail(str(error)) from None
    if from_stdin:
        result, fixed = check_stdin(sys.stdin.buffer.read(), stdin_filename or "-", options)
        rules = selected_rules(options.select, options.ignore, options.extend_select)
        report = CheckReport((result,), tuple(rules))
        if fix:  # ruff's contract: the fixed source on stdout, the report on stderr
            sys.stdout.buffer.write(fixed)
            sys.stdout.flush()
    else:
        report = run_check(targets, options)
    for message in report.errors:
        typer.echo(f"ddpify: error: {message}", err=True)
    if not report.files:
        typer.echo("No Python files to check.", err=True)
        if output_format is OutputFormat.TEXT:
            raise typer.Exit(0)
    if diff:
        typer.echo(report.diff, nl=False)
        fixable = report.fixable if report.diff else 0
        typer.echo(f"Would fix {fixable} error{'s' if fixable != 1 else ''}.", err=True)
        raise typer.Exit(2 if report.errors else int(bool(report.diff)))
    shown = render_statistics(report) if statistics else render(report, output_format)
    typer.echo(shown, nl=False, err=from_stdin and fix)
    if report.errors:
        raise typer.Exit(2)
    if report.findings and not exit_zero:
        raise typer.Exit(1)


# The verifier imports torch only in the processes it starts; its command module does not.
tools_app.command("verify", epilog=verify_command.EPILOG)(verify_command.verify)


@tools_app.command("rules")
def list_rules() -> None:
    """List every rule: code, name, kind and what it does. A check rule is on by default
    or opt-in (--extend-select), with its severity."""
    from ddpify.rule import CheckRule, all_rules

    for rule in all_rules():
        if isinstance(rule, type) and issubclass(rule, CheckRule):
            kind = f"{'default' if rule.default else 'opt-in':<8}{rule.severity.value:<8}"
        else:
            kind = f"{'convert':<16}"
        typer.echo(f"{rule.code}  {rule.name:<28} {kind}{rule.message}")


@tools_app.command()
def explain(code: Annotated[str, typer.Argument(help="A rule code, e.g. DDP004.")]) -> None:
    """Print one rule's documentation."""
    from ddpify.rule import all_rules

    rules = {rule.code: rule for rule in all_rules()}
    rule = rules.get(code.upper())
    if rule is None:
        raise _fail(f"no rule {code}; `ddpify rules` lists them")
    typer.echo(rule.documentation())


def main() -> None:
    """`ddpify SRC ...` converts; `ddpify rules` and `ddpify explain` are subcommands."""
    args = sys.argv[1:]
    if args and args[0] in SUBCOMMANDS:
        tools_app(args=args, prog_name="ddpify")
    else:
        convert_app(args=args, prog_name="ddpify")
