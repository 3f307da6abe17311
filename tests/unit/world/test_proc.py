"""The one process runner (buildkit/world/proc.py), with real child processes: argv only, bounded output, a deadline,
secrets never in its messages; and the rule that nothing else in buildkit/ calls subprocess."""

from __future__ import annotations

import ast
import os
import signal
import sys
import threading
import time

import pytest

from buildkit.world import proc
from tests.support.paths import REPO_ROOT

PY = sys.executable
# How long the children below sleep: the failure's scale where a test bounds time. A runner that waited for such a
# child instead of killing it (at its deadline, on Ctrl-C, when the callback fails) would take all of it; a bound of
# half of it holds on a machine however busy.
SLEEPS = 60
STARTERS = ("system", "popen", "posix_spawn", "posix_spawnp")  # and exec*, spawn*


def test_no_subprocess_outside_the_runner():
    """Every program buildkit runs goes through world/proc.py: no other module imports subprocess, calls it, or
    starts a program through os (system, popen, exec*, spawn*)."""
    found = []
    for path in sorted((REPO_ROOT / "buildkit").rglob("*.py")):
        if path == REPO_ROOT / "buildkit" / "world" / "proc.py":
            continue
        where = path.relative_to(REPO_ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "subprocess" for a in node.names):
                found.append(f"{where}:{node.lineno} import subprocess")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "subprocess":
                found.append(f"{where}:{node.lineno} from subprocess import")
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                starts = node.value.id == "os" and (node.attr in STARTERS or node.attr.startswith(("exec", "spawn")))
                if node.value.id == "subprocess" or starts:
                    found.append(f"{where}:{node.lineno} {node.value.id}.{node.attr}")
    assert not found, f"run programs through buildkit.world.proc: {found}"


def test_argv_only():
    """A string is refused, whatever it holds: it would be a shell line or one program name with spaces."""
    for bad in ("echo hi", b"echo", [], ["echo", 1]):
        with pytest.raises(TypeError, match="never a shell line"):
            proc.run(bad, timeout=5, stdout_limit=10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        proc.stream("echo hi", lambda line: None)  # a str is a Sequence[str] to mypy: only proc refuses it
    # Shell syntax in an argument is just bytes to the program, never interpreted.
    done = proc.run(
        [PY, "-c", "import sys; print(sys.argv[1])", "$(touch /tmp/x); `id` | cat"], timeout=30, stdout_limit=1000
    )
    assert done.returncode == 0 and done.stdout == b"$(touch /tmp/x); `id` | cat\n"


def test_stdin_stdout_stderr_and_exit_status():
    done = proc.run(
        [PY, "-c", "import sys; d = sys.stdin.read(); print(d.upper()); print('oops', file=sys.stderr); sys.exit(3)"],
        stdin=b"abc",
        timeout=30,
        stdout_limit=1000,
    )
    assert (done.returncode, done.stdout, done.stderr, done.over) == (3, b"ABC\n", b"oops\n", False)
    assert done.said() == "oops"


def test_stdout_is_cut_at_its_limit_and_the_child_killed():
    # No clock needed: `yes` never ends, so a run that did not cut and kill it would end only at its 30 s deadline,
    # as TimedOut; a result, over the limit and killed, is the proof.
    done = proc.run(["yes", "credential"], timeout=30, stdout_limit=64 << 10)
    assert done.over and len(done.stdout) == 64 << 10 and done.returncode == -signal.SIGKILL


def test_stderr_keeps_its_tail():
    """A failure's words come last: 10 MB of noise on stderr, then the error; the last bytes are kept, the noise is
    not held."""
    script = "import sys; sys.stderr.write('noise ' * 2_000_000); sys.stderr.write('\\nfatal: the real reason\\n')"
    done = proc.run([PY, "-c", script], timeout=60, stdout_limit=10, stderr_limit=4096)
    assert len(done.stderr) == 4096 and done.stderr.endswith(b"fatal: the real reason\n") and not done.over
    assert done.said() == "fatal: the real reason"


def test_the_deadline_kills_the_child():
    started = time.monotonic()
    with pytest.raises(proc.TimedOut) as caught:
        proc.run([PY, "-c", f"import time; time.sleep({SLEEPS})"], timeout=0.5, stdout_limit=10)
    assert time.monotonic() - started < SLEEPS / 2  # the child, had it been waited for: SLEEPS
    assert caught.value.timeout == 0.5
    assert "did not finish within 0.5s" in caught.value.message


def test_a_streamed_run_has_a_deadline_too():
    started = time.monotonic()
    with pytest.raises(proc.TimedOut):
        proc.stream(
            [PY, "-c", f"import time; print('a', flush=True); time.sleep({SLEEPS})"],
            lambda line: None,
            timeout=0.5,
            new_session=True,
        )
    assert time.monotonic() - started < SLEEPS / 2  # the child, had it been waited for: SLEEPS


def test_a_program_that_cannot_start_is_not_started(tmp_path):
    with pytest.raises(proc.NotStarted) as caught:
        proc.run([str(tmp_path / "no-such-program")], timeout=5, stdout_limit=10)
    assert isinstance(caught.value.error, FileNotFoundError) and isinstance(caught.value, proc.ProcError)
    assert caught.value.message.startswith(f"cannot run {tmp_path / 'no-such-program'}: ")


def test_secrets_never_in_its_messages(tmp_path):
    secret = "glpat-S3cretValue-0123456789"
    script = tmp_path / f"{secret}.py"  # a secret in the argv the message names
    script.write_text("import time; time.sleep(60)\n")
    with pytest.raises(proc.TimedOut) as caught:
        proc.run([PY, str(script)], timeout=0.2, stdout_limit=10, secrets=[secret])
    with pytest.raises(proc.NotStarted) as missing:
        proc.run([str(tmp_path / secret)], timeout=5, stdout_limit=10, secrets=[secret])
    done = proc.run(
        [PY, "-c", f"import sys; sys.exit('denied for token {secret}')"], timeout=30, stdout_limit=10, secrets=[secret]
    )
    for message in (str(caught.value), str(missing.value), done.said()):
        assert secret not in message and proc.REDACTED in message, message
    assert proc.redact("a-b a", ["a", "a-b"]) == "<redacted> <redacted>"  # the longer secret first
    assert proc.redact("nothing", ["", "x"]) == "nothing"


def test_stream_hands_over_lines_bounded_and_keeps_the_tail():
    lines: list[str] = []
    script = "print('first'); print('x' * 100000); print('last', end='')"
    done = proc.stream([PY, "-c", script], lines.append, line_limit=1000, tail_limit=50)
    assert done.returncode == 0
    assert lines == ["first\n", "x" * 1000 + "\n", "last"]  # the long line cut at its limit, the rest dropped
    assert len(done.tail) == 50 and done.tail.endswith(b"xxxx\nlast")


def test_stream_merges_stderr():
    lines: list[str] = []
    proc.stream([PY, "-c", "import sys; print('out', flush=True); print('err', file=sys.stderr)"], lines.append)
    assert lines == ["out\n", "err\n"]


def test_ctrl_c_during_a_stream_asks_the_child_to_stop_first(tmp_path):
    """In its own session the child gets SIGINT (as buildx does, to cancel a build cleanly); its exit status is
    reported with the reason Ctrl-C carried."""
    marker = tmp_path / "stopped"
    script = (
        "import signal, sys, time\n"
        f"def stop(*_): open({str(marker)!r}, 'w').write('asked'); sys.exit(7)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )

    def on_line(line: str) -> None:
        raise KeyboardInterrupt("SIGTERM")  # what the CLI turns a SIGTERM into

    with pytest.raises(proc.Interrupted) as caught:
        proc.stream([PY, "-c", script], on_line, new_session=True)
    assert (caught.value.reason, caught.value.returncode) == ("SIGTERM", 7)
    assert isinstance(caught.value, KeyboardInterrupt) and marker.read_text() == "asked"


def test_ctrl_c_from_elsewhere_reaches_the_streamed_run():
    """A real SIGINT to this process while it waits on the child's output."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    with pytest.raises(proc.Interrupted) as caught:
        proc.stream([PY, "-c", f"import time; time.sleep({SLEEPS})"], lambda line: None, new_session=True)
    assert caught.value.reason == "Ctrl-C" and caught.value.returncode != 0
    assert time.monotonic() - started < SLEEPS / 2  # the child, had it been waited for: SLEEPS


def test_an_error_in_the_callback_kills_the_child():
    started = time.monotonic()

    def on_line(line: str) -> None:
        raise ValueError("no")

    with pytest.raises(ValueError):
        proc.stream([PY, "-c", f"import time; print('a', flush=True); time.sleep({SLEEPS})"], on_line)
    assert time.monotonic() - started < SLEEPS / 2  # the child, had it been waited for: SLEEPS
