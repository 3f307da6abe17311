"""The pipeline's stages, one package each, as the registry (pipeline.py) names them: resolve (pins -> lock),
prepare (the NeMo-RL tree), render (the Dockerfile), build (buildx; preflight.py: the checks before it), verify
(provenance.py: a pushed image's statements), attest (slsa.py: the statement it signs), export (the squashfs) and
report; context.py is what each runs from, and pipeline.py the registry that orders them and says which are current.
Each takes its command's options from the context, as buildkit/options.py declares them (`ctx.given`). A stage may
import context.py, the options and every layer below (image, dockerfile, gpu, world, models, text), never another
stage (what two stages share lives below them, such as the records and the lock's derived facts in models/), nor
what runs them (runs/) or the CLI (cli.py, commands/); and it prints nothing: what it says goes through the context."""
