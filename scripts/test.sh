#!/usr/bin/env bash
# The test command: install buildkit with its test extras into .venv, lint (ruff), type-check buildkit/, tests/, bench/ and
# scripts/docs.py (mypy: any error fails the command), build the docs strictly (mkdocs: a broken link or anchor fails the command), bring up the build engine (scripts/engine-up.sh: Docker, a loopback registry, BuildKit and buildx
# built from their Go modules), run the tests hermetically, and take the engine down again. Extra arguments go to
# pytest.
#
# Hermetic: pytest runs with fresh, empty HOME, XDG_CACHE_HOME, BUILDKIT_CACHE_DIR and TMPDIR, so nothing an
# earlier run (or this machine) left behind can make the suite pass. Only Docker's client configuration, where
# engine-up registered the builder, is kept (DOCKER_CONFIG).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'

fresh=$(mktemp -d "${TMPDIR:-/tmp}/buildkit-test.XXXXXX")
cleanup() {
  if [ -n "${engine_up:-}" ]; then bash scripts/engine-down.sh; fi
  rm -rf "$fresh"
}
trap cleanup EXIT

# The type checker first (configured in pyproject.toml's [tool.mypy]): one error fails the test command before the
# engine starts. Its cache starts empty too.
.venv/bin/mypy --cache-dir "$fresh/mypy-cache"

# The linter (configured in pyproject.toml's [tool.ruff]) and the docs (mkdocs.yml: strict, so a broken link or
# anchor, a page left out of the nav or a missing page fails here). The site goes outside the repository.
.venv/bin/ruff check --no-cache .
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$fresh/site"

if [ "$(id -u)" = 0 ]; then
  bash scripts/engine-up.sh
  engine_up=1
  export BUILDKIT_ENGINE=required
else
  echo "test: not root, so no build engine; the tests that need one are skipped here (CI runs them)" >&2
fi

# The report's build chart is checked with Mermaid's own parser, which runs in Node: tests/mermaid_check.py installs
# it with `npm ci` from the pinned lock in tests/mermaid/ into the artifacts cache below.
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

export DOCKER_CONFIG=${DOCKER_CONFIG:-$HOME/.docker}
# Real wheels from PyPI (vLLM, torch; several GB) are fetched once into a cache outside the repository and reused on
# this machine, each checked against PyPI's sha256 on every use (tests/realwheels.py); a fresh machine fetches them.
export BUILDKIT_TEST_ARTIFACTS=${BUILDKIT_TEST_ARTIFACTS:-${XDG_CACHE_HOME:-$HOME/.cache}/buildkit-test-artifacts}
mkdir -p "$fresh/home" "$fresh/cache" "$fresh/buildkit-cache" "$fresh/tmp"
HOME=$fresh/home XDG_CACHE_HOME=$fresh/cache BUILDKIT_CACHE_DIR=$fresh/buildkit-cache TMPDIR=$fresh/tmp \
  .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
