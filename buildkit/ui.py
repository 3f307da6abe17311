"""Terminal output shared by the commands: rich consoles on stdout and stderr, and the one way errors look."""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape

from buildkit.errors import BuildkitError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


SECRET_ENV = ("GITHUB_TOKEN",)


def without_secrets(text: str) -> str:
    """The last guard: a secret from the environment never reaches the terminal, whatever an upstream echoed."""
    for name in SECRET_ENV:
        secret = os.environ.get(name, "")
        if len(secret) >= 8:  # tokens are long; a short value would blank out ordinary words
            text = text.replace(secret, f"${name}")
    return text


def print_error(error: BuildkitError) -> None:
    err.print(f"[bold red]error:[/] {escape(without_secrets(error.message))}", markup=True, emoji=False)
    if error.hint:
        err.print(f"  [dim]hint:[/] {escape(without_secrets(error.hint))}", markup=True, emoji=False)
