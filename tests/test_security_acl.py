"""The StandardAuthorizer's decisions and the ACL filters, as Kafka defines them."""

from __future__ import annotations

import pytest

from kbroker.security.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    StandardAuthorizer,
    binding_problem,
)
from kbroker.security.principal import user

ALICE, BOB = user("alice"), user("bob")
T, LIT, PRE = ResourceType.TOPIC, PatternType.LITERAL, PatternType.PREFIXED


def acl(
    name: str,
    operation: Operation,
    principal: str = "User:alice",
    pattern: PatternType = LIT,
    permission: Permission = Permission.ALLOW,
    host: str = "*",
    rtype: ResourceType = T,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, operation, permission)


def authorizer(*bindings: AclBinding, supers: tuple[str, ...] = (), open_: bool = False):
    acls = tuple(bindings)
    return StandardAuthorizer(supers, open_, lambda: acls)


def test_no_acl_refuses_unless_allow_everyone_if_no_acl_found() -> None:
    assert not authorizer().authorize(ALICE, "1.2.3.4", Operation.READ, T, "orders")
    assert authorizer(open_=True).authorize(ALICE, "1.2.3.4", Operation.READ, T, "orders")


def test_one_acl_grants_exactly_its_operation_on_its_resource() -> None:
    auth = authorizer(acl("orders", Operation.READ))
    assert auth.authorize(ALICE, "h", Operation.READ, T, "orders")
    assert not auth.authorize(ALICE, "h", Operation.WRITE, T, "orders")
    assert not auth.authorize(BOB, "h", Operation.READ, T, "orders")
    assert not auth.authorize(ALICE, "h", Operation.READ, T, "orders2")


def test_an_acl_on_a_resource_closes_it_even_with_allow_everyone() -> None:
    auth = authorizer(acl("orders", Operation.READ), open_=True)
    assert not auth.authorize(BOB, "h", Operation.READ, T, "orders")
    assert auth.authorize(BOB, "h", Operation.READ, T, "other")


def test_describe_is_implied_by_read_write_delete_alter_and_describe_configs_by_alter_configs():
    for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        assert authorizer(acl("t", op)).authorize(ALICE, "h", Operation.DESCRIBE, T, "t")
    auth = authorizer(acl("t", Operation.ALTER_CONFIGS))
    assert auth.authorize(ALICE, "h", Operation.DESCRIBE_CONFIGS, T, "t")
    assert not authorizer(acl("t", Operation.CREATE)).authorize(
        ALICE, "h", Operation.DESCRIBE, T, "t"
    )


def test_prefixed_acls_match_names_that_start_with_the_prefix() -> None:
    auth = authorizer(acl("orders-", Operation.WRITE, pattern=PRE))
    assert auth.authorize(ALICE, "h", Operation.WRITE, T, "orders-eu")
    assert not auth.authorize(ALICE, "h", Operation.WRITE, T, "order")


def test_deny_wins_over_allow() -> None:
    auth = authorizer(
        acl("orders-", Operation.ALL, pattern=PRE),
        acl("orders-secret", Operation.READ, permission=Permission.DENY),
    )
    assert auth.authorize(ALICE, "h", Operation.READ, T, "orders-eu")
    assert not auth.authorize(ALICE, "h", Operation.READ, T, "orders-secret")
    assert auth.authorize(ALICE, "h", Operation.WRITE, T, "orders-secret")


def test_wildcard_resource_principal_and_host() -> None:
    auth = authorizer(acl("*", Operation.READ, principal="User:*"))
    assert auth.authorize(BOB, "h", Operation.READ, T, "anything")
    hosted = authorizer(acl("t", Operation.READ, host="10.0.0.1"))
    assert hosted.authorize(ALICE, "10.0.0.1", Operation.READ, T, "t")
    assert not hosted.authorize(ALICE, "10.0.0.2", Operation.READ, T, "t")


def test_super_users_may_do_anything() -> None:
    auth = authorizer(acl("t", Operation.READ, permission=Permission.DENY), supers=("User:bob",))
    assert auth.authorize(BOB, "h", Operation.READ, T, "t")


def test_a_match_filter_finds_every_binding_that_applies_to_a_name() -> None:
    bindings = [
        acl("orders-eu", Operation.READ),
        acl("orders-", Operation.READ, pattern=PRE),
        acl("*", Operation.READ),
        acl("other", Operation.READ),
    ]
    match = AclFilter(T, "orders-eu", PatternType.MATCH, None, None, Operation.ANY, Permission.ANY)
    assert [b.resource_name for b in bindings if match.matches(b)] == ["orders-eu", "orders-", "*"]
    literal = AclFilter(T, "orders-", LIT, None, None, Operation.ANY, Permission.ANY)
    assert not any(literal.matches(b) for b in bindings)


@pytest.mark.parametrize(
    "binding, problem",
    [
        (acl("t", Operation.ANY), "Invalid operation"),
        (acl("t", Operation.READ, principal="alice"), "principal"),
        (acl("other", Operation.ALTER, rtype=ResourceType.CLUSTER), "kafka-cluster"),
        (acl("t", Operation.READ, pattern=PatternType.MATCH), "pattern type"),
    ],
)
def test_bindings_kafka_refuses(binding: AclBinding, problem: str) -> None:
    found = binding_problem(binding)
    assert found is not None and problem in found


def test_acls_scram_credentials_and_quotas_survive_a_metadata_snapshot() -> None:
    from kbroker.controller.state import MetadataState, state_from_plain, state_to_plain
    from kbroker.security.scram import credential_from_salted

    credential = credential_from_salted("SCRAM-SHA-512", b"salt", 4096, b"salted" * 8)
    state = MetadataState(
        acls=(acl("orders-", Operation.WRITE, pattern=PRE),),
        scram_credentials={("bob", "SCRAM-SHA-512"): credential},
        client_quotas={(("client-id", None), ("user", "alice")): {"producer_byte_rate": 1e6}},
    )
    restored = state_from_plain(state_to_plain(state))
    assert restored.acls == state.acls
    assert restored.scram_credentials == state.scram_credentials
    assert restored.client_quotas == state.client_quotas
