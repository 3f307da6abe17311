"""Dockerfile text: parsing (text.py), the declared transformations of upstream's Dockerfile (transforms.py), the
inputs a Dockerfile still leaves unpinned (unpinned.py), the project's patches to upstream files (patches.py) and
the stage-by-stage comparison bump shows (stagediff.py). May import world, models, text and the base; never
stages or the CLI."""
