"""`kbroker acls`, `users` and `quotas` over SASL_SSL with Kafka's --command-config, against
a broker under the StandardAuthorizer (compat_tests/security_broker.py: `admin` is its
super user) that creates no topic on demand. The commands run in this process; what they did is checked by logging in
as the users they made and by what those users may then do.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.security_broker import PLAIN_USERS, SecureBroker, acl_broker
from kbroker.cli import main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    settings = {"auto.create.topics.enable": "false"}
    with acl_broker(tmp_path_factory.mktemp("cli-access"), **settings) as broker:
        yield broker


def properties(secure: SecureBroker, path: Path, mechanism: str, user: str, password: str) -> Path:
    scram = mechanism.startswith("SCRAM")
    module = "scram.ScramLoginModule" if scram else "plain.PlainLoginModule"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secure.tls.ca.cert}\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
        f'username="{user}" password="{password}";\n'
    )
    return path


@pytest.fixture
def kb(secure: SecureBroker, tmp_path: Path, capsys, monkeypatch):
    """Run `kbroker ARGS` over SASL_SSL as `as_user` (PLAIN, or SCRAM with a password)."""

    def run(
        *args: str,
        as_user: str = "admin",
        password: str | None = None,
        mechanism: str = "PLAIN",
        stdin: str = "",
    ) -> tuple[int, str, str]:
        config = properties(
            secure,
            tmp_path / f"{as_user}-{mechanism}.properties",
            mechanism,
            as_user,
            password or PLAIN_USERS[as_user],
        )
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main(
            [*args, "--bootstrap-server", secure.address("SASL_SSL"), "--command-config",
             str(config)]
        )  # fmt: skip
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def test_users_create_list_and_delete_scram_credentials_that_log_in(kb):
    secret = "dora-Secret-123"
    code, out, err = kb(
        "users", "create", "dora", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
        stdin=secret + "\n",
    )  # fmt: skip
    assert code == 0, err
    assert secret not in out + err
    code, out, _ = kb("users", "list", "-o", "json")
    users = {u["user"]: u["credentials"] for u in json.loads(out)}
    assert users["dora"] == [{"mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    code, _, err = kb("topics", "list", as_user="dora", password=secret, mechanism="SCRAM-SHA-512")
    assert code == 0, err
    code, _, err = kb(
        "topics", "list", as_user="dora", password="not-it", mechanism="SCRAM-SHA-512"
    )
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("kbroker topics: authentication failed on 127.0.0.1:")
    code, out, _ = kb("users", "delete", "dora")
    assert code == 0 and "SCRAM-SHA-512" in out
    code, _, err = kb("topics", "list", as_user="dora", password=secret, mechanism="SCRAM-SHA-512")
    assert code == 1 and "authentication failed" in err


def test_acls_create_list_and_delete_with_prefixed_patterns(kb):
    assert kb("topics", "create", "pay-orders")[0] == 0
    assert kb("topics", "create", "hr-salaries")[0] == 0
    code, _, err = kb("topics", "create", "pay-refunds", as_user="alice")
    assert code == 1
    (line,) = err.strip().splitlines()
    assert "TOPIC_AUTHORIZATION_FAILED" in line
    code, out, err = kb(
        "acls", "create", "--allow-principal", "User:alice", "--operation", "Describe",
        "--operation", "CREATE", "--topic", "pay-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert code == 0, err
    assert "Created 2 ACLs." in err
    code, out, _ = kb("acls", "list", "--topic", "pay-", "-o", "json")
    listed = {(a["principal"], a["operation"], a["pattern_type"]) for a in json.loads(out)}
    assert listed == {("User:alice", "DESCRIBE", "PREFIXED"), ("User:alice", "CREATE", "PREFIXED")}
    code, out, _ = kb("acls", "list", "--topic", "pay-orders", "--resource-pattern-type", "match")
    assert ["User:alice", "*", "DESCRIBE", "ALLOW", "TOPIC", "pay-", "PREFIXED"] in [
        line.split() for line in out.splitlines()
    ]
    code, out, err = kb("topics", "list", "-o", "json", as_user="alice")
    assert code == 0, err
    assert [t["name"] for t in json.loads(out)] == ["pay-orders"]
    assert kb("topics", "create", "pay-refunds", as_user="alice")[0] == 0
    code, out, err = kb(
        "acls", "delete", "--allow-principal", "User:alice", "--topic", "pay-",
        "--resource-pattern-type", "prefixed", "--dry-run",
    )  # fmt: skip
    assert code == 0 and "Would delete 2 ACLs." in err
    assert len(json.loads(kb("acls", "list", "--topic", "pay-", "-o", "json")[1])) == 2
    code, out, err = kb(
        "acls", "delete", "--allow-principal", "User:alice", "--operation", "create",
        "--topic", "pay-", "--resource-pattern-type", "prefixed", "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    assert [a["operation"] for a in json.loads(out)["deleted"]] == ["CREATE"]
    code, _, err = kb("topics", "create", "pay-more", as_user="alice")
    assert code == 1 and "TOPIC_AUTHORIZATION_FAILED" in err


def test_acls_need_alter_on_the_cluster_and_say_so(kb):
    code, _, err = kb(
        "acls", "create", "--allow-principal", "User:carol", "--operation", "read",
        "--topic", "x", as_user="carol",
    )  # fmt: skip
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("kbroker acls: creating ACLs: CLUSTER_AUTHORIZATION_FAILED")


def test_quotas_alter_and_describe_users_clients_and_defaults(kb):
    code, _, err = kb("quotas", "alter", "--user", "alice", "--add", "producer_byte_rate=1048576")
    assert code == 0, err
    assert kb("quotas", "alter", "--client-default", "--add", "consumer_byte_rate=2048")[0] == 0
    assert kb(
        "quotas", "alter", "--user", "alice", "--client", "app-1",
        "--add", "request_percentage=50,producer_byte_rate=4096",
    )[0] == 0  # fmt: skip
    code, out, _ = kb("quotas", "describe", "-o", "json")
    found = {tuple(sorted(e["entity"].items(), key=str)): e["quotas"] for e in json.loads(out)}
    assert found[(("user", "alice"),)] == {"producer_byte_rate": 1048576}
    assert found[(("client-id", None),)] == {"consumer_byte_rate": 2048}
    assert found[(("client-id", "app-1"), ("user", "alice"))] == {
        "producer_byte_rate": 4096,
        "request_percentage": 50,
    }
    code, out, _ = kb("quotas", "describe", "--user", "alice", "--strict")
    assert ["user=alice", "producer_byte_rate", "1048576"] in [r.split() for r in out.splitlines()]
    assert "app-1" not in out
    assert kb("quotas", "alter", "--user", "alice", "--delete", "producer_byte_rate")[0] == 0
    code, out, _ = kb("quotas", "describe", "--user", "alice", "--strict", "-o", "json")
    assert json.loads(out) == []


def test_produce_and_consume_over_sasl_ssl_and_a_missing_acl_is_named(kb):
    assert kb("topics", "create", "audit-log", "--partitions", "2")[0] == 0
    lines = "".join(f"event-{i}\n" for i in range(500))
    code, _, err = kb("produce", "audit-log", stdin=lines)
    assert code == 0, err
    code, _, err = kb("produce", "audit-log", "--acks", "0", stdin="fire-and-forget\n")
    assert code == 0 and "Sent 1 records" in err
    code, out, err = kb("consume", "audit-log", "--from", "beginning", "-e")
    assert code == 0, err
    assert sorted(out.splitlines()) == sorted([*lines.split(), "fire-and-forget"])
    code, _, err = kb("produce", "audit-log", as_user="carol", stdin="sneaky\n")
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("kbroker produce: topic audit-log: TOPIC_AUTHORIZATION_FAILED")


def test_producing_to_a_missing_topic_the_broker_does_not_create_says_so(kb):
    code, out, err = kb("produce", "no-such-topic", stdin="lost?\n")
    assert (code, out) == (1, "")
    assert err.strip().splitlines() == [
        "kbroker produce: topic no-such-topic does not exist and the broker did not create "
        "it (auto.create.topics.enable is false)"
    ]
    code, out, _ = kb("topics", "list", "-o", "json")
    assert "no-such-topic" not in [t["name"] for t in json.loads(out)]
