"""The pipeline's stages, one module (or package) each: resolve (pins -> lock), prepare (the NeMo-RL tree), render
(the Dockerfile), build (buildx), verify, attest (SLSA), export (squashfs), bump and report, with pipeline.py, the
registry that orders them and says which are current. Stages may import each other without circles, and every
layer below (image, dockerfile, gpu, world, models, text); never the CLI."""
