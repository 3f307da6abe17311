"""Unit tests of the project itself: the layers of buildkit, its structure, its docs, and the rules the test
suite keeps."""
