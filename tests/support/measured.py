"""A CLI run that also reports the child's wall time and peak memory (so "bounded" is measured, not assumed), and
the typed error resolve would fail with, for the hostile-server suite (tests/e2e/security/)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildkit.errors import BuildkitError
from tests.conftest import Cli, Result

# The child may not take more than this much address space: an unbounded read fails fast instead of
# swapping the machine (the assertion on peak memory below is much tighter).
ADDRESS_SPACE_CAP = 4 << 30

# The hang guard: a run still going after this long is killed and fails its test. Its scale is a hang (a read that
# waits for ever, an endless answer read to its end), never the machine's speed: a run of half a second has taken 8 s
# at nice 10 on 2 cores busy with other work. The cli fixture's default (tests/conftest.py), the same.
HANG_GUARD = 120.0


@dataclass
class Run(Result):
    seconds: float
    peak_mib: float

    def assert_refused(self, code: int, *needles: str, within: float | None = None, peak_mib: float = 250) -> None:
        """Exit `code`, a short message naming `needles`, no traceback, in bounded memory, and ended: measured()'s
        HANG_GUARD fails a run that never ends. `within`, where time is what the test is about: a bound against the
        failure's own scale (well under the length of the trickle the run would otherwise sit through), never
        against the machine's speed."""
        assert self.code == code, self.output[-3000:]
        assert "Traceback" not in self.output and "internal error" not in self.output, self.output[-3000:]
        assert self.stdout == ""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        assert 1 <= len(lines) <= 3 and len(self.stderr) < 800, self.stderr[:3000]
        for needle in needles:
            assert needle in self.stderr, self.stderr
        if within is not None:
            assert self.seconds < within, f"took {self.seconds:.1f}s"
        assert self.peak_mib < peak_mib, f"peak memory {self.peak_mib:.0f} MiB"


def measured(cli: Cli, *args: str, env: dict[str, str] | None = None, timeout: float = HANG_GUARD) -> Run:
    """`cli(*args)` as a child process; its own rusage comes from wait4 (not the sum over all children). A run past
    `timeout` is killed and fails the test."""

    # `python -m buildkit.cli`, with the cap set first (inside the child: preexec_fn is unsafe with threads running).
    # Its peak memory is its own mm's high-water mark (VmHWM), written at exit: wait4's ru_maxrss also holds the
    # pytest worker's, which the child inherits at exec (subprocess starts it with vfork), so a worker that had read
    # a large wheel made a 55 MiB run look like 371 MiB.
    hwm = tempfile.NamedTemporaryFile(prefix="hwm-", delete=False)
    hwm.close()
    launcher = (
        "import atexit, os, resource, runpy, sys; "
        f"resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE_CAP}, {ADDRESS_SPACE_CAP})); "
        "hwm = os.environ.pop('MEASURED_HWM_FILE'); "
        "atexit.register(lambda: open(hwm, 'w').write("
        "next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))); "
        "sys.argv[0] = 'buildkit'; runpy.run_module('buildkit.cli', run_name='__main__', alter_sys=True)"
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher, *args],
        cwd=cli.cwd,
        env={**cli.env, **(env or {}), "MEASURED_HWM_FILE": hwm.name},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out: dict[str, bytes] = {}
    readers = [
        threading.Thread(target=lambda name=name, pipe=pipe: out.__setitem__(name, pipe.read()))
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr))
    ]
    for reader in readers:
        reader.start()
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > timeout:
            proc.kill()
            os.wait4(proc.pid, 0)
            raise AssertionError(f"buildkit {' '.join(args)} did not finish within {timeout}s")
        time.sleep(0.01)
    seconds = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join()
    said = Path(hwm.name).read_text().strip()
    Path(hwm.name).unlink()
    return Run(
        code=proc.returncode,
        stdout=out["stdout"].decode(errors="replace"),
        stderr=out["stderr"].decode(errors="replace"),
        seconds=seconds,
        # KiB; a child that ended without its exit handlers (killed) has only wait4's figure, the worker's included
        peak_mib=(int(said) if said.isdigit() else usage.ru_maxrss) / 1024,
    )


def resolve_error(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> BuildkitError:
    """What `buildkit resolve` would fail with, resolved in this process (same code, same real servers, no
    interpreter start-up): for the long parametrized lists. Each kind also has a test through the CLI."""
    from buildkit.models.pins import load_pins
    from buildkit.stages.resolve import Resolver

    for name, value in cli.env.items():
        if name.startswith("BUILDKIT_") or name in ("NO_PROXY", "no_proxy", "GITHUB_TOKEN"):
            monkeypatch.setenv(name, value)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "GITHUB_TOKEN"):
        if name not in cli.env:
            monkeypatch.delenv(name, raising=False)
    with pytest.raises(BuildkitError) as info:
        Resolver(load_pins(cli.cwd / "pins.yaml"), cache_dir=cli.cwd / "cache").resolve()
    return info.value


def assert_error(error: BuildkitError, code: int, *needles: str) -> None:
    """The typed error a user would see: its exit code, a short message naming `needles`."""
    text = error.message + (f"\n  hint: {error.hint}" if error.hint else "")
    assert error.exit_code == code, text
    assert len(text) < 800, text[:3000]
    for needle in needles:
        assert needle in text, text
