"""The data, as validated models: pins.yaml (pins.py, pinsedit.py for editing it in place), the lock (lock/), the
records each stage writes (records/, one module each), the grammars every outside value must match (grammar.py),
the guarded YAML loader (yamlload.py), the GPU check's facts (gpufacts.py), the base-image drift rule (drift.py),
vLLM's compiled inputs and what precompiled mode takes from the wheel (compiled.py), two images compared
(comparison.py), every check's result and its kind of "not checked" (checks.py, verdicts.py) and the options' fixed
choices (choices.py). Pure: no network, no processes. May import text and the base only."""
