"""`buildkit build`'s options as its command line gives them when nothing is passed (the defaults cli.py declares),
with the changes a test makes: one place for the tests that need a BuildOptions."""

from __future__ import annotations

from buildkit.options import BuildOptions


def build_options(**changes: object) -> BuildOptions:
    given: dict[str, object] = dict(
        builder=None,
        push=False,
        sbom=False,
        cache_from=[],
        cache_to=[],
        progress="auto",
        dry_run=False,
        smoke=False,
        smoke_base="127.0.0.1:5000/buildkit/stand-in-base:1",
        min_free_gb=None,
        submodules=True,
        syntax=None,
        extra=[],
        compression=None,
    )
    return BuildOptions.parse(**{**given, **changes})  # type: ignore[arg-type]
