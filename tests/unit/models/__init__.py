"""Unit tests of buildkit.models: pins, the lock, grammars, records."""
