"""The `kernelab` command line.

Each command lives in its own module under kernelab/commands and adds itself to the app
through `register(app)`. This file only assembles them and turns a KernelabError or a usage
mistake into one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer

from kernelab.errors import KernelabError
from kernelab.output import JsonOption, emit

COMMAND_MODULES = (
    "gpus",
    "roofline",
    "ceilings",
    "bench",
    "compare",
    "ladder",
    "profile",
    "lenses",
    "hierarchy",
    "evaluate",
    "timeline",
    "lab",
)


def _click_exceptions(name: str) -> tuple[type[BaseException], ...]:
    """The click exception class `name`, from click itself and from the copy newer typer
    releases vendor as typer._click (the H200 image and this machine differ here)."""
    found = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


_NO_ARGS = _click_exceptions("NoArgsIsHelpError")
_USAGE = _click_exceptions("UsageError")
_ABORT = _click_exceptions("Abort")

app = typer.Typer(
    name="kernelab",
    help="A GPU kernel lab: roofline, tile and pipeline lenses, checked and timed kernels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(asked: bool) -> None:
    if asked:
        from kernelab import __version__

        print(f"kernelab {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print kernelab's version and exit ('kernelab version' lists the GPU software).",
        ),
    ] = False,
) -> None:
    """A GPU kernel lab: roofline, tile and pipeline lenses, checked and timed kernels."""


for _module in COMMAND_MODULES:
    importlib.import_module(f"kernelab.commands.{_module}").register(app)


@app.command()
def version(as_json: JsonOption = False) -> None:
    """The versions of kernelab and of the GPU software it finds."""
    from kernelab.environment import software_versions

    versions = software_versions()

    def render(console) -> None:
        for name, value in versions.items():
            shown = "not found" if value is None else value
            console.print(f"{name:>12}  {shown}", highlight=False)

    emit(versions, as_json, render)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 2 bad input or missing capability)."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="kernelab", standalone_mode=False)
    except _NO_ARGS as exc:
        print(exc.ctx.get_help() if getattr(exc, "ctx", None) else str(exc))
        return 0
    except _USAGE as exc:
        ctx = getattr(exc, "ctx", None)
        where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(f"kernelab: {exc.format_message()}{where}", file=sys.stderr)
        return 2
    except _ABORT:
        print("kernelab: interrupted", file=sys.stderr)
        return 130
    except KernelabError as exc:
        print(f"kernelab: {exc}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
