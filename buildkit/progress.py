"""Follow a build from `docker buildx build --progress=rawjson`: one JSON SolveStatus per stderr line.

The format has no versioned schema, so parsing is defensive: unknown keys are ignored, a line that is not JSON is
kept as plain output (buildx prints warnings and the final error that way), and a vertex is merged from every
update that names its digest.
"""

from __future__ import annotations

import base64
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

LOG_TAIL = 8


@dataclass
class Step:
    digest: str
    name: str = ""
    started: str | None = None
    completed: str | None = None
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
                step.completed = vertex.get("completed")
            elif vertex.get("completed"):
                step.completed = vertex["completed"]
            step.cached = bool(vertex.get("cached")) or step.cached
            if vertex.get("error"):
                step.error = vertex["error"]
        for log in status.get("logs") or []:
            step = self.steps.get(log.get("vertex", ""))
            if step is None:
                continue
            try:
                data = base64.b64decode(log.get("data") or "").decode("utf-8", errors="replace")
            except (ValueError, TypeError):
                continue
            for chunk in data.splitlines():
                if chunk.strip():
                    step.logs.append(chunk)
                    step.log_count += 1

    @property
    def total(self) -> int:
        return len(self.steps)

    @property
    def cached(self) -> int:
        return sum(1 for s in self.steps.values() if s.cached)

    @property
    def done(self) -> int:
        return sum(1 for s in self.steps.values() if s.completed and not s.error)

    def running(self) -> list[Step]:
        return [s for s in self.steps.values() if s.running]

    def failed(self) -> list[Step]:
        return [s for s in self.steps.values() if s.error]
