"""Unit test modules, one folder per layer of buildkit they test (base, text, models, world, dockerfile, gpu, image,
stages; tests/unit/suite/ for the rules the project holds about itself: layers, structure, docs, the suite).

A module lives here when most of its tests are unit tests. The marks, not the folder, decide what `pytest -m unit`
runs: tests/conftest.py marks each test from the fixtures it uses (the engine, the CLI as a child process: e2e; the
engine or cosign: engine) or from its own `e2e` mark, so a CLI test kept beside the unit tests of the code it
exercises still runs with the e2e tests. tests/unit/suite/test_suite_rules.py holds that no module here has a
majority of e2e tests."""
