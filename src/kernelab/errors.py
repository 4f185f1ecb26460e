"""The errors kernelab reports to a person in one line.

Anything raised as a KernelabError reaches the command line as `kernelab: <message>` on
stderr and exit code 2, never as a traceback. Raise it for bad input and for a missing
capability (no GPU, no nvcc, no ncu); let real bugs raise what they raise.

The checks at the end (output_file, output_folder, input_file, positive_number) turn a bad
path or number on the command line into such an error before a command starts any work.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from pathlib import Path


class KernelabError(Exception):
    """A problem the user can fix; its message is one line that says how."""


class UnknownNameError(KernelabError):
    """An unknown GPU, op, dtype, kernel or implementation name."""


class NoGPUError(KernelabError):
    """The command needs a CUDA GPU and this machine has none."""


class MissingToolError(KernelabError):
    """An external tool (nvcc, ncu) or optional package is not installed."""


def closest(name: str, choices, n: int = 3) -> list[str]:
    """The choices most like `name`, for 'did you mean' hints."""
    import difflib

    choices = list(choices)
    hits = difflib.get_close_matches(name.lower(), choices, n=n, cutoff=0.3)
    if not hits:
        hits = [c for c in choices if name.lower() in c or c in name.lower()][:n]
    return hits


KNOWN_SHOWN = 12  # names an unknown-name error lists; the line stays short with 100+ choices


def unknown(kind: str, name: str, choices) -> UnknownNameError:
    """An UnknownNameError whose message suggests the closest known names and lists the known
    ones, the first KNOWN_SHOWN of them and how many more when there are many."""
    hints = closest(name, choices)
    hint = f"; did you mean {', '.join(hints)}?" if hints else ""
    known = sorted(choices)
    shown = ", ".join(known[:KNOWN_SHOWN])
    if len(known) > KNOWN_SHOWN:
        shown += f" and {len(known) - KNOWN_SHOWN} more"
    return UnknownNameError(f"unknown {kind} '{name}'{hint} (known: {shown})")


# --- options checked before any work starts ------------------------------------------------
#
# A command takes its path options as plain strings (so that "" is seen as "", not as the
# current folder Path("") becomes) and passes them through these helpers first, so that a bad
# path or number ends the command with one line before anything is measured or written.


def _given_path(value: str, option: str) -> Path:
    if not value.strip():
        raise KernelabError(f"{option} needs a path, not an empty string")
    return Path(value).expanduser()


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _can_create_in(folder: Path, option: str, path: Path) -> None:
    """Create and remove a scratch file in `folder`: the only test that holds for root (who
    passes every permission check) and for file systems like /proc that refuse new files."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise KernelabError(
            f"{option} {path}: cannot write in {folder} ({exc.strerror or type(exc).__name__})"
        ) from None


def output_file(value: str | None, option: str, *, suffixes: tuple[str, ...] = ()) -> Path | None:
    """The file an option names for writing, checked up front: not empty, not a folder, one
    of `suffixes` when given, in an existing folder where a file can be created. A missing
    folder is an error rather than created, so a typo does not quietly grow a tree."""
    if value is None:
        return None
    path = _given_path(value, option)
    if suffixes and path.suffix.lower() not in suffixes:
        raise KernelabError(
            f"{option} writes {' or '.join(suffixes)} files; '{path}' ends in "
            f"{path.suffix or 'no suffix'}"
        )
    if path.is_dir():
        raise KernelabError(f"{option} {path} is a folder; give a file name")
    parent = path.parent
    if not parent.exists():
        raise KernelabError(f"{option} {path}: no folder {parent} (create it first)")
    if not parent.is_dir():
        raise KernelabError(f"{option} {path}: {parent} is not a folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise KernelabError(f"{option} {path}: the file is read-only")
    _can_create_in(parent, option, path)
    return path


def output_folder(value: str | None, option: str) -> Path | None:
    """The folder an option names for writing into, checked up front: not empty, not a file,
    and writable (a folder that does not exist yet must be creatable under its nearest
    existing ancestor)."""
    if value is None:
        return None
    path = _given_path(value, option)
    if path.exists() and not path.is_dir():
        raise KernelabError(f"{option} {path} is a file; give a folder")
    ancestor = _nearest_existing(path)
    if not ancestor.is_dir():
        raise KernelabError(f"{option} {path}: {ancestor} is a file, not a folder")
    _can_create_in(ancestor, option, path)
    return path


def input_file(value: str | None, option: str) -> Path | None:
    """A file an option names for reading: not empty, there, a regular file (not a device
    such as /dev/null, a pipe or a socket, which exist but hold no report), readable, and
    with something in it."""
    if value is None:
        return None
    path = _given_path(value, option)
    if not path.exists():
        raise KernelabError(f"{option} {path}: no such file")
    if path.is_dir():
        raise KernelabError(f"{option} {path} is a folder; give a file")
    if not path.is_file():
        raise KernelabError(
            f"{option} {path} is not a regular file (a device, a pipe or a socket); give a file"
        )
    if not os.access(path, os.R_OK):
        raise KernelabError(f"{option} {path}: the file is not readable")
    if path.stat().st_size == 0:
        raise KernelabError(f"{option} {path} is empty")
    return path


def positive_number(value: float | None, option: str, unit: str = "") -> float | None:
    """A number option that must be finite and above zero (nan, inf, 0 and below refused)."""
    if value is None:
        return None
    if not (math.isfinite(value) and value > 0):
        unit_text = f" ({unit})" if unit else ""
        raise KernelabError(f"{option} must be a positive, finite number{unit_text}, got {value}")
    return value


def one_line_failures(main):
    """The main() of a child process kernelab starts (`python -m kernelab.profiling.runner`,
    the ladders' verifiers, ...): a KernelabError ends it as the CLI ends, one line on stderr
    and exit status 2, so the parent can show the reason as it came."""

    @functools.wraps(main)
    def guarded(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except KernelabError as exc:
            print(f"kernelab: {exc}", file=sys.stderr)
            return 2

    return guarded
