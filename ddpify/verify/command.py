"""`ddpify verify`: the typer command (registered by ddpify.cli) and `python -m ddpify.verify`."""

from __future__ import annotations

import shlex
import signal
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

EPILOG = (
    "Checks: runs, replicas-in-sync, equivalence, data-sharding, side-effects-once, "
    "evaluation, resume. "
    "Exit codes: 0 equivalent, 1 not equivalent, 2 could not run (the original fails, bad "
    "arguments) or could not establish equivalence, 3 equivalent except what each process "
    "computes over its own part: BatchNorm's statistics (SyncBatchNorm makes them global), "
    "or a loss the conversion reported (DDP007)."
)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def verify(
    original: Annotated[Path, typer.Argument(help="The single-GPU training script.")],
    converted: Annotated[Path, typer.Argument(help="Its DDP version.")],
    nproc: Annotated[
        int, typer.Option("--nproc", min=1, help="Processes for the converted script.")
    ] = 2,
    steps: Annotated[
        int, typer.Option("--steps", min=1, help="Optimizer steps per epoch (at most).")
    ] = 3,
    epochs: Annotated[
        int, typer.Option("--epochs", min=1, help="Passes over the training data.")
    ] = 2,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds each run may take.")
    ] = 120,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            metavar="ARGS",
            help=(
                "Run both scripts a second time in the same folders with these extra "
                "arguments (their resume flag, e.g. --resume '--resume ckpt.pt') and check "
                "they resume alike. A script that looks for its checkpoint before writing "
                "it is run again without this."
            ),
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the temporary working folders and records.")
    ] = False,
    script_args: Annotated[
        list[str] | None,
        typer.Argument(help="Arguments for both scripts, after --.", show_default=False),
    ] = None,
) -> None:
    """Run ORIGINAL as one process and CONVERTED as --nproc processes for --epochs passes
    over the training data, each cut to --steps optimizer steps, with what the scripts do
    between epochs, and check they train the same: runs, replicas-in-sync, equivalence,
    data-sharding, side-effects-once, evaluation, and resume (a second run in the same
    folders). Runs on CPUs (gloo) when there is no GPU."""
    # Imported here: `ddpify check` and `ddpify` itself load this module without running it.
    from ddpify.source import InputError
    from ddpify.verify.judge import judge
    from ddpify.verify.report import render_json, render_table
    from ddpify.verify.runner import VerifyOptions, run_verification

    options = VerifyOptions(
        original=original,
        converted=converted,
        script_args=tuple(script_args or ()),
        nproc=nproc,
        steps=steps,
        epochs=epochs,
        timeout=timeout,
        keep=keep,
        resume=None if resume is None else tuple(shlex.split(resume)),
    )
    previous = signal.signal(signal.SIGTERM, _interrupt)  # cleaned up like Ctrl-C
    try:
        verification = run_verification(options, lambda line: typer.echo(line, err=True))
    except InputError as error:
        typer.echo(f"ddpify: error: {error}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        typer.echo("ddpify verify: interrupted; every process stopped", err=True)
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    outcome = judge(verification)
    if json_output:
        typer.echo(render_json(verification, outcome))
    else:
        typer.echo(render_table(verification, outcome))
    raise typer.Exit(outcome.exit_code)


def main() -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(epilog=EPILOG)(verify)
    app()
