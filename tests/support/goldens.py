"""Golden outputs that hold nothing of the machine that recorded their inputs.

The report's fixtures (tests/fixtures/report/) are the lock and records of a real smoke build: they name loopback
ports the test servers happened to get, the recording machine's host name, and the versions of buildkit, buildx,
BuildKit and Docker it ran. The report prints them; the goldens hold placeholders instead, so recording the
fixtures again on another machine changes no golden line that is not about the build itself."""

from __future__ import annotations

import json
import re

from buildkit import __version__
from tests.support.paths import REPORT_FIXTURES

GOLDENS = sorted(REPORT_FIXTURES.glob("expected.*"))

# 127.0.0.1:41234 and localhost:41234; the report's Mermaid chart writes the colon as a space (127.0.0.1 5000/...).
LOOPBACK_PORT = re.compile(r"\b(127\.0\.0\.1|localhost)(?:(:)\d{1,5}\b|( )\d{1,5}(?=/))")


def recorded_machine() -> dict[str, str]:
    """What the build record says about the machine that recorded the fixtures, by the placeholder that stands for
    it in a golden."""
    record = json.loads((REPORT_FIXTURES / "build" / "smoke-record.json").read_text())
    return {
        "{buildx version}": record["buildx_version"],
        "{buildkitd version}": record["buildkit_daemon_version"],
        "{docker version}": record["docker_version"],
        "{buildkit version}": record["buildkit_version"],
        "{host}": record["host"],
    }


def machine_neutral(text: str) -> str:
    """`text` (the report, Markdown or JSON) with loopback ports and the recording machine's host name and tool
    versions replaced by placeholders. Each value is replaced only where the report puts it, so a short host name or
    version cannot change anything else."""
    text = LOOPBACK_PORT.sub(lambda m: f"{m[1]}{m[2] or m[3]}{{port}}", text)
    machine = recorded_machine()
    buildx, buildkitd, docker = machine["{buildx version}"], machine["{buildkitd version}"], machine["{docker version}"]
    version, host = machine["{buildkit version}"], machine["{host}"]
    for was, now in (
        (
            f"buildx {buildx}, BuildKit {buildkitd}, Docker {docker}",
            "buildx {buildx version}, BuildKit {buildkitd version}, Docker {docker version}",
        ),
        (f'"buildx_version": "{buildx}"', '"buildx_version": "{buildx version}"'),
        (f'"buildkit_daemon_version": "{buildkitd}"', '"buildkit_daemon_version": "{buildkitd version}"'),
        (f'"docker_version": "{docker}"', '"docker_version": "{docker version}"'),
        (f'"buildkit_version": "{version}"', '"buildkit_version": "{buildkit version}"'),
        # The report's own: the buildkit running the test, whose version moves with every commit.
        (f'"buildkit_version": "{__version__}"', '"buildkit_version": "{buildkit version}"'),
        (f'"built_by": "{version}"', '"built_by": "{buildkit version}"'),
        (f'"resolved_by": "{version}"', '"resolved_by": "{buildkit version}"'),
        (f"buildkit {version} from pins.lock", "buildkit {buildkit version} from pins.lock"),
        (f"by buildkit {version},", "by buildkit {buildkit version},"),
        (f" on {host} (", " on {host} ("),
        (f'"host": "{host}"', '"host": "{host}"'),
    ):
        text = text.replace(was, now)
    return text
