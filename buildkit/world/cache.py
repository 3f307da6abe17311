"""Where buildkit keeps what it fetches: git caches for resolve, prepared NeMo-RL trees for prepare. The paths are
named in buildkit.models.paths, with every other path."""

from __future__ import annotations

from buildkit.models.paths import default_cache_dir, prepared_tree

__all__ = ["default_cache_dir", "prepared_tree"]
