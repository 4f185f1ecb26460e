"""How commands print: a rich rendering for people, one JSON document for programs.

Every command takes --json. With it, stdout holds exactly one JSON value and nothing else
(progress and warnings go to stderr), so `kernelab X --json | jq` always works.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.color import Color, ColorParseError
from rich.console import Console, ConsoleDimensions
from rich.measure import Measurement
from rich.table import Table as RichTable

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]

# Wide enough that no table or line of ours is ever wrapped or clipped when there is no screen.
PIPED_WIDTH = 10_000

# What rich reads as a markup tag: "[" then a lower-case letter, "#", "/" or "@", up to "]".
# Kernel names and prose match it too: "[lambda() (instance 2)]", "tile[t][c]", "x[i]".
_TAG = re.compile(r"(\\*)\[([a-z#/@][^\[]*?)]")
# The style words a tag of ours may use besides colour names. rich's one-letter
# abbreviations (b, i, u, s, d, r, o) are left out on purpose: "x[i]" is an index, not italics.
_STYLE_WORDS = frozenset(
    "bold dim italic underline underline2 strike reverse blink blink2 conceal overline "
    "frame encircle not on".split()
)


def _is_style_word(word: str) -> bool:
    if word in _STYLE_WORDS:
        return True
    if len(word) < 2:
        return False
    try:
        Color.parse(word)
    except ColorParseError:
        return False
    return True


def _is_style_tag(content: str) -> bool:
    """Whether a tag's content names a style ("bold red", "/", "/red"), as our own markup
    does; anything else ("lambda() (instance 2)", "t + s", "link=...") is data."""
    words = content.removeprefix("/").split()
    return all(_is_style_word(word) for word in words) and (bool(words) or content == "/")


def keep_style_tags(text: str) -> str:
    """`text` with every bracket that is not a style tag escaped, so rich prints it as written.

    Commands build lines and table cells by putting data (kernel names, record fields, prose
    of the drill) into strings that carry a little markup of their own ("[red]FAIL[/]").
    Escaping each piece of data at each call is a rule that one forgotten call breaks, and
    rich drops what it takes for a tag without a word ("void f<[lambda() (instance 2)]>"
    loses its lambda; a stray "[/x]" ends the command with a MarkupError). Only tags made of
    style words stay markup."""

    def one(match: re.Match) -> str:
        backslashes, content = match.groups()
        if len(backslashes) % 2 or _is_style_tag(content):
            return match.group(0)
        return f"{backslashes}{backslashes}\\[{content}]"

    return _TAG.sub(one, text)


class _Console(Console):
    """A console that fits the terminal when there is one and, writing to a pipe or a file,
    never wraps or clips: there is no screen to fit, and a reader (grep, a log, a diff) wants
    whole lines and whole table cells, not rich's default of 80 columns and "...". Decided
    at each print, so a console made at import time follows pytest's capture and redirects.
    Only a width asked of it in code counts: rich also takes one from a COLUMNS environment
    variable (pytest-xdist's workers set COLUMNS=80), which says nothing about a pipe."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._asked_width = kwargs.get("width")

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._asked_width is None and not self.is_terminal:
            return ConsoleDimensions(PIPED_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)
        self._asked_width = new_size[0]

    def render_str(self, text: str, *, markup: bool | None = None, **kwargs):
        # Every string rich reads as markup passes here: printed lines, table cells and titles.
        if markup or (markup is None and self._markup):
            text = keep_style_tags(text)
        return super().render_str(text, markup=markup, **kwargs)

    def print(self, *objects, **kwargs) -> None:
        # A table wider than the terminal (see Table) is printed whole, not cropped at the edge.
        if any(isinstance(o, RichTable) for o in objects):
            kwargs.setdefault("crop", False)
        # Inside a capture or a recording (or a rich without _buffer_index), print as rich does.
        if self.is_terminal or self.record or getattr(self, "_buffer_index", 1):
            super().print(*objects, **kwargs)
            return
        # Through a pipe, lines end where their text does: rich pads every table row to the
        # table's width, which a diff or a grep sees as trailing blanks.
        with self.capture() as captured:
            super().print(*objects, **kwargs)
        text = captured.get()
        self.file.write("\n".join(line.rstrip() for line in text.split("\n")))
        self.file.flush()


class Table(RichTable):
    """A rich table that never clips a cell to "..." (rich's default on a narrow terminal).

    When the terminal is narrower than the table, cells wrap at their spaces; when even the
    longest words of every column do not fit side by side, the table is drawn whole at its
    natural width and the terminal wraps its lines. A figure cut to "1,4..." is worse than
    either.
    """

    def add_column(self, *args, **kwargs) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(*args, **kwargs)

    def widths(self, console) -> Measurement:
        """The narrowest this table can be drawn without breaking a word, and its natural width."""
        return self.__rich_measure__(console, console.options.update(max_width=PIPED_WIDTH))

    def __rich_console__(self, console, options):
        fits = self.widths(console)
        if fits.minimum > options.max_width:
            options = options.update(max_width=fits.maximum)
        yield from super().__rich_console__(console, options)


console = _Console()
err_console = _Console(stderr=True)


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
