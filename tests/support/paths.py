"""Where the repository and the tests' data folders are, computed once from this file's own location (so a module
that moves between tests/unit/, tests/e2e/ and tests/support/ does not count parents of its own `__file__`)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS = REPO_ROOT / "tests"
FIXTURES = TESTS / "fixtures"
REPORT_FIXTURES = FIXTURES / "report"  # recorded by tests/fixtures/report/record.py
GPU_FIXTURES = FIXTURES / "gpu"
RAWJSON = FIXTURES / "rawjson"  # buildx rawjson streams, recorded
MERMAID = TESTS / "mermaid"
