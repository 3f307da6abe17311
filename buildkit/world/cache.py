"""Where buildkit keeps what it fetches: git caches for resolve, prepared NeMo-RL trees for prepare."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    explicit = os.environ.get("BUILDKIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "buildkit"


def prepared_tree(cache_dir: Path, commit: str) -> Path:
    """The NeMo-RL tree prepare keeps for a commit (and the build uses as its named context)."""
    return cache_dir / "src" / f"nemo-rl-{commit[:12]}"
