"""Unit tests of buildkit.stages: resolve, verify, export and the pipeline, without the engine."""
