"""Unit tests of buildkit's base: errors, files, budget, environment and options."""
