"""End-to-end test modules: the build engine, the CLI run as a child process, real PyPI wheels, or seconds of work.
tests/e2e/security/ holds the hostile-server suite (and the other security cases that run the CLI).

A module lives here when most of its tests are e2e (or engine) tests; a few unit tests kept beside them are still
marked `unit` (tests/conftest.py marks each test from its fixtures and its own `e2e` mark), so `pytest -m unit`
runs them with the fast loop wherever they live."""
