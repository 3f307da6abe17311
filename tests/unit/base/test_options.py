"""Each command parses its options into one frozen, checked object before any work (commands/*.py `*Options.parse`):
the values typed (enums for choices), a wrong value refused there, with the option's name."""

from __future__ import annotations

import dataclasses

import pytest

from buildkit.errors import InputError, OptionError
from buildkit.models.choices import Compression, ProgressMode, ReportFormat
from buildkit.options import BuildOptions, ReportOptions, ResolveOptions
from tests.support.options import build_options as support_build_options


def build_options(**changes) -> BuildOptions:
    given = dict(cache_from=["type=local,src=/c"], smoke=True, extra=["--no-cache"])
    return support_build_options(**{**given, **changes})


def test_build_options_are_typed_frozen_and_derive_their_defaults():
    opts = build_options(progress="live", compression="zstd")
    assert opts.progress is ProgressMode.live and opts.view_mode == "tty" and opts.compression is Compression.zstd
    assert opts.cache_from == ("type=local,src=/c",) and opts.extra == ("--no-cache",)
    assert opts.min_free == 1.0 and opts.render.syntax is False  # a smoke build: 1 GB free, no `# syntax=` line
    assert opts.render.smoke and opts.render.refuse_drift and opts.prepare.submodules  # the stages' own options
    assert build_options(progress="").progress is ProgressMode.auto  # BUILDKIT_PROGRESS set but empty, as buildx
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.smoke = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "option"),
    [
        ({"progress": "fancy"}, "--progress/$BUILDKIT_PROGRESS"),
        ({"compression": "lz4"}, "--compression"),
        ({"rebuild_builder": "other"}, "--rebuild-builder"),
    ],
)
def test_build_options_refuse_a_wrong_value_naming_the_option(changes, option):
    with pytest.raises(OptionError) as refused:
        build_options(**changes)
    assert refused.value.param_hint == option


def test_a_builder_name_is_checked_with_the_options():
    with pytest.raises(InputError, match="--builder: expected a builder name"):
        build_options(builder="bad/name")


def test_resolve_and_report_options():
    assert ResolveOptions.parse(json_out=False, check=False, offline=False, deep=False, no_wheel_download=True) == (
        ResolveOptions("write", json_out=False, deep=False, download_wheel=False)
    )
    assert ResolveOptions.parse(json_out=True, check=True, offline=True, deep=False, no_wheel_download=False) == (
        ResolveOptions("offline", json_out=True, check=True)
    )
    with pytest.raises(OptionError, match="needs --check"):
        ResolveOptions.parse(json_out=False, check=False, offline=False, deep=True, no_wheel_download=False)
    assert ReportOptions.parse(record=None, output=None, fmt="json", results=None).format is ReportFormat.json
    with pytest.raises(InputError, match="--format: expected markdown or json"):
        ReportOptions.parse(record=None, output=None, fmt="html", results=None)


HUGE = "x" * 5000 + "\x1b]0;owned\x07\n"  # a value of any length, with a terminal escape and a newline


@pytest.mark.parametrize(
    ("args", "env", "option"),
    [
        (["build", "--dry-run", "--progress", HUGE], {}, "'--progress'"),
        (["build", "--dry-run"], {"BUILDKIT_PROGRESS": HUGE}, "BUILDKIT_PROGRESS"),
        (["build", "--dry-run", "--compression", HUGE], {}, "'--compression'"),
        (["report", "--format", HUGE], {}, "'--format'"),
        (["verify", "--driver", HUGE], {}, "--driver"),
    ],
)
def test_a_wrong_option_value_is_quoted_short_and_escaped(cli, args, env, option):
    """typer echoes a wrong choice whole; buildkit quotes it in about 60 characters, escaped (issue 29)."""
    refused = cli(*args, env=env)
    assert refused.code == 2 and option in refused.stderr, refused.stderr[-2000:]
    assert "\x1b" not in refused.stderr and "\x07" not in refused.stderr
    assert len(refused.stderr) < 600, refused.stderr
    assert "'xxxxxxxxxx" in refused.stderr and "\\x07" in refused.stderr  # the ends shown, escaped
