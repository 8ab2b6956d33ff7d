#!/usr/bin/env bash
# System tools the compat tests drive. Installed once; each part does nothing while its
# tools are present.
set -euo pipefail

# --- Java Kafka client (compat_tests/test_java_client.py) ---------------------------------
# Apache Kafka's clients jar (3.9.1) with its logging and compression jars, taken from a
# PyPI wheel that bundles them, since Maven is out of reach. Cached per user; nothing is
# fetched while all five jars are present, and nothing at all without a JDK to use them.
# A failed download only warns: the Java tests then skip and say why.
kafka_java_dir="${KBROKER_KAFKA_JARS:-$HOME/.cache/kbroker-test-tools/kafka-java}"
kafka_java_jars="kafka-clients slf4j-api lz4-java snappy-java zstd-jni"
kafka_java_missing=0
for jar in $kafka_java_jars; do
  [ -s "$kafka_java_dir/$jar.jar" ] || kafka_java_missing=1
done
if [ "$kafka_java_missing" = 1 ] && command -v javac >/dev/null 2>&1; then
  kafka_java_py="$(dirname "$0")/../.venv/bin/python"
  [ -x "$kafka_java_py" ] || kafka_java_py=python3
  kafka_java_tmp="$(mktemp -d)"
  if "$kafka_java_py" -m pip download --quiet --no-deps -d "$kafka_java_tmp" \
      shigawire-apache-flink-libraries==2.0.0.post1 >"$kafka_java_tmp/pip.log" 2>&1 \
    && "$kafka_java_py" - "$kafka_java_tmp" "$kafka_java_dir" $kafka_java_jars <<'EOF'
import os, pathlib, sys, zipfile
wheel_dir, target, names = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3:]
(wheel,) = wheel_dir.glob("*.whl")
target.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheel) as zf:
    for name in names:
        part = target / f".{name}.jar.part"
        part.write_bytes(zf.read(f"pyflink/lib/{name}.jar"))
        os.replace(part, target / f"{name}.jar")
EOF
  then
    :
  else
    echo "warning: could not fetch the Java Kafka client jars into $kafka_java_dir;" \
      "the Java compat tests will skip" >&2
    cat "$kafka_java_tmp/pip.log" >&2
  fi
  rm -rf "$kafka_java_tmp"
fi
# --- end Java Kafka client ---------------------------------------------------------------

# --- Debian packages: kcat, Go and Sarama (compat_tests/test_kcat.py, test_sarama.py) ----
# test_sarama.py builds its driver offline in GOPATH mode against Debian's Sarama source
# under /usr/share/gocode; golang-go's recommended gcc gives Sarama its cgo zstd binding.
apt_missing=()
if ! command -v kcat >/dev/null 2>&1 && ! command -v kafkacat >/dev/null 2>&1; then
  apt_missing+=(kcat)
fi
if ! command -v go >/dev/null 2>&1; then
  apt_missing+=(golang-go)
fi
if [ ! -d /usr/share/gocode/src/github.com/Shopify/sarama ]; then
  apt_missing+=(golang-github-shopify-sarama-dev)
fi
# compat_tests/netns.py cuts links between network namespaces with iproute2's `ip`.
if ! command -v ip >/dev/null 2>&1; then
  apt_missing+=(iproute2)
fi
# tests/test_deploy_files.py checks docker-compose.yml with a compose client (offline).
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  apt_missing+=(docker-compose)
fi
if [ ${#apt_missing[@]} -eq 0 ]; then
  exit 0
fi
# A tool that cannot be installed only warns: the tests that drive it skip and say why.
if [ "$(id -u)" != 0 ]; then
  echo "warning: installing ${apt_missing[*]} needs root (apt-get install);" \
    "the tests that drive them will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq >/dev/null && apt-get install -y -qq "${apt_missing[@]}" >/dev/null; }; then
  echo "warning: could not install ${apt_missing[*]}; the tests that drive them will skip" >&2
fi
