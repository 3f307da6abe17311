"""Unit tests of buildkit.text: progress and the terminal's text."""
