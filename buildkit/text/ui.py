"""Terminal output shared by the commands: rich consoles on stdout and stderr, the one way errors look, and the
printouts more than one command shows (preflight checks, the prepare summary, drift findings)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from buildkit.errors import BuildkitError
from buildkit.text.sanitize import strip_controls, without_remembered_secrets

# How wide a table or block may be measured (its widest line, unwrapped, is far less): no limit, in effect.
_MEASURE_LIMIT = 100_000


def unbounded(console: Console) -> bool:
    """Whether `console` writes to a pipe or a file with no COLUMNS given: scripts and logs, which want whole
    values, where rich would take 80 columns."""
    return isinstance(console, _Console) and console.unbounded()


class _Console(Console):
    """A rich console that, writing to a pipe or a file with no COLUMNS (`unbounded`), prints each table or block at
    the width it needs: rich's default there is 80 columns, which cut the resolve table's values (`127.0.0.1:180…`)
    and wrapped the rest in the files and logs scripts read. On a terminal, or with COLUMNS, nothing changes. Text
    is never wrapped either way (soft_wrap); a rule (no width of its own) stays 80 wide."""

    _print_width: int | None = None  # the width of the print in progress, when it needs more than the console's

    def unbounded(self) -> bool:
        """Not a terminal, and no width given: rich takes COLUMNS (when it is a number) as one when it starts."""
        return not self.is_terminal and self._width is None

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self._print_width is None else ConsoleDimensions(self._print_width, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def print(self, *objects: Any, **kwargs: Any) -> None:
        needed = self._needed(objects) if self.unbounded() and kwargs.get("width") is None else 0
        if needed <= self.width:
            super().print(*objects, **kwargs)
            return
        self._print_width = needed
        try:
            super().print(*objects, **kwargs)
        finally:
            self._print_width = None

    def _needed(self, objects: tuple[Any, ...]) -> int:
        """The widest of the renderables' unwrapped widths (text is soft-wrapped: never cut, so not measured)."""
        options = self.options.update_width(_MEASURE_LIMIT)
        widths = [Measurement.get(self, options, each).maximum for each in objects if not isinstance(each, str)]
        return min(max(widths, default=0), _MEASURE_LIMIT)


# NO_COLOR (no-color.org: set and not empty) turns off every style, bold and dim included, not only colours.
_COLOR_SYSTEM: Literal["auto"] | None = None if os.environ.get("NO_COLOR") else "auto"
out: Console = _Console(highlight=False, soft_wrap=True, color_system=_COLOR_SYSTEM)
err: Console = _Console(stderr=True, highlight=False, soft_wrap=True, color_system=_COLOR_SYSTEM)


SECRET_ENV = ("GITHUB_TOKEN", "COSIGN_PASSWORD")


def without_secrets(text: str) -> str:
    """The last guard: a secret from the environment, or one read from Docker's credentials, never reaches the
    terminal, whatever an upstream echoed."""
    text = without_remembered_secrets(text)
    for name in SECRET_ENV:
        secret = os.environ.get(name, "")
        if len(secret) >= 8:  # tokens are long; a short value would blank out ordinary words
            text = text.replace(secret, f"${name}")
    return text


def safe(text: object) -> str:
    """Text from outside, ready for a rich console: control characters (ANSI/OSC sequences) out, markup escaped."""
    return escape(without_secrets(strip_controls(text)))


def print_error(error: BuildkitError) -> None:
    err.print(f"[bold red]error:[/] {safe(error.message)}", markup=True, emoji=False)
    if error.hint:
        err.print(f"  [dim]hint:[/] {safe(error.hint)}", markup=True, emoji=False)


def print_interrupted(command: str | None, what: str) -> None:
    """The one line an interrupted command ends with (exit 130): which command, what stopped ("interrupted
    (Ctrl-C)", or what the work said where it stopped), and what is left: every file buildkit writes is replaced
    whole (buildkit/files.py), so nothing is half-written; a wheel's partial download is kept to resume."""
    if not what.startswith("interrupted"):
        what = f"interrupted: {what}"
    who = f"buildkit {command}" if command else "buildkit"
    err.print(
        f"{safe(who)}: {safe(what)}; nothing is half-written (each file is written whole or left as it was): "
        "run it again to finish",
        markup=True,
        emoji=False,
    )


def warn(text: str) -> None:
    """A one-line warning on stderr (e.g. lock.content_warning: the locked wheel is not content-addressed)."""
    err.print(f"[yellow]warning[/]: {safe(text)}")


def stage_note(text: str) -> None:
    """What a stage wants the user to know first (a context's on_note), one line on stderr."""
    err.print(f"[yellow]note[/]: {safe(text)}")


def note(text: str) -> None:
    """A one-line note on stderr (which pins file a command found above the working directory)."""
    err.print(f"buildkit: {safe(text)}")


def print_checks(checks) -> None:
    table = Table(show_header=True, title="preflight", title_justify="left")
    for column in ("check", "result", "detail", "what to do"):
        table.add_column(column, overflow="fold")
    marks = {True: "[green]ok[/]", False: "[red]FAIL[/]", None: "[yellow]n/a[/]"}
    for check in checks:
        table.add_row(safe(check.name), marks[check.ok], safe(check.detail), safe(check.fix))
    err.print(table)


def print_settings(settings, warning: str | None) -> None:
    """The settings a build takes, one line each on stderr, then the warning they call for (loud: said before
    anything long runs, dry run included)."""
    for setting in settings:
        err.print(safe(setting.line()))
    if warning:
        warn(warning)


def print_prepare(record, record_path, submodules_from: str = "--no-submodules") -> None:
    """submodules_from: the flag or variable that skipped the submodules (BUILDKIT_SUBMODULES=0), said as it is."""
    if record.fetched:
        for line in record.fetched:
            # A cache entry reset (a tampered or damaged cache) is said as it is; the rest are fetches.
            err.print(safe(line) if line.startswith("cache entry reset") else f"fetched {safe(line)}")
        err.print(f"  {record.fetched_bytes / 2**20:.1f} MiB of git objects")
    else:
        err.print(f"reused the cached tree at {safe(record.tree)} (nothing fetched)")
    if record.submodules is None:
        err.print(f"submodules skipped ({safe(submodules_from)})")
    else:
        err.print(f"{len(record.submodules)} submodule(s) at the commits the tree records")
    for patch in record.patches:
        targets = ", ".join(t.path for t in patch.targets)
        err.print(f"applied {safe(patch.file)} to {safe(targets)}: {safe(patch.reason)}")
    err.print(f"[green]prepared[/] {safe(record.tree)} in {record.seconds:.2f}s; record: {safe(str(record_path))}")


def print_drift(findings: list[str]) -> None:
    for finding in findings:
        err.print(f"[yellow]drift[/]: {safe(finding)}")


def print_transformations(transformations) -> None:
    """One line per transformation render applied to upstream's Dockerfile."""
    for t in transformations:
        err.print(f"transformed ({safe(t.name)}): {safe(t.summary)}")


class OnePlatform(Protocol):
    """One platform's paths (models/paths.Paths): what a per-platform run is headed with."""

    @property
    def platform(self) -> str | None: ...

    @property
    def build_dir(self) -> Path: ...


Each = TypeVar("Each", bound=OnePlatform)
Result = TypeVar("Result")


def per_platform(each: Sequence[Each], run: Callable[[Each], Result]) -> dict[str | None, Result]:
    """`run` for each platform's paths in turn, under its heading when there are several: results by platform."""
    results = {}
    for one in each:
        platform_heading(one.platform, one.build_dir, len(each))
        results[one.platform] = run(one)
    return results


def platform_heading(platform: str | None, where: object, count: int) -> None:
    """A rule naming the platform before its output, when a command runs for several (build.platforms)."""
    if count > 1 and platform:
        err.rule(safe(f"{platform} ({where})"), style="dim")


def write_json_by_platform(results: dict) -> None:
    """--json of a command run per platform: the one platform's document as it always was; several, keyed by
    platform."""
    import json
    import sys

    data = next(iter(results.values())) if len(results) == 1 else results
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
