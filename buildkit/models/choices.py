"""The options with a fixed set of values, as enums: typer shows and checks them (`[auto|tty|...]`, a wrong value
is a usage error, exit 2), and the options objects carry them typed. Only the standard library here: the CLI
imports this module on every start (bench/cold_start.py)."""

from enum import StrEnum


class ProgressMode(StrEnum):
    """How the build's progress is shown, as buildx names the modes ("live" is "tty")."""

    auto = "auto"
    tty = "tty"
    live = "live"
    plain = "plain"
    quiet = "quiet"
    rawjson = "rawjson"


class Compression(StrEnum):
    """The layer compression of a pushed image."""

    gzip = "gzip"
    zstd = "zstd"


class ReportFormat(StrEnum):
    markdown = "markdown"
    json = "json"
