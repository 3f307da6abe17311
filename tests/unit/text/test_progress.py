"""The rawjson parser, fed event streams recorded from the real engine (tests/fixtures/rawjson/*.jsonl:
`docker buildx build --progress=rawjson` against the BuildKit of scripts/engine-up.sh)."""

from __future__ import annotations

from buildkit.text.progress import Progress
from tests.support.paths import RAWJSON

STREAMS = RAWJSON


def replay(name: str) -> Progress:
    progress = Progress()
    for line in (STREAMS / f"{name}.jsonl").read_text().splitlines(keepends=True):
        progress.feed(line)
    return progress


def test_cold_build_steps_and_logs():
    progress = replay("cold")
    names = [s.name for s in progress.steps.values()]
    assert '[2/3] RUN echo "compiling step one" && sleep 1 && echo "step one finished"' in names
    assert progress.total == 8 and progress.cached == 0 and progress.done == 8
    assert progress.running() == [] and progress.failed() == []
    run = next(s for s in progress.steps.values() if s.name.startswith("[2/3]"))
    assert list(run.logs) == ["compiling step one", "step one finished"]


def test_cached_rebuild_counts_cached_steps():
    progress = replay("cached")
    cached = sorted(s.name for s in progress.steps.values() if s.cached)
    assert cached == [
        '[2/3] RUN echo "compiling step one" && sleep 1 && echo "step one finished"',
        "[3/3] RUN echo two > /two",
    ]
    assert progress.done == progress.total


def test_failed_build_names_the_step_its_error_and_the_plain_summary():
    progress = replay("failed")
    [failed] = progress.failed()
    assert failed.name == '[2/2] RUN echo "about to fail" && exit 3'
    assert failed.error is not None
    assert "exit code: 3" in failed.error
    assert list(failed.logs) == ["about to fail"]
    assert any(line.startswith("ERROR: failed to build") for line in progress.plain)


def test_garbage_and_unknown_keys_are_tolerated():
    progress = Progress()
    for line in [
        '{"vertexes": [{"digest": "d1", "name": "x", "started": "t"}]}\n',
        "not json at all\n",
        "{broken\n",
        '{"future_key": [1, 2], "vertexes": [{"name": "no digest"}]}\n',
        "[1, 2, 3]\n",
        '{"logs": [{"vertex": "d1", "data": "!!not base64!!"}]}\n',
    ]:
        progress.feed(line)
    assert progress.total == 1 and [s.name for s in progress.running()] == ["x"]
    assert progress.plain == ["not json at all", "{broken", "[1, 2, 3]"]
