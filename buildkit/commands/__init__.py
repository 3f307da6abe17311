"""The CLI's commands, one module each: load inputs, call one stage, present the result (rich text or --json).
Top layer: may import everything below (stages, models, world, text, …); commands never import each other, and
nothing imports them but buildkit/cli.py."""
