"""Terminal output shared by the commands: rich consoles on stdout and stderr, and the one way errors look."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from buildkit.errors import BuildkitError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(error: BuildkitError) -> None:
    err.print(f"[bold red]error:[/] {escape(error.message)}", markup=True, emoji=False)
    if error.hint:
        err.print(f"  [dim]hint:[/] {escape(error.hint)}", markup=True, emoji=False)
