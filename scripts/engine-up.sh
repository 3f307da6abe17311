#!/usr/bin/env bash
# Bring up, on this machine and with no internet, the build engine the tests and the smoke build use:
#   - Docker from Debian's docker.io (for --load and inspection), started with --bridge=none --iptables=false;
#   - a registry from Debian's docker-registry on 127.0.0.1:5000, holding a stand-in base image for linux/amd64
#     and linux/arm64 (one image index);
#   - arm64 emulation: Debian's qemu-user-static, qemu-aarch64 registered with binfmt_misc (F flag) before the
#     BuildKit daemons start, so they build linux/arm64 (GB200 nodes) on this x86_64 machine;
#   - a standalone BuildKit daemon and the buildx plugin, built from their Go modules with the machine's Go;
#   - cosign, built from its Go module (scripts/cosign-build.sh);
#   - a buildx builder "buildkit-engine" with the remote driver, pointing at that daemon;
#   - a second BuildKit daemon with its own state and a builder "buildkit-engine-b" for it: the "other machine" of
#     the shared-cache and rebuild-on-another-builder tests (`docker buildx prune --builder buildkit-engine-b -af`
#     empties it).
# Idempotent: what is already up is left as it is (a BuildKit daemon without linux/arm64 is restarted). Needs root.
# `scripts/engine-down.sh` takes it all down (the qemu-aarch64 registration stays: see there).
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
# apt, one at a time: the test command installs Node beside this script (scripts/test.sh), and apt refuses to run
# while another apt holds its lock.
apt_get() { flock /run/lock/buildkit-apt.lock apt-get "$@"; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"
mkdir -p "$ENGINE_DIR/bin" "$ENGINE_DIR/logs" "$RUN_DIR" /run/buildkit /run/buildkit-b

# 1. Debian packages, in the background: the Go builds (step 2) need none of them, and on a fresh machine apt,
#    mostly waiting on the network, overlaps them. Waited for before anything uses them (step 3).
missing=()
for pkg in docker.io docker-registry busybox-static git curl squashfs-tools qemu-user-static; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
command -v go >/dev/null || die "Go is needed to build BuildKit and buildx (it is on this kind of machine)"
apt_pid=
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} from Debian"
  {
    apt_get update -qq
    DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  } &
  apt_pid=$!
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
  # -dwarf=false: the compiler makes no debug information the linker's -w would drop anyway (the same binary, for
  # 16% less CPU: buildx from empty caches took 149 s instead of 177 s).
  (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -gcflags=all=-dwarf=false \
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

if [ -n "$apt_pid" ]; then
  wait "$apt_pid" || die "apt could not install ${missing[*]} (its output is above)"
fi

# 3. arm64 emulation. qemu-aarch64 is registered with binfmt_misc with the F (fix-binary) flag: the kernel opens the
#    interpreter now, so arm64 binaries also run inside BuildKit's runc containers, whose root has no qemu. Debian's
#    line for it (/usr/lib/binfmt.d) is written by hand: systemd-binfmt, which would read it, does not run here.
#    Before the BuildKit daemons start: buildkitd finds the platforms it can emulate when it starts.
BINFMT=/proc/sys/fs/binfmt_misc
if [ ! -e "$BINFMT/register" ]; then
  mount -t binfmt_misc binfmt_misc "$BINFMT" || die "binfmt_misc is not mounted at $BINFMT and could not be mounted"
fi
[ "$(cat "$BINFMT/status")" = enabled ] || echo 1 >"$BINFMT/status"
if [ -e "$BINFMT/qemu-aarch64" ] && ! grep -q '^flags:.*F' "$BINFMT/qemu-aarch64"; then
  say "replacing the qemu-aarch64 binfmt entry: without the F flag arm64 binaries do not run in containers"
  echo -1 >"$BINFMT/qemu-aarch64"
fi
if [ ! -e "$BINFMT/qemu-aarch64" ]; then
  say "registering qemu-aarch64 with binfmt_misc"
  line=$(grep -m1 '^:qemu-aarch64:' /usr/lib/binfmt.d/qemu-aarch64.conf) \
    || die "no qemu-aarch64 line in /usr/lib/binfmt.d/qemu-aarch64.conf (qemu-user-static changed?)"
  printf '%s\n' "$line" >"$BINFMT/register"
fi
[ "$(head -1 "$BINFMT/qemu-aarch64")" = enabled ] || echo 1 >"$BINFMT/qemu-aarch64"

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

# 4. Docker, with no bridge and no iptables rules (this machine has no network to give containers).
if ! docker info >/dev/null 2>&1; then
  # A daemon killed hard (as at the end of a session) leaves pid files that make the next one refuse to start.
  for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
    if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then rm -f "$pidfile"; fi
  done
  start dockerd dockerd --bridge=none --iptables=false --ip-masq=false --host unix:///var/run/docker.sock
  wait_for dockerd docker info
fi

# 5. Registry on loopback.
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

# 6. BuildKit daemons: runc worker, host network (no CNI here), plain HTTP to the loopback registry. The second one
#    has a state directory of its own, so nothing the first one built or cached is visible to it. buildkitd finds
#    the platforms it can emulate at its start (v0.34 looks again when its workers are listed, at most every 20 s):
#    one already running that still lists no linux/arm64 started before qemu-aarch64 was registered, and is
#    restarted.
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
platforms() { # socket: the daemon's "Platforms:" line, empty when it does not answer
  "$ENGINE_DIR/bin/buildctl" --addr "unix://$1" debug workers -v 2>/dev/null | grep '^Platforms:' || true
}
stop() { # name: a daemon this script started (its pid file)
  local pid
  pid=$(cat "$RUN_DIR/$1.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null \
    || die "$1 is running but was not started by this script (no pid file in $RUN_DIR): stop it, then run this again"
  kill "$pid"
  for _ in $(seq 1 100); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$RUN_DIR/$1.pid"
      return 0
    fi
    sleep 0.2
  done
  die "$1 (pid $pid) did not stop within 20 s"
}
start_buildkitd() { # name state-dir socket
  local running
  running=$(platforms "$3")
  if [ -n "$running" ] && [[ $running != *linux/arm64* ]]; then
    say "restarting $1: it started before qemu-aarch64 was registered, so it cannot build linux/arm64"
    stop "$1"
    running=
  fi
  if [ -z "$running" ]; then
    start "$1" "$ENGINE_DIR/bin/buildkitd" --config "$ENGINE_DIR/buildkitd.toml" --root "$2" \
      --addr "unix://$3" --oci-worker-net host
    wait_for "$1" "$ENGINE_DIR/bin/buildctl" --addr "unix://$3" debug workers
  fi
}
start_buildkitd buildkitd "$ENGINE_DIR/buildkit" "$SOCKET"
start_buildkitd buildkitd-b "$ENGINE_DIR/buildkit-b" "$SOCKET_B"

# 7. The buildx builders, remote driver.
for pair in "$BUILDER:$SOCKET" "$BUILDER_B:$SOCKET_B"; do
  name=${pair%%:*}
  if ! docker buildx inspect "$name" >/dev/null 2>&1; then
    docker buildx create --name "$name" --driver remote "unix://${pair#*:}" >/dev/null
  fi
  docker buildx inspect "$name" --bootstrap | grep '^Platforms:.*linux/arm64' >/dev/null \
    || die "builder $name does not list linux/arm64 (see docker buildx inspect $name, $BINFMT/qemu-aarch64)"
done
# Leave the first selected, so `buildkit build` and `buildkit doctor` use it without --builder.
docker buildx use "$BUILDER"

# 8. The stand-in base image: busybox on scratch for linux/amd64 and linux/arm64 (one image index), built by this
#    BuildKit in one build and pushed to the loopback registry; its RUN steps run under qemu for arm64, which proves
#    the emulation works. It sets CUDA_VERSION as NVIDIA's CUDA images do, so resolve's CUDA check runs on the smoke
#    path. The amd64 busybox is the host's (Debian's busybox-static); the arm64 one is Debian's busybox-static for
#    arm64, downloaded once by apt, which checks its sha256 against the signed index, and kept in $ENGINE_DIR/debs
#    so a later bring-up needs no download. Rebuilt when the Dockerfile or either busybox changes (the hash of the
#    three is kept beside the registry's data).
STAND_IN_DOCKERFILE='FROM scratch
ARG TARGETARCH
COPY busybox-${TARGETARCH} /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN mkdir -p /tmp /root /etc && echo '"'"'root:x:0:0:root:/root:/bin/sh'"'"' > /etc/passwd
ENV CUDA_VERSION=12.9.1
CMD ["/bin/sh"]'
mkdir -p "$ENGINE_DIR/debs"
arm64_deb=$(find "$ENGINE_DIR/debs" -name 'busybox-static_*_arm64.deb' | sort | tail -1)
if [ -z "$arm64_deb" ]; then
  if ! dpkg --print-foreign-architectures | grep -x arm64 >/dev/null; then
    say "adding arm64 to dpkg's architectures, for apt to download busybox-static:arm64 (nothing arm64 is installed)"
    dpkg --add-architecture arm64
  fi
  say "downloading Debian's busybox-static for arm64"
  apt_get update -qq
  download=$(mktemp -d)
  chown _apt "$download" # apt downloads as its unprivileged user _apt
  (cd "$download" && apt_get download -qq busybox-static:arm64) || die "apt could not download busybox-static:arm64"
  mv "$download"/busybox-static_*_arm64.deb "$ENGINE_DIR/debs/"
  rm -rf "$download"
  arm64_deb=$(find "$ENGINE_DIR/debs" -name 'busybox-static_*_arm64.deb' | sort | tail -1)
fi
[ "$(dpkg-deb -f "$arm64_deb" Architecture)" = arm64 ] || die "$arm64_deb is not an arm64 package"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp /bin/busybox "$ctx/busybox-amd64"
dpkg-deb -x "$arm64_deb" "$ctx/arm64-deb"
mv "$ctx/arm64-deb/bin/busybox" "$ctx/busybox-arm64"
rm -rf "$ctx/arm64-deb"
# Run here through binfmt_misc: a qemu-aarch64 entry that fails is caught now, whether or not the image is rebuilt.
[ "$("$ctx/busybox-arm64" uname -m 2>/dev/null)" = aarch64 ] \
  || die "the arm64 busybox does not run under qemu-aarch64 (see $BINFMT/qemu-aarch64)"
printf '%s\n' "$STAND_IN_DOCKERFILE" >"$ctx/Dockerfile"
stand_in_hash=$(cd "$ctx" && sha256sum Dockerfile busybox-amd64 busybox-arm64 | sha256sum | cut -d' ' -f1)
if [ "$(cat "$ENGINE_DIR/stand-in.sha256" 2>/dev/null)" != "$stand_in_hash" ] \
  || ! curl -fsS "http://$REGISTRY/v2/buildkit/stand-in-base/manifests/1" \
    -H 'Accept: application/vnd.oci.image.index.v1+json' >/dev/null 2>&1; then
  say "building the stand-in base image $STAND_IN (linux/amd64 and, under qemu, linux/arm64)"
  docker buildx build --builder "$BUILDER" --progress quiet --platform linux/amd64,linux/arm64 -t "$STAND_IN" \
    --push "$ctx" >/dev/null
  printf '%s\n' "$stand_in_hash" >"$ENGINE_DIR/stand-in.sha256"
fi

say "up: docker $(docker version --format '{{.Server.Version}}'), buildkitd $("$ENGINE_DIR/bin/buildkitd" --version | awk '{print $3}'), buildx $("$ENGINE_DIR/bin/buildx" version | awk '{print $2}'), builders $BUILDER (selected) and $BUILDER_B (linux/arm64 under qemu), registry $REGISTRY, stand-in $STAND_IN"
