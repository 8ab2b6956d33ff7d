#!/usr/bin/env bash
# librdkafka's own regression suite (its tests/ directory) against a 3-node kbroker cluster.
#
#   scripts/librdkafka-suite.sh LIBRDKAFKA_SOURCE [run-test.sh arguments...]
#   scripts/librdkafka-suite.sh ~/src/librdkafka -Q -E -p2           # quick, two at a time
#   TEST_CONSUMER_GROUP_PROTOCOL=consumer scripts/librdkafka-suite.sh ~/src/librdkafka -Q -E -p2 -L
#   TEST_KAFKA_VERSION=4.2.0 TESTS=0170,0171 scripts/librdkafka-suite.sh ~/src/librdkafka -p1 -L
#
# Not part of `make test`: the suite wants a librdkafka source tree (GitHub, out of CI's
# reach) and some fifteen minutes of both cores in its quick form. It builds the library
# and the test runner if they are not built, starts `kbroker dev` in a scratch directory
# configured as the suite's "default" scenario expects of a cluster (topics created on
# first use with 4 partitions and 3 replicas, an ACL authorizer that lets everyone in
# where no ACL says otherwise, share groups allowed record locks from 1 s as the share
# consumer tests set them), points the tests that shell out to Kafka's tools at a
# KAFKA_PATH made of Kafka 4.3's jars (scripts/install-test-tools.sh caches them), runs
# run-test.sh with the arguments given, and stops the cluster. Its scratch directory
# (the nodes' data and logs) is kept for a look after the run, and named at the start.
# docs/compatibility.md records what the last run found.
set -euo pipefail

src="${1:?usage: scripts/librdkafka-suite.sh LIBRDKAFKA_SOURCE [run-test.sh arguments...]}"
shift
root="$(cd "$(dirname "$0")/.." && pwd)"
jars="${KBROKER_KAFKA_DIST:-$HOME/.cache/kbroker-test-tools/kafka-4.3}"
port="${KBROKER_SUITE_PORT:-29092}"
work="$(mktemp -d)"
echo "cluster and logs in $work"
[ -s "$jars/kafka-tools-4.3.1.jar" ] || bash "$root/scripts/install-test-tools.sh"

if [ ! -x "$src/tests/test-runner" ]; then
  (cd "$src" && ./configure --disable-gssapi --disable-curl >"$work/configure.log" \
    && make -j"$(nproc)" libs >"$work/make.log" && make -C tests -j"$(nproc)" build \
    >>"$work/make.log") || { echo "building librdkafka failed: see $work" >&2; exit 1; }
fi

# Kafka's tools as the suite calls them: $KAFKA_PATH/bin/<tool>.sh and $KAFKA_PATH/libs.
mkdir -p "$work/kafka/bin"
ln -s "$jars" "$work/kafka/libs"
cat >"$work/kafka/bin/kafka-run-class.sh" <<EOF
#!/usr/bin/env bash
exec java -cp "\${CLASSPATH:+\$CLASSPATH:}$jars/*" "\$@"
EOF
for pair in kafka-topics=TopicCommand kafka-acls=AclCommand; do
  printf '#!/usr/bin/env bash\nexec "%s" org.apache.kafka.tools.%s "$@"\n' \
    "$work/kafka/bin/kafka-run-class.sh" "${pair#*=}" >"$work/kafka/bin/${pair%%=*}.sh"
done
chmod +x "$work/kafka/bin/"*.sh

"$root/.venv/bin/python" -m kbroker dev --nodes 3 --dir "$work/cluster" --port "$port" \
  --override num.partitions=4 --override default.replication.factor=3 \
  --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
  --override allow.everyone.if.no.acl.found=true \
  --override group.share.min.record.lock.duration.ms=1000 >"$work/cluster.log" 2>&1 &
cluster=$!
trap 'kill -INT $cluster 2>/dev/null; wait $cluster 2>/dev/null || true' EXIT
brokers="127.0.0.1:$port,127.0.0.1:$((port + 1)),127.0.0.1:$((port + 2))"
for _ in $(seq 60); do
  grep -q '^bootstrap:' "$work/cluster.log" && break
  sleep 1
done
grep -q '^bootstrap:' "$work/cluster.log" || { echo "the cluster did not start: $work/cluster.log" >&2; exit 1; }

printf 'metadata.broker.list=%s\ntest.timeout.multiplier=2\n' "$brokers" >"$src/tests/test.conf"
cd "$src/tests"
KAFKA_PATH="$work/kafka" BROKERS="$brokers" TEST_KAFKA_VERSION="${TEST_KAFKA_VERSION:-4.0.0}" \
  ./run-test.sh "$@"
