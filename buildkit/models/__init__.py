"""The data, as validated models: pins.yaml (pins.py, pinsedit.py for editing it in place), the lock (lock/), the
records each stage writes (records/, one module each), the grammars every outside value must match (grammar.py),
the guarded YAML loader (yamlload.py), the GPU check's facts (gpufacts.py), the base-image drift rule (drift.py),
vLLM's compiled inputs (compiled.py), two images compared (comparison.py) and the options' fixed choices
(choices.py). Pure: no network, no processes. May import text and the base only."""
