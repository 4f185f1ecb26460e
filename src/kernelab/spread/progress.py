"""The live view of a spread run on stderr: one bar for the whole run and, per GPU, how many
tasks it finished, how many of those failed, and what it runs now."""

from __future__ import annotations

from collections import Counter

from kernelab.spread.engine import Progress, place_label


class GpuBars(Progress):
    """rich's progress display: the run's bar and a line per GPU (by node and GPU id)."""

    def __init__(self, title: str, total: int, already: int = 0):
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        from kernelab.output import err_console

        self.bars = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=False,
        )
        self.whole = self.bars.add_task(title, total=total, completed=already)
        self.lines: dict[str, int] = {}
        self.done: Counter = Counter()
        self.failed: Counter = Counter()
        self.faults: Counter = Counter()

    def _line(self, where: str) -> int:
        if where not in self.lines:
            self.lines[where] = self.bars.add_task(where, total=None, start=False)
        return self.lines[where]

    def _describe(self, where: str, running: str | None) -> None:
        faults = f", {self.faults[where]} cut" if self.faults[where] else ""
        now = f", running {running}" if running else ", idle"
        self.bars.update(
            self._line(where),
            description=f"  {where}: {self.done[where]} done, {self.failed[where]} failed"
            f"{faults}{now}",
        )

    def started(self, slots) -> None:
        self.bars.start()

    def tick(self, slots) -> None:
        for slot in slots:
            where = place_label(slot.place)
            if where:
                self._describe(where, slot.task.label if slot.task else None)

    def finished(self, task, where, ok: bool) -> None:
        self.bars.advance(self.whole)
        key = where or "?"
        self.done[key] += 1
        if not ok:
            self.failed[key] += 1
        self._describe(key, None)

    def faulted(self, task, where, reason: str) -> None:
        key = where or "?"
        self.faults[key] += 1
        self._describe(key, None)

    def close(self) -> None:
        self.bars.stop()
