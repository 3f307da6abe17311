"""Unit tests of buildkit.image: layers, unpacking, image comparison, vLLM's package."""
