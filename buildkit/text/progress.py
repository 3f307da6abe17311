"""Follow a build from `docker buildx build --progress=rawjson`: one JSON SolveStatus per stderr line.

The format has no versioned schema, so parsing is defensive: unknown keys are ignored, a line that is not JSON is
kept as plain output (buildx prints warnings and the final error that way), and a vertex is merged from every
update that names its digest.
"""

from __future__ import annotations

import base64
import json
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

LOG_TAIL = 20  # enough of a failed step's own output to show why it failed
# A Dockerfile instruction's vertex: "[stage 2/4] RUN ...", or "[2/4] RUN ..." in a file without stage names.
_INSTRUCTION_RE = re.compile(r"\[(?:[^\]]* )?\d+/\d+\] (?P<keyword>[A-Z]+)\b.*", re.DOTALL)
# BuildKit's vertices for registry cache import and export; their errors do not fail a build.
_CACHE_VERTEX_RE = re.compile(r"(?:importing cache manifest from |exporting cache to ).*", re.DOTALL)


@dataclass
class Step:
    digest: str
    name: str = ""
    started: str | None = None
    completed: str | None = None
    first_started: str | None = None  # a vertex BuildKit restarts keeps its first start (the timeline's bar)
    cached: bool = False
    error: str | None = None
    logs: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL))
    log_count: int = 0  # every line ever logged, so a viewer can tell which of `logs` are new

    @property
    def running(self) -> bool:
        return self.started is not None and self.completed is None


@dataclass
class Progress:
    steps: dict[str, Step] = field(default_factory=dict)
    plain: list[str] = field(default_factory=list)  # non-JSON lines: warnings, the final error

    def feed(self, line: str) -> None:
        text = line.rstrip("\n")
        if not text.startswith("{"):
            if text.strip():
                self.plain.append(text)
            return
        try:
            status = json.loads(text)
        except ValueError:
            self.plain.append(text)
            return
        if isinstance(status, dict):
            self._apply(status)

    def _apply(self, status: dict[str, Any]) -> None:
        for vertex in status.get("vertexes") or []:
            digest = vertex.get("digest")
            if not isinstance(digest, str):
                continue
            step = self.steps.setdefault(digest, Step(digest))
            step.name = vertex.get("name") or step.name
            # Updates can repeat a vertex without `completed` after it completed (a restart): take the latest.
            if vertex.get("started"):
                step.started = vertex["started"]
                step.first_started = step.first_started or step.started
                step.completed = vertex.get("completed")
            elif vertex.get("completed"):
                step.completed = vertex["completed"]
            step.cached = bool(vertex.get("cached")) or step.cached
            if vertex.get("error"):
                step.error = vertex["error"]
        for log in status.get("logs") or []:
            logged = self.steps.get(log.get("vertex", ""))
            if logged is None:
                continue
            try:
                data = base64.b64decode(log.get("data") or "").decode("utf-8", errors="replace")
            except (ValueError, TypeError):
                continue
            for chunk in data.splitlines():
                if chunk.strip():
                    logged.logs.append(chunk)
                    logged.log_count += 1

    @property
    def total(self) -> int:
        return len(self.steps)

    @property
    def cached(self) -> int:
        return sum(1 for s in self.steps.values() if s.cached)

    @property
    def done(self) -> int:
        return sum(1 for s in self.steps.values() if s.completed and not s.error)

    def instructions(self) -> dict[str, bool]:
        """Each Dockerfile instruction that ran (by its vertex name) and whether it came from the cache. A FROM
        is left out: it names an image by digest, which BuildKit pulls or finds, but never marks as cached. One
        instruction can show as several vertices (an `ADD <url>` fetches, then copies): cached if one of them is."""
        found: dict[str, bool] = {}
        for step in self.steps.values():
            m = _INSTRUCTION_RE.fullmatch(step.name)
            if m and m.group("keyword") != "FROM":
                found[step.name] = found.get(step.name, False) or step.cached
        return found

    def cache_problems(self) -> list[str]:
        """The registry cache imports and exports that failed (the build went on without them)."""
        return [f"{s.name}: {s.error}" for s in self.steps.values() if s.error and _CACHE_VERTEX_RE.fullmatch(s.name)]

    def running(self) -> list[Step]:
        return [s for s in self.steps.values() if s.running]

    def failed(self) -> list[Step]:
        """The steps that failed the build (not a cache import or export, which only slows it)."""
        return [s for s in self.steps.values() if s.error and not _CACHE_VERTEX_RE.fullmatch(s.name)]

    def cause(self) -> Step | None:
        """The step whose failure stopped the build. When one step fails, BuildKit cancels the steps running beside
        it, and they report `context canceled` too: the cause is the failed step that was not cancelled, a
        Dockerfile instruction before an internal step, the first to fail before a later one."""
        failed = self.failed()
        if not failed:
            return None

        def rank(step: Step) -> tuple[bool, bool, str]:
            cancelled = "context canceled" in (step.error or "") or (step.error or "").strip() == "canceled"
            return cancelled, not _INSTRUCTION_RE.fullmatch(step.name), step.completed or "~"

        return min(failed, key=rank)
