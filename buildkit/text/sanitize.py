"""Control characters out of text that came from outside (upstream answers, git and buildx output, records):
an ANSI or OSC escape sequence in a PR title must not clear a terminal or set its title, nor hide in a report.

And the secrets this process has read (registry passwords and tokens, see credentials.py): remembered here, so the
terminal's last guard (ui.without_secrets) can keep them out whatever an upstream echoed.
"""

from __future__ import annotations

import re
import threading

# C0 controls but tab and newline, DEL, and C1 controls (0x9b is CSI on its own); and the Unicode bidi controls,
# which reorder what a reader sees (CVE-2021-42574, "Trojan Source"): a subject could show one commit and be another.
CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Shorter values would blank out ordinary words; the guarantee that secrets stay out is that no message is built
# from them, and this is only the last guard.
MIN_SECRET_LENGTH = 8

_secrets: set[str] = set()
_lock = threading.Lock()


def strip_controls(text: object) -> str:
    return CONTROL_RE.sub("", str(text))


def remember_secret(value: str) -> None:
    if len(value) >= MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def without_remembered_secrets(text: str) -> str:
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)  # the longest first: one may contain another
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
