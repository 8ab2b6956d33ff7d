#!/usr/bin/env bash
# Builds the kbroker image from this checkout's Dockerfile for the compose test
# (compat_tests/test_docker_compose.py), on a machine that may have no registry and no
# running Docker daemon:
#   1. a daemon: the one answering, else (as root) dockerd started here with host
#      networking only (--bridge=none --iptables=false), its pid in $CACHE/dockerd.pid;
#   2. a base image: $KBROKER_BASE_IMAGE (default the Dockerfile's) if present or
#      pullable, else kbroker-base:bookworm, a Debian bookworm made with debootstrap and
#      Debian's python3, imported from $CACHE/bookworm-python.tar (made once);
#   3. kbroker's dependencies as wheels built on this machine into $CACHE/wheels (once per
#      dependency list), served to the build on 127.0.0.1 so pip in the image needs no
#      index;
#   4. docker build --network host -t $KBROKER_IMAGE (default kbroker:latest).
# Exit 0: the image is built. Exit 3: Docker cannot run here (one line on stderr says
# why; the test skips). Anything else: a failure, one line on stderr saying what to do.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${KBROKER_DOCKER_CACHE:-$HOME/.cache/kbroker-test-tools/docker}"
IMAGE="${KBROKER_IMAGE:-kbroker:latest}"
DEFAULT_BASE="$(sed -n 's/^ARG BASE_IMAGE=//p' "$ROOT/Dockerfile")"
BASE="${KBROKER_BASE_IMAGE:-$DEFAULT_BASE}"
LOCAL_BASE=kbroker-base:bookworm
# The mirror apt uses here (a Debian host's deb822 or one-line sources), else Debian's.
MIRROR="${KBROKER_DEBIAN_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
  /etc/apt/sources.list.d/*.list 2>/dev/null \
  | sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p; s/^deb \(http[^ ]*debian\)\/* bookworm .*/\1/p' \
  | sed -n 1p || true)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
mkdir -p "$CACHE"

say() { echo "docker-test-setup: $*" >&2; }
cannot_run() { say "$*"; exit 3; }
fail() { say "$*"; exit 1; }

# --- 1. the daemon ------------------------------------------------------------------------
command -v docker >/dev/null 2>&1 \
  || cannot_run "no docker command (apt-get install docker.io, as root)"
if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    cannot_run "no Docker daemon answers and starting one needs root (run dockerd, or join the docker group)"
  fi
  command -v dockerd >/dev/null 2>&1 \
    || cannot_run "no Docker daemon answers and dockerd is not installed (apt-get install docker.io)"
  # Host networking only: no bridge and no iptables rules, so nothing here touches the
  # machine's network beyond 127.0.0.1.
  setsid dockerd --bridge=none --iptables=false --ip6tables=false \
    >"$CACHE/dockerd.log" 2>&1 </dev/null &
  echo $! >"$CACHE/dockerd.pid"
  for _ in $(seq 120); do
    docker info >/dev/null 2>&1 && break
    if ! kill -0 "$(cat "$CACHE/dockerd.pid")" 2>/dev/null; then
      rm -f "$CACHE/dockerd.pid"
      cannot_run "dockerd exited at start: $(tail -n 1 "$CACHE/dockerd.log")"
    fi
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || cannot_run "dockerd did not answer within 60 s (see $CACHE/dockerd.log)"
fi

# --- 2. the base image --------------------------------------------------------------------
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# debootstrap mounts /proc and /sys in the tree it makes (and leaves them mounted when it
# fails): unmount them before anything is removed, and never cross into them.
remove_rootfs() {
  local mount
  awk -v root="$1/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r \
    | while read -r mount; do umount -l "$mount" 2>/dev/null || true; done
  rm -rf --one-file-system "$1"
}

make_local_base() {
  local tarball="$CACHE/bookworm-python.tar" rootfs
  if [ ! -s "$tarball" ]; then
    [ "$(id -u)" = 0 ] || fail "base image $WANTED cannot be pulled and debootstrap needs root: pull $WANTED, or set KBROKER_BASE_IMAGE to a bookworm image with python3"
    if ! command -v debootstrap >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 \
        || fail "base image $WANTED cannot be pulled and debootstrap cannot be installed: pull $WANTED, or set KBROKER_BASE_IMAGE"
    fi
    rootfs="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
    chmod 755 "$rootfs" # the image's /, which mktemp made private
    say "base image $WANTED cannot be pulled; making $LOCAL_BASE with debootstrap from $MIRROR (once)"
    if ! debootstrap --variant=minbase \
      --include=python3,python3-venv,python-is-python3,ca-certificates \
      bookworm "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1; then
      remove_rootfs "$rootfs"
      fail "debootstrap of bookworm from $MIRROR failed (see $CACHE/debootstrap.log): set KBROKER_DEBIAN_MIRROR, or KBROKER_BASE_IMAGE to a pullable image"
    fi
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" --one-file-system -cf "$tarball.part" .
    remove_rootfs "$rootfs"
    mv "$tarball.part" "$tarball"
  fi
  docker import --change 'CMD ["python3"]' "$tarball" "$LOCAL_BASE" >/dev/null \
    || fail "docker import of $tarball failed: remove it and run again"
}

if ! have_image "$BASE"; then
  if timeout 120 docker pull --quiet "$BASE" >/dev/null 2>&1; then
    :
  else
    WANTED="$BASE"
    BASE="$LOCAL_BASE"
    have_image "$BASE" || make_local_base
  fi
fi

# --- 3. the dependencies as wheels --------------------------------------------------------
WHEELS="$CACHE/wheels"
requirements="$("$PY" - "$ROOT/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
for line in [*project["project"]["dependencies"], *project["build-system"]["requires"], "wheel"]:
    print(line)
EOF
)"
if [ "$(cat "$WHEELS/.requirements" 2>/dev/null)" != "$requirements" ]; then
  rm -rf "$WHEELS"
  mkdir -p "$WHEELS"
  if ! printf '%s\n' "$requirements" >"$CACHE/requirements.txt" \
    || ! "$PY" -m pip wheel --quiet --wheel-dir "$WHEELS" -r "$CACHE/requirements.txt" \
      >"$CACHE/pip-wheel.log" 2>&1; then
    fail "pip wheel of kbroker's dependencies failed (see $CACHE/pip-wheel.log): check pip's index settings (pip config list)"
  fi
  printf '%s\n' "$requirements" >"$WHEELS/.requirements"
fi

# --- 4. the image -------------------------------------------------------------------------
port="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$PY" -m http.server --bind 127.0.0.1 --directory "$WHEELS" "$port" >"$CACHE/wheel-server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/', timeout=1)" \
    2>/dev/null && break
  sleep 0.1
done
if ! DOCKER_BUILDKIT=0 docker build --force-rm --network host --tag "$IMAGE" \
  --build-arg "BASE_IMAGE=$BASE" \
  --build-arg PIP_NO_INDEX=1 \
  --build-arg "PIP_FIND_LINKS=http://127.0.0.1:$port/" \
  "$ROOT" >"$CACHE/build.log" 2>&1; then
  fail "docker build of $IMAGE on $BASE failed: $(grep -v '^ ---> \|^Step \|^Removing' "$CACHE/build.log" | tail -n 1) (log in $CACHE/build.log)"
fi
# Each build leaves the image it replaced and its build stage untagged: remove those that
# earlier builds here made (this build's stay, the next build's cache; no other image).
grep -o '^ ---> [0-9a-f]\{12\}$' "$CACHE/build.log" | cut -c7- | sort -u >"$CACHE/build.ids"
sort -u -o "$CACHE/built.ids" "$CACHE/built.ids" "$CACHE/build.ids" 2>/dev/null \
  || cp "$CACHE/build.ids" "$CACHE/built.ids"
docker images --quiet --filter dangling=true | sort -u | comm -12 - "$CACHE/built.ids" \
  | comm -23 - "$CACHE/build.ids" | xargs -r docker rmi >/dev/null 2>&1 || true
echo "$IMAGE built on $BASE"
