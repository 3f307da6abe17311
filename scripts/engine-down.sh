#!/usr/bin/env bash
# Take down what scripts/engine-up.sh started (only that: daemons it did not start are left alone).
# Built binaries and the registry's storage stay in the cache directory for the next bring-up.
# The qemu-aarch64 binfmt_misc entry stays registered: it is the kernel's, for every process on the machine (Docker
# and other builders use it too), and a BuildKit daemon never drops linux/arm64 from its platforms once it has seen
# it, so one started elsewhere would fail its arm64 builds with "exec format error". engine-up leaves it as it is.
set -uo pipefail

ENGINE_DIR=${BUILDKIT_ENGINE_DIR:-/var/cache/buildkit-engine}
RUN_DIR=/run/buildkit-engine

for builder in buildkit-engine buildkit-engine-b; do
  if docker buildx inspect "$builder" >/dev/null 2>&1; then
    docker buildx rm "$builder" >/dev/null 2>&1 || true
  fi
done
for name in buildkitd buildkitd-b registry dockerd; do
  pidfile="$RUN_DIR/$name.pid"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    printf 'engine: stopping %s (pid %s)\n' "$name" "$pid" >&2
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
done
printf 'engine: down (binaries and registry data kept in %s)\n' "$ENGINE_DIR" >&2
