"""`kbroker` admin commands over TLS and SASL listeners, with Kafka's --command-config.

The broker is compat_tests/security_broker.py's (one listener of each protocol, PLAIN
users in the JAAS line, SCRAM users created by the `secure` fixture of test_security).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat_tests.broker_process import run_admin
from compat_tests.security_broker import PLAIN_USERS, SCRAM_PASSWORD, SCRAM_USER, SecureBroker
from compat_tests.test_security import secure as secure  # noqa: F401  (the module's broker)

pytestmark = pytest.mark.timeout(120)


def properties(
    tmp_path: Path,
    secure: SecureBroker,
    listener: str,
    mechanism: str | None,
    user: str | None = None,
    password: str | None = None,
) -> Path:
    lines = [f"security.protocol={listener}"]
    if listener.endswith("SSL"):
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={secure.tls.ca.cert}"]
    if mechanism is not None:
        scram = mechanism.startswith("SCRAM")
        module = "scram.ScramLoginModule" if scram else "plain.PlainLoginModule"
        user = user or (SCRAM_USER if scram else "alice")
        password = password or (SCRAM_PASSWORD if scram else PLAIN_USERS["alice"])
        lines += [
            f"sasl.mechanism={mechanism}",
            f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
            f'username="{user}" password="{password}";',
        ]
    path = tmp_path / f"{listener}-{mechanism}.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


def kbroker(secure: SecureBroker, listener: str, config: Path, *args: str):
    return run_admin(secure.address(listener), config, *args)


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [
        ("SSL", None),
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
    ],
)
def test_admin_commands_work_over_a_secured_listener(tmp_path, secure, listener, mechanism):
    config = properties(tmp_path, secure, listener, mechanism)
    topic = f"cli-sec-{listener.lower()}-{(mechanism or 'tls').lower()}"
    created = kbroker(secure, listener, config, "topics", "create", topic, "--partitions", "2")
    assert created.returncode == 0, created.stderr
    listed = kbroker(secure, listener, config, "topics", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert {"name": topic, "partitions": 2} in [
        {k: t[k] for k in ("name", "partitions")} for t in json.loads(listed.stdout)
    ]


def test_a_wrong_password_is_one_line_naming_the_failure(tmp_path, secure):
    config = properties(tmp_path, secure, "SASL_PLAINTEXT", "SCRAM-SHA-512", password="wrong")
    result = kbroker(secure, "SASL_PLAINTEXT", config, "topics", "list")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("kbroker topics: authentication failed on 127.0.0.1:")


def test_an_unknown_certificate_authority_fails_the_tls_handshake(tmp_path, secure):
    config = tmp_path / "no-ca.properties"
    config.write_text("security.protocol=SSL\n")
    result = kbroker(secure, "SSL", config, "cluster", "status")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "TLS with 127.0.0.1:" in line and "CERTIFICATE_VERIFY_FAILED" in line
