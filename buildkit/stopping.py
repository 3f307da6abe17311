"""The process-wide stop: set by main's signal handlers (Ctrl-C, SIGTERM, SIGHUP) before they raise
KeyboardInterrupt in the main thread. A KeyboardInterrupt is lost where Python cannot raise it (a `__del__`, a
weakref or garbage-collector callback: "Exception ignored in ...") or where a broad handler takes it; this flag is
not: every Budget count in any thread raises Interrupted once it is set, and main ends the run with 130, never 0."""

from __future__ import annotations

import signal
import threading

STOPPED = threading.Event()


def stop_on_signals() -> None:
    """Ctrl-C, SIGTERM (a CI cancel, `timeout`) and SIGHUP (a closed terminal) end a run as Ctrl-C does: buildx is
    asked to cancel, the record says interrupted, temp files go; each sets STOPPED first. Called by main only."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)


def _stop(signum: int, frame: object) -> None:
    STOPPED.set()
    # The signal's name rides along for the log (Ctrl-C says itself).
    raise KeyboardInterrupt() if signum == signal.SIGINT else KeyboardInterrupt(signal.Signals(signum).name)
