#!/usr/bin/env bash
# The test command: install buildkit with its test extras into .venv; bring up the build engine in the background
# (scripts/engine-up.sh: Docker, a loopback registry, BuildKit, buildx and cosign built from their Go modules);
# meanwhile type-check buildkit/, tests/, bench/ and scripts/docs.py (mypy: any error fails the command), lint and
# check the formatting (ruff), build the docs strictly (mkdocs: a broken link or anchor fails the command) and run
# every test that does not need the engine, $BUILDKIT_TEST_WORKERS (4) at a time, and beside them, once the engine
# is up, the engine's tests; print one count for the whole suite, and take the engine down again. Extra arguments
# go to pytest (both runs).
#
# Hermetic: pytest runs with fresh, empty HOME, XDG_CACHE_HOME, BUILDKIT_CACHE_DIR and TMPDIR, so nothing an
# earlier run (or this machine) left behind can make the suite pass. Only Docker's client configuration, where
# engine-up registered the builder, is kept (DOCKER_CONFIG).
set -euo pipefail
cd "$(dirname "$0")/.."

fresh=$(mktemp -d "${TMPDIR:-/tmp}/buildkit-test.XXXXXX")
cleanup() {
  # A test run still going (the command stopped early) is stopped, and an engine still coming up: its whole
  # process group.
  if [ -n "${without_engine_pid:-}" ] && kill -0 "$without_engine_pid" 2>/dev/null; then
    kill -- "-$without_engine_pid" 2>/dev/null || true
    wait "$without_engine_pid" 2>/dev/null || true
  fi
  if [ -n "${engine_pid:-}" ] && kill -0 "$engine_pid" 2>/dev/null; then kill -- "-$engine_pid" 2>/dev/null || true; fi
  if [ -n "${engine_up:-}" ]; then bash scripts/engine-down.sh; fi
  rm -rf "$fresh"
}
trap cleanup EXIT

# The build engine comes up first, in the background: on a fresh machine it is the longest road (BuildKit, buildx
# and cosign built from their Go modules, about 4 minutes of both cores, Debian's packages beside them). Everything
# that does not need it runs meanwhile: the install, the type checker, the linter, the docs and every test not marked
# `engine` (tests/conftest.py). The engine's tests run beside them once it is up (below).
if [ "$(id -u)" = 0 ]; then
  engine_up=1
  # A process group of its own, for cleanup to stop it whole; not a session of its own: Linux schedules each
  # session as one group (autogroup), where the tests' nice 10 (below) would not leave the Go builds the cores.
  set -m
  bash scripts/engine-up.sh </dev/null >"$fresh/engine-up.log" 2>&1 &
  engine_pid=$!
  set +m
  export BUILDKIT_ENGINE=required
else
  echo "test: not root, so no build engine; the tests that need one are skipped here (CI runs them)" >&2
fi

python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'

# The report's build chart is checked with Mermaid's own parser, which runs in Node: tests/support/mermaid_check.py
# installs it with `npm ci` from the pinned lock in tests/mermaid/ into the artifacts cache below. apt runs one at a
# time (the lock file engine-up.sh takes too).
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  flock /run/lock/buildkit-apt.lock apt-get update -qq
  DEBIAN_FRONTEND=noninteractive flock /run/lock/buildkit-apt.lock \
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

# The type checker (configured in pyproject.toml's [tool.mypy]; any error fails the test command), its cache empty.
.venv/bin/mypy --cache-dir "$fresh/mypy-cache"

# The linter and the formatter (pyproject.toml's [tool.ruff]: a file `ruff format` would change fails) and the
# docs (mkdocs.yml: strict, so a broken link or anchor, a page left out of the nav or a missing page fails here).
# The site goes outside the repository.
.venv/bin/ruff check --no-cache .
.venv/bin/ruff format --check --no-cache .
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$fresh/site"

# Python's bytecode cache, empty at the start of each run and kept outside the checkout. Where the environment sets
# PYTHONDONTWRITEBYTECODE (this kind of machine does), every CLI child process the tests start would compile
# buildkit's modules again: about 0.1 s of CPU each, over a thousand times.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=$fresh/pycache
export DOCKER_CONFIG=${DOCKER_CONFIG:-$HOME/.docker}
# Real wheels from PyPI (vLLM, torch; several GB) are fetched once into a cache outside the repository and reused on
# this machine, each checked against PyPI's sha256 on every use (tests/support/realwheels.py); a fresh machine fetches
# them.
export BUILDKIT_TEST_ARTIFACTS=${BUILDKIT_TEST_ARTIFACTS:-${XDG_CACHE_HOME:-$HOME/.cache}/buildkit-test-artifacts}
tests() { # name marker-expression pytest-arguments...: one run of the suite, its results in $fresh/<name>.xml
  local name=$1 marks=$2
  shift 2
  local own=$fresh/$name # each run its own empty HOME, caches and TMPDIR: the two runs overlap
  mkdir -p "$own/home" "$own/cache" "$own/buildkit-cache" "$own/tmp"
  HOME=$own/home XDG_CACHE_HOME=$own/cache BUILDKIT_CACHE_DIR=$own/buildkit-cache TMPDIR=$own/tmp \
    nice -n "${NICENESS:-0}" .venv/bin/python -m pytest -q -p no:cacheprovider -m "$marks" --junitxml="$fresh/$name.xml" "$@"
}
ok() { [ "$1" = 0 ] || [ "$1" = 5 ]; } # pytest's 5: no test selected (an argument that picks one kind only)

# The tests without the engine run in parallel (pytest-xdist): alone, one pytest keeps 0.7 of a core busy (it waits
# on git, the CLI's child processes and loopback servers), so more workers than cores pay (bench/test_command.py).
# They run in the background, printing as they go. The engine's tests start beside them as soon as the engine is up
# (mostly waiting on BuildKit, the registry and QEMU, they use half a core), one at a time: they share two BuildKit
# daemons, a registry and their caches. Their output is printed when both runs are done.
# They run at a lower priority (nice 10): on a fresh machine the engine's Go builds come first, since the engine's
# tests wait on them, and these tests take whatever the builds leave idle (on a warm machine, what the engine's
# tests leave idle).
WORKERS=${BUILDKIT_TEST_WORKERS:-4}
set -m # the run gets a process group of its own, for cleanup to stop it whole (pytest, its workers, their children)
NICENESS=10 tests without-engine "not engine" -n "$WORKERS" --dist worksteal "$@" &
without_engine_pid=$!
set +m
second=0
if [ -n "${engine_pid:-}" ]; then
  if ! wait "$engine_pid"; then
    cat "$fresh/engine-up.log" >&2
    echo "test: the build engine did not come up (its log is above)" >&2
    exit 1
  fi
fi
tests engine "engine" -p no:xdist "$@" >"$fresh/engine-tests.log" 2>&1 || second=$?
first=0
wait "$without_engine_pid" || first=$?
if [ -n "${engine_pid:-}" ]; then tail -n 1 "$fresh/engine-up.log" >&2; fi
echo "test: the engine's tests, run beside the others:"
cat "$fresh/engine-tests.log"

# One count for the whole suite, so that a test that stopped running shows.
.venv/bin/python - "$fresh/without-engine.xml" "$fresh/engine.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        continue
    for suite in root.iter("testsuite"):
        for key in totals:
            totals[key] += int(suite.get(key, 0))
ran = totals["tests"] - totals["skipped"]
print(f"test: {ran} tests ran ({totals['failures']} failed, {totals['errors']} errors, {totals['skipped']} skipped) "
      f"of {totals['tests']}")
PY
if ok "$first" && ok "$second"; then exit 0; fi
exit 1
