#!/usr/bin/env bash
# Build cosign from its Go module with the machine's Go (no internet but the Go module proxy), cache the binary in
# $BUILDKIT_ENGINE_DIR/bin (default /var/cache/buildkit-engine/bin) beside buildkitd and buildx, install it as
# /usr/local/bin/cosign, and print its version. Idempotent: a cached binary of the wanted version is reused.
# `buildkit attest` signs and attaches with it; the engine tests verify with it.
set -euo pipefail

COSIGN_VERSION=${COSIGN_VERSION:-v2.6.5}
ENGINE_DIR=${BUILDKIT_ENGINE_DIR:-/var/cache/buildkit-engine}
INSTALL_DIR=${COSIGN_INSTALL_DIR:-/usr/local/bin}
MODULE=github.com/sigstore/cosign/v2

say() { printf 'cosign: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v go >/dev/null || die "Go is needed to build cosign (it is on this kind of machine)"
[[ $COSIGN_VERSION =~ ^v2\.[0-9]+\.[0-9]+$ ]] || die "COSIGN_VERSION must be a v2 release tag (vX.Y.Z), not '$COSIGN_VERSION'"
mkdir -p "$ENGINE_DIR/bin"
bin=$ENGINE_DIR/bin/cosign

cached_version() { "$bin" version --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])' 2>/dev/null || true; }

if [ "$(cached_version)" != "$COSIGN_VERSION" ]; then
  say "building cosign $COSIGN_VERSION from the Go module (several minutes on 2 cores)"
  # cosign's go.mod has no replace or exclude directives, so `go install module@version` builds it as released.
  # The flags are those of its Makefile: static, trimmed paths, the version stamped into release-utils; and no debug
  # information made that -w drops anyway (16% less CPU: scripts/engine-up.sh).
  tmp=$(mktemp -d "$ENGINE_DIR/bin/.cosign-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  GOBIN=$tmp CGO_ENABLED=0 go install -trimpath -gcflags=all=-dwarf=false \
    -ldflags "-s -w -buildid= -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION -X sigs.k8s.io/release-utils/version.gitTreeState=clean" \
    "$MODULE/cmd/cosign@$COSIGN_VERSION"
  mv -f "$tmp/cosign" "$bin"
  [ "$(cached_version)" = "$COSIGN_VERSION" ] || die "the built binary does not say it is $COSIGN_VERSION"
fi
if ! cmp -s "$bin" "$INSTALL_DIR/cosign" 2>/dev/null; then
  install -m 0755 "$bin" "$INSTALL_DIR/.cosign.new" && mv -f "$INSTALL_DIR/.cosign.new" "$INSTALL_DIR/cosign"
fi
say "ready: $INSTALL_DIR/cosign $("$bin" version --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])')"
