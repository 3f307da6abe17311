"""Unit tests of buildkit.dockerfile: the Dockerfile's text and its transformations."""
