"""The live view of a spread run on stderr: one bar for the whole run and, per GPU, how many
tasks it finished, how many of those failed, how many were cut, and what it runs now."""

from __future__ import annotations

from collections import Counter

from kernelab.spread.engine import Progress, place_label


class GpuBars(Progress):
    """rich's live display: the run's bar above a table with a row per GPU (node, GPU id)."""

    def __init__(self, title: str, total: int, already: int = 0):
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        from kernelab.output import err_console

        self.bar = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=err_console,
        )  # fmt: skip
        self.whole = self.bar.add_task(title, total=total, completed=already)
        self.live = Live(self, console=err_console, refresh_per_second=4, transient=False)
        self.running: dict[str, str | None] = {}
        self.done: Counter = Counter()
        self.failed: Counter = Counter()
        self.cut: Counter = Counter()

    def __rich__(self):
        from rich.console import Group
        from rich.table import Table

        table = Table(box=None, pad_edge=False, show_edge=False)
        for column in ("GPU", "done", "failed", "cut", "running"):
            table.add_column(column, justify="right" if column in ("done", "failed", "cut")
                             else "left")  # fmt: skip
        for where in sorted(set(self.running) | set(self.done) | set(self.cut)):
            failed = self.failed[where]
            table.add_row(
                where, str(self.done[where]), f"[red]{failed}[/red]" if failed else "0",
                str(self.cut[where]), self.running.get(where) or "-",
            )  # fmt: skip
        return Group(self.bar, table)

    def started(self, slots) -> None:
        self.live.start()

    def tick(self, slots) -> None:
        for slot in slots:
            where = place_label(slot.place)
            if where:
                self.running[where] = slot.task.label if slot.task else None

    def finished(self, task, where, ok: bool) -> None:
        self.bar.advance(self.whole)
        key = where or "?"
        self.done[key] += 1
        if not ok:
            self.failed[key] += 1
        self.running[key] = None

    def faulted(self, task, where, reason: str) -> None:
        key = where or "?"
        self.cut[key] += 1
        self.running[key] = None

    def close(self) -> None:
        self.live.stop()
        console = self.live.console
        if not console.is_terminal:  # the last frame ends without a line break there
            console.line()
