"""buildkit: build a reproducible NeMo-RL image with a custom vLLM, and prove how it was built."""

__version__ = "0.1.0"
