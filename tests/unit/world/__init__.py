"""Unit tests of buildkit.world: processes, HTTP, registries, git."""
