"""buildkit: build a reproducible NeMo-RL image with a custom vLLM, and prove how it was built.

The package is a stack of layers; a module imports from its own layer and the layers below it, never above
(tests/unit/suite/test_layers.py holds the rule). Top to bottom:

  buildkit/cli.py, buildkit/commands/  the CLI: parse options, call one stage, present the result
  buildkit/flags.py      the command line's options, each declared once, and their parsing into options.py's
  buildkit/runs/         what runs several stages for one command: bump, the reproducibility check
  buildkit/stages/       the pipeline's stages, one package each (resolve, prepare, render, build, verify, attest,
                         export, report), and the registry that orders them (stages/pipeline.py)
  buildkit/options.py    every command's and stage's options, parsed and checked before any work
  buildkit/image/        image files: OCI layouts, unpacking layers, comparing two images
  buildkit/dockerfile/   Dockerfile text: parsing, the declared transformations, unpinned inputs, patches
  buildkit/gpu/          ELF and CUDA fat binaries: kernels per GPU, dynamic symbols, driver tables
  buildkit/world/        the outside world: processes, HTTP, git, registries, credentials, the engine, cosign
  buildkit/models/       the data: pins, the lock (one model per version), the records, the build plan, grammars
  buildkit/text/         terminal and markdown text: sanitizing, escaping, progress, the timeline chart
  buildkit/errors.py, buildkit/files.py   errors with exit codes; bounded reads and atomic writes
  buildkit/environment.py   the environment variables buildkit reads, in one table
"""

# Stamped from git at install by setuptools-scm (pyproject.toml); a checkout run without installing has none.
try:
    from buildkit._version import __version__
except ImportError:
    __version__ = "0+unknown"
