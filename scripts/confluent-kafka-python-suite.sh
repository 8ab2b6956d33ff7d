#!/usr/bin/env bash
# confluent-kafka-python's own integration suite (its tests/integration: admin, producer,
# consumer, share consumer, serializers and the Schema Registry client, sync and asyncio)
# against one kbroker node with its schema registry, through the suite's "bring your own
# cluster" fixture (BROKERS and SR_URL).
#
#   scripts/confluent-kafka-python-suite.sh CONFLUENT_KAFKA_PYTHON_SOURCE [pytest arguments...]
#   scripts/confluent-kafka-python-suite.sh ~/src/confluent-kafka-python -x -q
#
# Not part of `make test`: the suite is in the GitHub source only (PyPI's sdist has no
# tests/), out of CI's reach, and a run takes some eleven minutes of both cores. The
# source's version (pyproject.toml) is the confluent-kafka installed from PyPI into a
# scratch virtualenv with the suite's test requirements. The node is configured as the
# suite's own broker settings (TestUtils.broker_conf: single-node replication factors,
# share-group record locks from 1 s) with an ACL authorizer open where no ACL says
# otherwise, as the admin tests need one. Three parts need a cluster the suite makes
# with trivup and are left out: the SASL cluster's tests (share_consumer_sasl,
# share_consumer_oauth, the sasl_cluster case of test_describe_operations) and the
# Confluent Platform 7.0.1 case of test_api_get_register_schema_invalid. The suite's
# bring-your-own fixture has no asyncio Schema Registry client; the scratch copy of the
# suite is given one so that the asyncio tests run too. The scratch directory (the
# node's data and log) is kept for a look after the run, and named at the start.
# docs/compatibility.md records what the last run found.
set -euo pipefail

src="${1:?usage: scripts/confluent-kafka-python-suite.sh CONFLUENT_KAFKA_PYTHON_SOURCE [pytest arguments...]}"
shift
root="$(cd "$(dirname "$0")/.." && pwd)"
port="${KBROKER_SUITE_PORT:-39092}"
registry_port="$((port + 1))"
work="$(mktemp -d)"
echo "node, suite and logs in $work"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$src/pyproject.toml" | head -1)"
[ -n "$version" ] || { echo "no version in $src/pyproject.toml" >&2; exit 1; }
"${PYTHON:-python3}" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "confluent-kafka[avro,json,protobuf,schemaregistry]==$version" \
  pytest pytest-timeout pytest-asyncio requests-mock respx async-timeout trivup \
  >"$work/pip.log" 2>&1 || { echo "installing the suite failed: see $work/pip.log" >&2; exit 1; }

mkdir -p "$work/suite"
cp -r "$src/tests" "$src/pyproject.toml" "$work/suite/"
# The asyncio Schema Registry client the trivup fixture has, for the bring-your-own one.
fixture="$work/suite/tests/integration/cluster_fixture.py"
grep -q "AsyncSchemaRegistryClient" "$fixture" || { echo "unexpected $fixture" >&2; exit 1; }
cat >>"$fixture" <<'EOF'


def _async_schema_registry(self, conf=None):
    return AsyncSchemaRegistryClient({"url": self._sr_url})


if not hasattr(ByoFixture, "async_schema_registry"):
    ByoFixture.async_schema_registry = _async_schema_registry
EOF

"$root/.venv/bin/python" -m kbroker serve \
  --override "listeners=PLAINTEXT://127.0.0.1:$port" \
  --override "log.dirs=$work/data" \
  --override "http.listeners=http://127.0.0.1:$((port + 2))" \
  --override "schema.registry.listeners=http://127.0.0.1:$registry_port" \
  --override offsets.topic.replication.factor=1 \
  --override transaction.state.log.replication.factor=1 \
  --override transaction.state.log.min.isr=1 \
  --override share.coordinator.state.topic.replication.factor=1 \
  --override share.coordinator.state.topic.min.isr=1 \
  --override group.share.record.lock.duration.ms=1000 \
  --override group.share.min.record.lock.duration.ms=1000 \
  --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
  --override allow.everyone.if.no.acl.found=true >"$work/node.log" 2>&1 &
node=$!
trap 'kill -TERM $node 2>/dev/null; wait $node 2>/dev/null || true' EXIT
for _ in $(seq 60); do
  grep -q "serving Kafka on" "$work/node.log" && break
  sleep 1
done
grep -q "serving Kafka on" "$work/node.log" || { echo "the node did not start: $work/node.log" >&2; exit 1; }

cd "$work/suite"
BROKERS="127.0.0.1:$port" SR_URL="http://127.0.0.1:$registry_port" \
  "$work/venv/bin/python" -m pytest tests/integration -p no:cacheprovider --timeout 300 \
  --ignore=tests/integration/share_consumer_sasl --ignore=tests/integration/share_consumer_oauth \
  --deselect "tests/integration/admin/test_describe_operations.py::test_describe_operations[sasl_cluster0]" \
  -k "not kafka_cluster_cp_7_0_1" "$@"
