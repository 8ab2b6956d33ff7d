#!/usr/bin/env bash
# Build kbroker's wheel and a single-file executable (a shiv zipapp) into OUT (default
# dist/): `make pyz`, and the packaging tests, run this. The wheel is built from the same
# files the Dockerfile copies (pyproject.toml, setup.py, README.md, kbroker/), with the C
# record walk compiled when a compiler is present; the zipapp holds the
# wheel and every dependency, and runs with `python3 kbroker.pyz serve` on a machine with
# the same Python minor version and platform.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-dist}")"
py="${PYTHON:-.venv/bin/python}"
shiv="$(dirname "$py")/shiv"
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
cp -r pyproject.toml setup.py README.md LICENSE kbroker "$src/"
find "$src" \( -name '__pycache__' -o -name '*.so' \) -prune -exec rm -rf {} +
mkdir -p "$out"
rm -f "$out"/kbroker-*.whl "$out/kbroker.pyz"
"$py" -m pip wheel --quiet --no-deps --wheel-dir "$out" "$src"
# pip's --no-compile: the zipapp carries sources only (shiv leaves bytecode out), so
# compiling them while staging would be a third of the build for nothing.
"$shiv" --quiet --console-script kbroker --python "/usr/bin/env python3" \
  --output-file "$out/kbroker.pyz" "$out"/kbroker-*.whl --no-compile
echo "$out/kbroker.pyz"
