"""Kafka's ACLs and the StandardAuthorizer's decision, with Kafka's numbers for every enum.

A binding says: principal P from host H is ALLOWed (or DENYed) operation O on resources
of a type whose name equals (LITERAL, ``*`` for all) or starts with (PREFIXED) a
pattern. The decision follows the StandardAuthorizer: super users may do anything; a
matching DENY wins over any ALLOW; ALLOW of READ, WRITE, DELETE or ALTER implies
DESCRIBE, and ALTER_CONFIGS implies DESCRIBE_CONFIGS; a resource no ACL names at all is
decided by ``allow.everyone.if.no.acl.found``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from kbroker.security.principal import KafkaPrincipal


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
AUTHORIZATION_FAILED = "Authorization failed."
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
_IMPLIES = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}


# What an ACL on each resource type can grant (Kafka's AclEntry.supportedOperations):
# the operations KIP-430's authorized-operations fields are made of.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        Operation.READ,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}
# An authorized-operations field a request did not ask for (Integer.MIN_VALUE).
OPERATIONS_OMITTED = -2147483648


def operations_field(operations: Iterable[Operation]) -> int:
    """The bit field KIP-430's responses carry: bit n set for operation code n."""
    return sum(1 << op for op in set(operations))


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def to_plain(self) -> list[object]:
        return [
            int(self.resource_type),
            self.resource_name,
            int(self.pattern_type),
            self.principal,
            self.host,
            int(self.operation),
            int(self.permission),
        ]

    @classmethod
    def from_plain(cls, data: Sequence[object]) -> AclBinding:
        rtype, name, pattern, principal, host, operation, permission = data
        return cls(
            ResourceType(rtype),  # type: ignore[arg-type]
            str(name),
            PatternType(pattern),  # type: ignore[arg-type]
            str(principal),
            str(host),
            Operation(operation),  # type: ignore[arg-type]
            Permission(permission),  # type: ignore[arg-type]
        )


def binding_problem(binding: AclBinding) -> str | None:
    """Why CreateAcls refuses a binding (Kafka answers INVALID_REQUEST), or None."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return "Invalid resource type"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid resource pattern type"
    if binding.operation in (Operation.UNKNOWN, Operation.ANY):
        return "Invalid operation"
    if binding.permission not in (Permission.ALLOW, Permission.DENY):
        return "Invalid permission type"
    if not binding.resource_name:
        return "Resource name must not be empty"
    if binding.resource_type is ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, name = binding.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{binding.principal}` (no colon is present)"
    if binding.pattern_type is PatternType.PREFIXED and binding.resource_name == WILDCARD:
        return "Wildcard is not allowed as a prefix"
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filter; None and the ANY values match everything."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(b):
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation is not Operation.ANY and b.operation != self.operation:
            return False
        return self.permission is Permission.ANY or b.permission == self.permission

    def _pattern_matches(self, b: AclBinding) -> bool:
        pattern, name = self.pattern_type, self.resource_name
        if pattern is PatternType.MATCH:
            # Every binding that would apply to a resource of this name.
            if name is None:
                return True
            if b.pattern_type is PatternType.LITERAL:
                return b.resource_name in (name, WILDCARD)
            return b.pattern_type is PatternType.PREFIXED and name.startswith(b.resource_name)
        if pattern is not PatternType.ANY and b.pattern_type != pattern:
            return False
        return name is None or b.resource_name == name

    @property
    def problem(self) -> str | None:
        if self.pattern_type is PatternType.UNKNOWN or self.resource_type is ResourceType.UNKNOWN:
            return "Filter contains UNKNOWN elements"
        if self.operation is Operation.UNKNOWN or self.permission is Permission.UNKNOWN:
            return "Filter contains UNKNOWN elements"
        return None


class AclIndex:
    """Bindings by resource: literal ones by (type, name), prefixed ones by type."""

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        self.literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        self.prefixed: dict[ResourceType, list[AclBinding]] = defaultdict(list)
        for b in bindings:
            if b.pattern_type is PatternType.LITERAL:
                self.literal[(b.resource_type, b.resource_name)].append(b)
            else:
                self.prefixed[b.resource_type].append(b)

    def of_type(self, rtype: ResourceType) -> list[AclBinding]:
        """Every binding on resources of ``rtype``, literal and prefixed."""
        found = [b for (t, _), bs in self.literal.items() if t is rtype for b in bs]
        return found + self.prefixed.get(rtype, [])

    def applying_to(self, rtype: ResourceType, name: str) -> list[AclBinding]:
        found = list(self.literal.get((rtype, name), ()))
        found += self.literal.get((rtype, WILDCARD), ())
        found += [b for b in self.prefixed.get(rtype, ()) if name.startswith(b.resource_name)]
        return found


class StandardAuthorizer:
    """Decides from the bindings in the replicated metadata, re-indexed when they change."""

    def __init__(
        self,
        super_users: Iterable[str],
        allow_if_no_acl: bool,
        bindings: Callable[[], tuple[AclBinding, ...]],
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._bindings = bindings
        self._source: object = None
        self._index = AclIndex(())

    def _current(self) -> AclIndex:
        bindings = self._bindings()
        if bindings is not self._source:  # metadata replaced its tuple: ACLs changed
            self._index = AclIndex(bindings)
            self._source = bindings
        return self._index

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: Operation,
        rtype: ResourceType,
        name: str,
    ) -> bool:
        who = str(principal)
        if who in self.super_users:
            return True
        acls = self._current().applying_to(rtype, name)
        if not acls:
            return self.allow_if_no_acl
        granting = (operation, *_IMPLIES.get(operation, ()))
        allowed = False
        for acl in acls:
            if acl.principal not in (who, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD):
                continue
            if acl.permission is Permission.DENY:
                if acl.operation in (operation, Operation.ALL):
                    return False
            elif acl.operation is Operation.ALL or acl.operation in granting:
                allowed = True
        return allowed

    def authorize_by_resource_type(
        self, principal: KafkaPrincipal, host: str, operation: Operation, rtype: ResourceType
    ) -> bool:
        """Whether ``operation`` may be allowed on at least one resource of ``rtype`` (KIP-679,
        Kafka's ``Authorizer.authorizeByResourceType``), decided from the ACLs alone so a
        resource that does not exist yet counts: an ALLOW pattern not covered by a DENY of
        the same name (or a DENY prefix of it) suffices; a DENY on ``*`` refuses all."""
        if self.authorize(principal, host, operation, rtype, "hardcode"):
            return True  # super users, and allow.everyone.if.no.acl.found
        who = str(principal)
        allow: list[AclBinding] = []
        deny_literal: set[str] = set()
        deny_prefixes: list[str] = []
        for acl in self._current().of_type(rtype):
            if acl.principal not in (who, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD):
                continue
            if acl.operation not in (operation, Operation.ALL):
                continue
            if acl.permission is Permission.DENY:
                if acl.pattern_type is PatternType.PREFIXED:
                    deny_prefixes.append(acl.resource_name)
                elif acl.resource_name == WILDCARD:
                    return False
                else:
                    deny_literal.add(acl.resource_name)
            elif acl.pattern_type is PatternType.LITERAL and acl.resource_name == WILDCARD:
                return True
            else:
                allow.append(acl)
        for acl in allow:
            name = acl.resource_name
            if acl.pattern_type is PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name.startswith(prefix) for prefix in deny_prefixes):
                return True
        return False


def parse_super_users(text: str | None) -> list[str]:
    """``super.users``: principals separated by semicolons, as Kafka writes them."""
    return [p.strip() for p in (text or "").split(";") if p.strip()]
