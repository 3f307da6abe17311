"""TOML from outside, held to the shape real files have before Python's parser reads it: tomllib is quadratic in
a key's dots (a 30 KB file of `a.a.a...` took 915 MB) and recursive in nesting (a deep one ends in RecursionError).
uv.lock and vLLM's pyproject.toml have keys of a few dots and shallow nesting, so a line may have at most MAX_DOTS
dots outside strings and nesting stays within MAX_DEPTH (multi-line strings are values, not lines)."""

from __future__ import annotations

import re

from buildkit.budget import Budget
from buildkit.errors import UpstreamMalformed

_STRING_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'')
_COMMENT_RE = re.compile(r"#.*")
_BRACKET_RE = re.compile(r"[\[\]{}]")
MAX_DOTS = 8
MAX_DEPTH = 16


def check_shape(text: str, what: str) -> None:
    """UpstreamMalformed (exit 3) unless `text` has the shape real TOML files have (see above)."""
    bare_text = _outside_multiline(text, what)  # a multi-line string is one value, whatever its lines hold
    depth = 0
    for number, line in enumerate(bare_text.splitlines(), 1):
        bare = _COMMENT_RE.sub("", _STRING_RE.sub('""', line))
        if bare.count(".") > MAX_DOTS:
            raise UpstreamMalformed(
                f"{what}: a line of more than {MAX_DOTS} dots outside strings (line {number}): "
                "not a TOML file buildkit parses"
            )
        for char in _BRACKET_RE.findall(bare):
            depth += 1 if char in "[{" else -1
            if depth > MAX_DEPTH:
                raise UpstreamMalformed(
                    f"{what}: arrays or tables nested more than {MAX_DEPTH} deep (line "
                    f"{number}): not a TOML file buildkit parses"
                )


def _outside_multiline(text: str, what: str) -> str:
    """The text with each multi-line string replaced by "" (split, not a regex: linear on any input)."""
    for quote in ('"""', "'''"):
        parts = text.split(quote)
        if len(parts) % 2 == 0:
            raise UpstreamMalformed(f"{what}: a multi-line string that does not end: not a TOML file buildkit parses")
        text = '""'.join(parts[::2])
    return text


_PACKAGE_RE = re.compile(r"^\[\[package\]\][ \t]*\r?\n", re.MULTILINE)


def package_tables(text: str, name: str, budget: Budget) -> list[str]:
    """uv.lock's preamble, then each `[[package]]` table that names `name`, each as its own TOML text, held to uv's
    own shape first (uv writes `name` first in a table). Python's TOML parser is quadratic in a key's dots and
    recursive in nesting (a 30 KB file of `a.a.a...` took 915 MB), so the rest of the file is never parsed, and a
    named table only once it has uv's shape."""
    named = re.compile(rf"\Aname = \"{re.escape(name)}\"\r?$", re.MULTILINE)
    preamble, *tables = _PACKAGE_RE.split(text)
    budget.keep(len(preamble))
    check_shape(preamble, budget.what)
    blocks: list[str] = [preamble]  # `version = 1`, `requires-python`: parsed, so a broken head is refused too
    for block in tables:
        budget.entry()
        budget.tick()
        if not named.search(block):
            continue
        budget.keep(len(block))
        check_shape(block, f"{budget.what}: {name}'s table")
        blocks.append("[[package]]\n" + block)
    return blocks
