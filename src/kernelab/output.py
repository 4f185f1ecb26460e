"""How commands print: a rich rendering for people, one JSON document for programs.

Every command takes --json. With it, stdout holds exactly one JSON value and nothing else
(progress and warnings go to stderr), so `kernelab X --json | jq` always works.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]

console = Console()
err_console = Console(stderr=True)


def to_jsonable(value: Any) -> Any:
    """Dataclasses, paths, tuples and non-finite floats made plain JSON."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "to_dict"):
        return to_jsonable(value.to_dict())
    if isinstance(value, dict) or type(value).__name__ == "mappingproxy":
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def emit(data: Any, as_json: bool, render: Callable[[Console], None]) -> None:
    """Print `data` as JSON when asked, else let `render` draw it for a person."""
    if as_json:
        sys.stdout.write(json.dumps(to_jsonable(data), indent=2) + "\n")
    else:
        render(console)


def note(message: str) -> None:
    """A progress line or warning: always stderr, so it never breaks --json output."""
    err_console.print(message, highlight=False)
