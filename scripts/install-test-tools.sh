#!/usr/bin/env bash
# System tools the compat tests drive: kcat (Debian's package). Installed once, as root.
set -euo pipefail
if command -v kcat >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "kcat is missing and installing it needs root: apt-get install kcat" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq kcat >/dev/null
