#!/usr/bin/env bash
# Bring up, on this machine and with no internet, the build engine the tests and the smoke build use:
#   - Docker from Debian's docker.io (for --load and inspection), started with --bridge=none --iptables=false;
#   - a registry from Debian's docker-registry on 127.0.0.1:5000, holding a stand-in base image;
#   - a standalone BuildKit daemon and the buildx plugin, built from their Go modules with the machine's Go;
#   - cosign, built from its Go module (scripts/cosign-build.sh);
#   - a buildx builder "buildkit-engine" with the remote driver, pointing at that daemon;
#   - a second BuildKit daemon with its own state and a builder "buildkit-engine-b" for it: the "other machine" of
#     the shared-cache and rebuild-on-another-builder tests (`docker buildx prune --builder buildkit-engine-b -af`
#     empties it).
# Idempotent: what is already up is left as it is. Needs root. `scripts/engine-down.sh` takes it all down.
set -euo pipefail

BUILDKIT_VERSION=${BUILDKIT_VERSION:-v0.34.2}
BUILDX_VERSION=${BUILDX_VERSION:-v0.38.2}
ENGINE_DIR=${BUILDKIT_ENGINE_DIR:-/var/cache/buildkit-engine}
RUN_DIR=/run/buildkit-engine
BUILDER=buildkit-engine
REGISTRY=127.0.0.1:5000
STAND_IN=$REGISTRY/buildkit/stand-in-base:1
SOCKET=/run/buildkit/buildkitd.sock
BUILDER_B=buildkit-engine-b
SOCKET_B=/run/buildkit-b/buildkitd.sock
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins

say() { printf 'engine: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"
mkdir -p "$ENGINE_DIR/bin" "$ENGINE_DIR/logs" "$RUN_DIR" /run/buildkit /run/buildkit-b

# 1. Debian packages.
missing=()
for pkg in docker.io docker-registry busybox-static git curl squashfs-tools; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
command -v go >/dev/null || die "Go is needed to build BuildKit and buildx (it is on this kind of machine)"
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. BuildKit and buildx from their Go modules. Both go.mod files carry `exclude` directives, so `go install
#    module@version` refuses them: build inside a writable copy of the downloaded module instead.
build_module() { # module version version-package output-dir commands...
  local module=$1 version=$2 version_pkg=$3 out=$4
  shift 4
  local src
  src=$(go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  local work="$ENGINE_DIR/src/${module##*/}-$version"
  rm -rf "$work" && mkdir -p "$(dirname "$work")" && cp -r "$src" "$work" && chmod -R u+w "$work"
  (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
    -ldflags "-s -w -X $version_pkg.Version=$version -X $version_pkg.Package=$module" -o "$out/" "$@")
  rm -rf "$work"
}
if [ "$("$ENGINE_DIR/bin/buildkitd" --version 2>/dev/null | awk '{print $3}')" != "$BUILDKIT_VERSION" ]; then
  say "building buildkitd and buildctl $BUILDKIT_VERSION from the Go module (a few minutes)"
  build_module github.com/moby/buildkit "$BUILDKIT_VERSION" github.com/moby/buildkit/version "$ENGINE_DIR/bin" \
    ./cmd/buildkitd ./cmd/buildctl
fi
if [ "$("$ENGINE_DIR/bin/buildx" version 2>/dev/null | awk '{print $2}')" != "$BUILDX_VERSION" ]; then
  say "building buildx $BUILDX_VERSION from the Go module (a few minutes)"
  build_module github.com/docker/buildx "$BUILDX_VERSION" github.com/docker/buildx/version "$ENGINE_DIR/bin" ./cmd/buildx
fi
mkdir -p "$PLUGIN_DIR"
install -m 0755 "$ENGINE_DIR/bin/buildx" "$PLUGIN_DIR/docker-buildx"
# cosign, for signing and checking provenance attestations (`buildkit attest`, `verify --provenance`).
bash "$(dirname "$0")/cosign-build.sh"

start() { # name pidfile-name command...
  local name=$1
  shift
  say "starting $name"
  nohup "$@" >"$ENGINE_DIR/logs/$name.log" 2>&1 &
  echo $! >"$RUN_DIR/$name.pid"
}
wait_for() { # what command...
  local what=$1
  shift
  for _ in $(seq 1 100); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  die "$what did not come up; see $ENGINE_DIR/logs/"
}

# 3. Docker, with no bridge and no iptables rules (this machine has no network to give containers).
if ! docker info >/dev/null 2>&1; then
  # A daemon killed hard (as at the end of a session) leaves pid files that make the next one refuse to start.
  for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
    if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then rm -f "$pidfile"; fi
  done
  start dockerd dockerd --bridge=none --iptables=false --ip-masq=false --host unix:///var/run/docker.sock
  wait_for dockerd docker info
fi

# 4. Registry on loopback.
if ! curl -fsS "http://$REGISTRY/v2/" >/dev/null 2>&1; then
  mkdir -p "$ENGINE_DIR/registry"
  cat >"$ENGINE_DIR/registry.yml" <<EOF
version: 0.1
storage:
  filesystem:
    rootdirectory: $ENGINE_DIR/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY
log:
  level: warn
EOF
  start registry docker-registry serve "$ENGINE_DIR/registry.yml"
  wait_for registry curl -fsS "http://$REGISTRY/v2/"
fi

# 5. BuildKit daemons: runc worker, host network (no CNI here), plain HTTP to the loopback registry. The second one
#    has a state directory of its own, so nothing the first one built or cached is visible to it.
cat >"$ENGINE_DIR/buildkitd.toml" <<EOF
[worker.oci]
  enabled = true
  gc = true
  gckeepstorage = "10GB"
[worker.containerd]
  enabled = false
[registry."$REGISTRY"]
  http = true
EOF
start_buildkitd() { # name state-dir socket
  if ! "$ENGINE_DIR/bin/buildctl" --addr "unix://$3" debug workers >/dev/null 2>&1; then
    start "$1" "$ENGINE_DIR/bin/buildkitd" --config "$ENGINE_DIR/buildkitd.toml" --root "$2" \
      --addr "unix://$3" --oci-worker-net host
    wait_for "$1" "$ENGINE_DIR/bin/buildctl" --addr "unix://$3" debug workers
  fi
}
start_buildkitd buildkitd "$ENGINE_DIR/buildkit" "$SOCKET"
start_buildkitd buildkitd-b "$ENGINE_DIR/buildkit-b" "$SOCKET_B"

# 6. The buildx builders, remote driver.
for pair in "$BUILDER:$SOCKET" "$BUILDER_B:$SOCKET_B"; do
  name=${pair%%:*}
  if ! docker buildx inspect "$name" >/dev/null 2>&1; then
    docker buildx create --name "$name" --driver remote "unix://${pair#*:}" >/dev/null
  fi
  docker buildx inspect "$name" --bootstrap >/dev/null
done
# Leave the first selected, so `buildkit build` and `buildkit doctor` use it without --builder.
docker buildx use "$BUILDER"

# 7. The stand-in base image: busybox on scratch, built by this BuildKit and pushed to the loopback registry. It
#    sets CUDA_VERSION as NVIDIA's CUDA images do, so resolve's CUDA check runs on the smoke path. Rebuilt when its
#    Dockerfile or busybox changes (the hash of both is kept beside the registry's data).
STAND_IN_DOCKERFILE='FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN mkdir -p /tmp /root /etc && echo '"'"'root:x:0:0:root:/root:/bin/sh'"'"' > /etc/passwd
ENV CUDA_VERSION=12.9.1
CMD ["/bin/sh"]'
stand_in_hash=$( { printf '%s' "$STAND_IN_DOCKERFILE"; sha256sum </bin/busybox; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$ENGINE_DIR/stand-in.sha256" 2>/dev/null)" != "$stand_in_hash" ] \
  || ! curl -fsS "http://$REGISTRY/v2/buildkit/stand-in-base/manifests/1" \
    -H 'Accept: application/vnd.oci.image.index.v1+json' >/dev/null 2>&1; then
  say "building the stand-in base image $STAND_IN"
  ctx=$(mktemp -d)
  cp /bin/busybox "$ctx/busybox"
  printf '%s\n' "$STAND_IN_DOCKERFILE" >"$ctx/Dockerfile"
  docker buildx build --builder "$BUILDER" --progress quiet --platform linux/amd64 -t "$STAND_IN" --push "$ctx" >/dev/null
  rm -rf "$ctx"
  printf '%s\n' "$stand_in_hash" >"$ENGINE_DIR/stand-in.sha256"
fi

say "up: docker $(docker version --format '{{.Server.Version}}'), buildkitd $("$ENGINE_DIR/bin/buildkitd" --version | awk '{print $3}'), buildx $("$ENGINE_DIR/bin/buildx" version | awk '{print $2}'), builders $BUILDER (selected) and $BUILDER_B, registry $REGISTRY, stand-in $STAND_IN"
