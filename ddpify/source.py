"""Reading, parsing and writing source files without ever losing the user's bytes."""

from __future__ import annotations

import ast
import io
import os
import stat
import tempfile
import tokenize
from pathlib import Path

import libcst as cst


class InputError(Exception):
    """A problem with the user's input, rendered by the CLI as one line and exit code 2."""


def read_source(path: Path) -> bytes:
    """The file's bytes; an `InputError` naming the problem when there are none to read."""
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a Python file")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None


def parse_source(source: bytes, name: str) -> cst.Module:
    """Parse bytes as LibCST does (honouring an encoding cookie), with one-line errors."""
    decode(source, name)
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        # Python's own parser names the position and the problem better than LibCST's.
        try:
            ast.parse(source, filename=name)
        except SyntaxError as python_error:
            raise InputError(
                f"{name}:{python_error.lineno}:{python_error.offset}: "
                f"syntax error: {python_error.msg}"
            ) from None
        raise InputError(
            f"{name}:{error.editor_line}:{error.editor_column}: syntax error: "
            f"{error.message.splitlines()[0]}"
        ) from None
    except (UnicodeDecodeError, LookupError, SyntaxError) as error:
        raise InputError(f"{name}: cannot decode: {error}") from None


def decode(source: bytes, name: str) -> str:
    """The text, decoded as Python would (encoding cookie, BOM, else UTF-8)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        return source.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as error:
        reason = error.msg if isinstance(error, SyntaxError) else str(error)
        raise InputError(f"{name}: cannot decode: {reason}") from None


def check_syntax(source: bytes, name: str) -> None:
    """Python's own (fast) parser only: for files nothing will be done to."""
    try:
        ast.parse(decode(source, name), filename=name)
    except SyntaxError as error:
        raise InputError(
            f"{name}:{error.lineno}:{error.offset}: syntax error: {error.msg}"
        ) from None


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same folder, then rename: never a truncated file.
    A symbolic link is followed (the link stays, its target gets the text); a target that
    is not a regular file (`/dev/null`, `/dev/stdout`, a pipe) is written into, never
    replaced; a folder is an error."""
    if path.is_symlink():
        path = path.resolve()
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a file to write")
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        with path.open("wb") as stream:
            stream.write(data)
        return
    folder = path.parent
    if not folder.is_dir():
        raise InputError(f"{path}: the output folder {folder} does not exist")
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
