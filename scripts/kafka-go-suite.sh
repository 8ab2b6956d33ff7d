#!/usr/bin/env bash
# segmentio/kafka-go's own test suite (the one its maintainers run against a Kafka node
# from their docker-compose file) against one kbroker node set up as that file sets up
# Kafka: PLAINTEXT on localhost:9092 and SASL_PLAINTEXT on localhost:9093 (the suite
# hard-codes both), PLAIN and SCRAM users, the ACL authorizer open where no ACL says
# otherwise, topics made on first use, message.max.bytes 200 MB.
#
#   scripts/kafka-go-suite.sh [go test flags...]    e.g. -test.run TestClient -test.v
#
# It runs the root package's tests (the flags go to those), then sasl's and topics'.
# The module comes from the Go module proxy at KAFKA_GO_VERSION; its tests are built into
# a temporary directory. KAFKA_VERSION (3.7.0, the newest its CI runs) gates the tests of
# newer APIs. Two subtests are skipped: "verify offset committed" and "consumer group
# commits on close" call a helper that builds a ConsumerGroup without its dial function
# and panic against any broker (Kafka 4.3 too), which would end the run.
# Not part of `make test`: ports 9092-9093 are fixed, and a run takes some five minutes.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="${KAFKA_GO_VERSION:-v0.4.51}"
work="$(mktemp -d)"
echo "suite and broker logs in $work"
command -v go >/dev/null || { echo "go is needed (Debian: golang-go)" >&2; exit 1; }

(cd "$work" && go mod init suite >/dev/null 2>&1 \
  && GOFLAGS=-mod=mod go mod download -json "github.com/segmentio/kafka-go@$version" \
  >"$work/download.json")
src="$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' "$work/download.json")"
cp -r "$src" "$work/kafka-go" && chmod -R u+w "$work/kafka-go"
(cd "$work/kafka-go" && go mod tidy >"$work/build.log" 2>&1 \
  && go test -c -o "$work/kafka-go.test" . >>"$work/build.log" 2>&1 \
  && go test -c -o "$work/sasl.test" ./sasl >>"$work/build.log" 2>&1 \
  && go test -c -o "$work/topics.test" ./topics >>"$work/build.log" 2>&1) \
  || { echo "building the suite failed: see $work/build.log" >&2; exit 1; }

cat >"$work/server.properties" <<EOF
listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093
advertised.listeners=PLAINTEXT://localhost:9092,SASL_PLAINTEXT://localhost:9093
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_adminplain="admin-secret";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=true
super.users=User:adminscram256;User:adminscram512;User:adminplain
auto.create.topics.enable=true
message.max.bytes=200000000
log.dirs=$work/data
EOF
"$root/.venv/bin/kbroker" serve --config "$work/server.properties" >"$work/broker.log" 2>&1 &
broker=$!
trap 'kill $broker 2>/dev/null; wait $broker 2>/dev/null || true' EXIT
for _ in $(seq 60); do
  grep -q "serving Kafka" "$work/broker.log" && break
  sleep 0.5
done
grep -q "serving Kafka" "$work/broker.log" || { echo "kbroker did not start: $work/broker.log" >&2; exit 1; }
# The users of both compose files: adminscram with both mechanisms (Kafka 3.x), one user a
# mechanism (4.0); the sasl tests pick by KAFKA_VERSION.
for user in adminscram:256 adminscram:512 adminscram256:256 adminscram512:512; do
  echo "admin-secret-${user#*:}" | "$root/.venv/bin/kbroker" users create "${user%:*}" \
    --mechanism "SCRAM-SHA-${user#*:}" --bootstrap-server 127.0.0.1:9092 >/dev/null
done

export KAFKA_VERSION="${KAFKA_VERSION:-3.7.0}" KAFKA_SKIP_NETTEST=1
status=0
(cd "$work/kafka-go" && "$work/kafka-go.test" -test.timeout 1500s -test.count 1 \
  -test.skip 'TestReaderConsumerGroup/(consumer_group_commits_on_close|verify_offset_committed)' \
  "$@") || status=1
for package in sasl topics; do
  (cd "$work/kafka-go/$package" && "$work/$package.test" -test.timeout 300s -test.count 1) \
    || status=1
done
exit $status
