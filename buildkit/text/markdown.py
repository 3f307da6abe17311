"""Text from outside (commit subjects, PR titles, URLs, build errors, results files) written into markdown safely.

The report template prints every value through `finalize`, which escapes it as one line of plain text: no
heading, table row, link, emphasis or HTML can come out of a value. The filters say how a value is shown where it
is meant to be code, a table cell, a fenced block, paragraphs or a link; their results are `Markdown` and printed
as they are.
"""

from __future__ import annotations

import re

from buildkit.text.sanitize import CONTROL_RE as _CONTROL_RE

_INLINE_RE = re.compile(r"([\\`*_\[\]<>|~])")
_LINE_START_RE = re.compile(r"^(\s*)([#>+=-]|\d+[.)])", re.MULTILINE)
_BACKTICKS_RE = re.compile(r"`+")
SAFE_URL_RE = re.compile(r"https://[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[A-Za-z0-9._~%/+-]*)?")


class Markdown(str):
    """Text already formatted for markdown: the template prints it as it is."""


def _one_line(value: object) -> str:
    return " ".join(_CONTROL_RE.sub(" ", str(value)).split())


def text(value: object) -> Markdown:
    """One line of plain text: markup characters escaped, line breaks and control characters become spaces."""
    return Markdown(_INLINE_RE.sub(r"\\\1", _one_line(value)))


def finalize(value: object) -> object:
    return value if isinstance(value, Markdown) else text(value)


def paragraphs(value: object) -> Markdown:
    """Lines of plain text: escaped like `text`, and no line may start a heading, quote or list."""
    lines = [_INLINE_RE.sub(r"\\\1", _CONTROL_RE.sub(" ", line)) for line in str(value).splitlines()]
    return Markdown(_LINE_START_RE.sub(r"\1\\\2", "\n".join(lines)))


def code(value: object) -> Markdown:
    """An inline code span whose delimiter is longer than any backtick run inside, so nothing breaks out."""
    body = _one_line(value)
    ticks = "`" * (max((len(run) for run in _BACKTICKS_RE.findall(body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return Markdown(f"{ticks}{pad}{body}{pad}{ticks}")


def cell(value: object) -> Markdown:
    return text(value)  # `|` is escaped already


def code_cell(value: object) -> Markdown:
    return Markdown(code(value).replace("|", "\\|"))


def fence(value: object, info: str = "", minimum: int = 3) -> Markdown:
    """A fenced block longer than any backtick run inside it, so the content cannot close it early."""
    body = _CONTROL_RE.sub(" ", str(value)).rstrip("\n")
    ticks = "`" * max(minimum, max((len(run) for run in _BACKTICKS_RE.findall(body)), default=0) + 1)
    return Markdown(f"{ticks}{info}\n{body}\n{ticks}")


def safe_url(url: str | None, hosts: set[str]) -> str | None:
    """The URL when it is https:// to one of `hosts` with plain path characters, else None (no link at all)."""
    if not url or not SAFE_URL_RE.fullmatch(url):
        return None
    host = url.removeprefix("https://").split("/", 1)[0].split(":", 1)[0].lower()
    return url if host in hosts else None


def link(url: object, label: object = None) -> Markdown:
    """A link to a URL already checked by `safe_url` (the facts hold None otherwise)."""
    if not isinstance(url, str) or not SAFE_URL_RE.fullmatch(url):
        return text(label if label is not None else url)
    return Markdown(f"[{text(label)}]({url})" if label is not None else f"<{url}>")


_SPAN_RE = re.compile(r"`([^`\n]+)`")


def spans(value: object, in_cell: bool = False) -> Markdown:
    """One line of buildkit's own wording whose `...` pairs are meant as code (an unpinned input, a transformation's
    summary): each pair a code span made by `code`, the rest escaped like `text`. Read rendered, `git clone` is code,
    never `\\`git clone\\``; a stray backtick from upstream is escaped with the text around it."""
    body, out, last = _one_line(value), [], 0
    span = code_cell if in_cell else code
    for found in _SPAN_RE.finditer(body):
        out += [_INLINE_RE.sub(r"\\\1", body[last : found.start()]), span(found[1])]
        last = found.end()
    return Markdown("".join([*out, _INLINE_RE.sub(r"\\\1", body[last:])]))
