"""Unit tests of buildkit.gpu: the readers of wheels, ELF files and fat binaries, and the GPU checks."""
