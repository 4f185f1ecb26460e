"""The lab report as a list of blocks, rendered twice: Markdown, and one self-contained HTML
file with the charts embedded as base64, so it can be mailed or opened from anywhere."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str


@dataclass
class Bullets:
    """A list; each item (depth, text), depth 0 at the margin and 1 under the item above."""

    items: list[tuple[int, str]]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]


@dataclass
class Image:
    path: Path
    caption: str


@dataclass
class Report:
    title: str
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> None:
        self.blocks.extend(blocks)


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(report: Report, relative_to: Path) -> str:
    lines = [f"# {report.title}", ""]
    for block in report.blocks:
        if isinstance(block, Heading):
            lines += [f"{'#' * block.level} {block.text}", ""]
        elif isinstance(block, Paragraph):
            lines += [block.text, ""]
        elif isinstance(block, Bullets):
            lines += [f"{'  ' * depth}- {text}" for depth, text in block.items] + [""]
        elif isinstance(block, Table):
            lines.append("| " + " | ".join(_cell(h) for h in block.header) + " |")
            lines.append("|" + "---|" * len(block.header))
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in block.rows]
            lines.append("")
        elif isinstance(block, Image):
            try:
                where = block.path.relative_to(relative_to)
            except ValueError:
                where = block.path
            lines += [f"![{block.caption}]({where.as_posix()})", ""]
    return "\n".join(lines)


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f2f2f2; }
td.pass { color: #17702b; font-weight: bold; } td.fail { color: #b3261e; font-weight: bold; }
img { max-width: 100%; } figcaption { color: #555; font-size: 0.9em; }
"""


def _html_cell(value) -> str:
    text = str(value)
    # verdicts styled alike wherever they stand: the gate's PASS/FAIL, a target's yes/NO
    css = {"PASS": ' class="pass"', "yes": ' class="pass"', "FAIL": ' class="fail"',
           "NO": ' class="fail"'}.get(text, "")  # fmt: skip
    return f"<td{css}>{html.escape(text)}</td>"


def _html_list(items: list[tuple[int, str]]) -> str:
    """Nested <ul> from (depth, text) items: a deeper item opens a list inside the item above."""
    out, depth = [], -1
    for level, text in items:
        level = min(level, depth + 1)  # a list never skips a level
        if level > depth:
            out.append("<ul>")
            depth = level
        else:
            out.append("</li>")
            while depth > level:
                out.append("</ul></li>")
                depth -= 1
        out.append(f"<li>{html.escape(text)}")
    if depth >= 0:
        out.append("</li>" + "</ul></li>" * depth + "</ul>")
    return "".join(out)


def to_html(report: Report) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(report.title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(report.title)}</h1>",
    ]
    for block in report.blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, Bullets):
            parts.append(_html_list(block.items))
        elif isinstance(block, Table):
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in block.header)
            body = "".join(
                "<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in block.rows
            )
            parts.append(f"<table><tr>{head}</tr>{body}</table>")
        elif isinstance(block, Image) and block.path.exists():
            data = base64.b64encode(block.path.read_bytes()).decode()
            kind = "svg+xml" if block.path.suffix == ".svg" else "png"
            parts.append(
                f"<figure><img alt='{html.escape(block.caption)}' src='data:image/{kind};base64,{data}'>"
                f"<figcaption>{html.escape(block.caption)}</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(report: Report, out: Path) -> tuple[Path, Path]:
    md, page = out / "report.md", out / "report.html"
    md.write_text(to_markdown(report, out))
    page.write_text(to_html(report))
    return md, page
