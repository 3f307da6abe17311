"""Comparing texts in tests: which lines a change removed and added, and whether a rendered Dockerfile keeps every
upstream line that no named transformation says it touched."""

from __future__ import annotations

import difflib

import dockerfile


def fidelity(upstream: str, rendered: str, transformations: list[dict]) -> dict[str, set[str]]:
    """Line by line: every upstream line is in the rendered file, in order and unchanged, unless a named
    transformation says it touched it; and every line one says it touched did change. Returns the touched lines'
    upstream text by transformation."""
    theirs, ours = upstream.splitlines(), rendered.splitlines()
    touched = {n: t["name"] for t in transformations for n in t["upstream_lines"]}
    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(None, theirs, ours, autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            changed.update(range(i1 + 1, i2 + 1))
    untouched_but_changed = sorted(n for n in changed if n not in touched)
    assert not untouched_but_changed, [f"{n}: {theirs[n - 1]}" for n in untouched_but_changed]
    assert set(touched) <= changed, "a transformation lists a line it left as it was"
    # And by BuildKit's parser: every instruction no transformation touched is there with its exact lines.
    # (An instruction a transformation added lines inside, as apt_log_cleanup does in a RUN script, is checked
    # line by line above.)
    out = "\n".join(ours)
    inside = {n for t in transformations for n in t["inserted_after"]}
    for cmd in dockerfile.parse_string(upstream):
        lines = set(range(cmd.start_line, cmd.end_line + 1))
        if not lines & set(touched) and not inside & set(range(cmd.start_line, cmd.end_line)):
            assert "\n".join(theirs[cmd.start_line - 1 : cmd.end_line]) in out, cmd.original
    by_name: dict[str, set[str]] = {}
    for n, name in touched.items():
        by_name.setdefault(name, set()).add(theirs[n - 1].strip())
    return by_name


def changed_lines(old: str, new: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if line.startswith("-") and not line.startswith("---"):
            removed.append(line[1:])
        elif line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:])
    return removed, added
