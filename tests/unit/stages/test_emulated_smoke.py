"""Issue 41, point 5: a smoke build of a platform this machine runs only under QEMU goes ahead without --emulate
(its few steps take seconds emulated) and says once that it is emulated; a release build keeps the refusal.
Without the engine: the builder is `docker buildx inspect`'s text of this machine's engine."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from buildkit.commands.build import _Run
from buildkit.errors import EngineNotReady
from buildkit.options import BuildOptions
from buildkit.stages.build import preflight
from buildkit.stages.build.preflight import platform_checks
from buildkit.world.buildx import parse_inspect
from tests.support.options import build_options as support_build_options

# `docker buildx inspect buildkit-engine` on this machine's engine (as tests/unit/stages/test_platform_builds.py has
# it): an amd64 host, linux/arm64 after the host's own platforms, under QEMU through binfmt_misc.
INSPECT = """Name:          buildkit-engine
Driver:        remote
Last Activity: 2026-11-27 02:23:10 +0000 UTC

Nodes:
Name:             buildkit-engine0
Endpoint:         unix:///run/buildkit/buildkitd.sock
Status:           running
BuildKit version: v0.34.2
Platforms:        linux/amd64, linux/amd64/v2, linux/amd64/v3, linux/amd64/v4, linux/arm64, linux/386
"""


def build_options(smoke: bool, emulate: bool) -> BuildOptions:
    return support_build_options(progress="plain", smoke=smoke, submodules=False, emulate=emulate)


def test_a_smoke_build_may_run_emulated_a_release_build_may_not():
    builder = parse_inspect(INSPECT)  # amd64 host: arm64 under QEMU
    (smoke,) = platform_checks(builder, "linux/arm64", emulate=False, smoke=True)
    assert smoke.ok is True
    assert "emulated with QEMU on node buildkit-engine0" in smoke.detail and "need no --emulate" in smoke.detail
    (release,) = platform_checks(builder, "linux/arm64", emulate=False, smoke=False)
    assert release.ok is False and "runs only under emulation" in release.detail and "pass --emulate" in release.fix
    (asked,) = platform_checks(builder, "linux/arm64", emulate=True, smoke=False)
    assert asked.ok is True and "as --emulate allows" in asked.detail
    (native,) = platform_checks(builder, "linux/amd64", emulate=False, smoke=True)
    assert native.ok is True and "emulated" not in native.detail
    (said,) = platform_checks(builder, "linux/arm64")  # doctor: where it runs, and what each build needs
    assert said.ok is True and "a smoke build does not" in said.detail


def test_not_registered_is_refused_for_a_smoke_build_too():
    (missing,) = platform_checks(parse_inspect(INSPECT), "linux/s390x", emulate=False, smoke=True)
    assert missing.ok is False and "set up emulation (binfmt)" in missing.fix


class _Engine:
    """Docker as the preflight asks it: its version, and the image store (a remote builder: no disk check)."""

    def version(self) -> dict[str, str]:
        return {"Version": "29.0.0", "ApiVersion": "1.52"}

    def containerd_store(self) -> bool:
        return True


@pytest.fixture
def engine(monkeypatch):
    monkeypatch.setattr(preflight, "Engine", _Engine)
    monkeypatch.setattr(preflight.buildx, "version", lambda: "v0.38.2")
    monkeypatch.setattr(preflight.buildx, "inspect", lambda builder: parse_inspect(INSPECT))


def _preflight(smoke: bool, emulate: bool = False):
    opts = build_options(smoke=smoke, emulate=emulate)
    ctx = SimpleNamespace(lock=SimpleNamespace(build=SimpleNamespace(tag="nemo-rl:v0.5.0-spec-decode")))
    return _Run(None, opts, ctx)._preflight(None, "linux/amd64,linux/arm64")  # type: ignore[arg-type]


def test_build_smoke_goes_ahead_on_an_emulated_platform_and_says_so_once(engine, capsys):
    done = _preflight(smoke=True)
    assert done.builder.name == "buildkit-engine"
    err = capsys.readouterr().err
    assert err.count("emulated with QEMU") == 1 and "warning: linux/arm64 supported" in err
    assert "linux/amd64 supported" not in err  # the native one is not warned of


def test_a_release_build_keeps_the_refusal(engine, capsys):
    with pytest.raises(EngineNotReady) as refused:
        _preflight(smoke=False)
    assert "preflight: platform: linux/arm64 runs only under emulation" in refused.value.message
    assert refused.value.hint is not None and "pass --emulate" in refused.value.hint
    _preflight(smoke=False, emulate=True)  # asked for: allowed, and said
    assert "as --emulate allows" in capsys.readouterr().err
