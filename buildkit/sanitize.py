"""Control characters out of text that came from outside (upstream answers, git and buildx output, records):
an ANSI or OSC escape sequence in a PR title must not clear a terminal or set its title, nor hide in a report."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and C1 controls (0x9b is CSI on its own).
CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_controls(text: object) -> str:
    return CONTROL_RE.sub("", str(text))
