"""What runs the stages for a command, beyond one stage at a time: `buildkit bump` (bump.py: resolve, prepare and
render in staging, then one summary, bumpsummary.py) and `buildkit build --check-reproducible` (reproduce.py:
prepare again in a fresh cache, rebuild, compare). May import the stages (through the registry, stages/pipeline.py,
where it runs one) and every layer below; only the commands import it."""
