"""What upstream answers must look like before any field is used: each resolver describes the fields it reads
as a pydantic model built from these types, and `parse` turns an answer of the wrong shape (a list for an
object, a number for a SHA, a missing key) into UpstreamMalformed (exit 3) with a short message.

Text that goes into the lock, the report or the terminal is one line without control characters (a commit
subject carrying terminal escapes is refused, not printed).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints, TypeAdapter, ValidationError

from buildkit.errors import UpstreamMalformed, excerpt

_LINE_RE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f-\x9f]{0,2000}")  # no C0 controls but tab, no DEL, no C1
# RFC 3339 as GitHub and git write it: 2026-02-05T18:32:11Z, 2026-02-05T18:32:11+00:00. Patterns run on pydantic's
# Rust regex engine, where `$` is the very end (no final-newline exception).
Timestamp = Annotated[
    str,
    StringConstraints(
        pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-9]{2})$"
    ),
]


def one_line(value: str) -> str:
    """Up to 2000 characters of one line, no control characters (ESC and CSI start terminal escapes)."""
    if not _LINE_RE.fullmatch(value):
        raise ValueError(f"expected one line of text without control characters, found {excerpt(value, 80)}")
    return value


Line = Annotated[str, AfterValidator(one_line)]


class Answer(BaseModel):
    """Base of the answer models: JSON types as they are (no '1' for 1), unknown fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


T = TypeVar("T")


def parse(shape: type[T], data: Any, what: str) -> T:
    """`data` (decoded JSON) as `shape`: an Answer model, or a type like list[Model]."""
    try:
        return TypeAdapter(shape).validate_python(data, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the answer"
        msg = err["msg"].removeprefix("Value error, ")
        found = "" if err["type"] == "missing" or "found" in msg else f", found {excerpt(err['input'], 80)}"
        raise UpstreamMalformed(f"{what} is malformed: {where}: {msg}{found}") from None
