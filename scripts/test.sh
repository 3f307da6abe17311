#!/usr/bin/env bash
# The test command: install buildkit with its test extras into .venv, bring up the build engine
# (scripts/engine-up.sh: Docker, a loopback registry, BuildKit and buildx built from their Go modules),
# run the tests, and take the engine down again. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'

if [ "$(id -u)" = 0 ]; then
  bash scripts/engine-up.sh
  trap 'bash scripts/engine-down.sh' EXIT
  export BUILDKIT_ENGINE=required
else
  echo "test: not root, so no build engine; the tests that need one are skipped here (CI runs them)" >&2
fi
.venv/bin/python -m pytest -q "$@"
