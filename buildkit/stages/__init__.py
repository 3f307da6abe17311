"""The pipeline's stages, one module (or package) each: resolve (pins -> lock), prepare (the NeMo-RL tree), render
(the Dockerfile), build (buildx), verify, attest (SLSA), export (squashfs), bump and report, with pipeline.py, the
registry that orders them and says which are current; each runs from a context (context.py) and declares its
command's options beside its `run` (their `parse` raises OptionError for a wrong value, which the CLI shows as
typer's usage error, exit 2). Stages may
import each other without circles, and every layer below (image, dockerfile, gpu, world, models, text); never the
CLI (cli.py, commands/), and they print nothing: what they say goes through the context."""
