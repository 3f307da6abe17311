"""The CLI's commands, one module each (one file per command): load inputs, run the stage (or what runs several,
runs/), present the result (rich text or --json). Top layer: may import everything below (runs, stages, options,
models, world, text, …); commands never import each other, and nothing imports them but buildkit/cli.py."""
