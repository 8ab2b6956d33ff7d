"""Who may do what: `kbroker acls`, `kbroker users` and `kbroker quotas`.

    kbroker acls   list | create | delete [--dry-run]      (kafka-acls)
    kbroker users  list | create NAME | delete NAME       (kafka-configs --entity-type users,
                                                           SCRAM-SHA-256/512 credentials)
    kbroker quotas describe | alter                       (kafka-configs --entity-type
                                                           users/clients, rpk cluster quotas)

ACLs go through DescribeAcls, CreateAcls and DeleteAcls with kafka-acls' option names
(`--allow-principal`, `--operation`, `--topic`, `--resource-pattern-type`, ...). A SCRAM
credential is salted and hashed here, as Kafka's admin client does, and only the salted
password goes to the broker (AlterUserScramCredentials); the password comes from a
prompt that does not echo, or the first line of stdin, and is never printed or logged.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import os
import sys
from collections.abc import Callable
from typing import Any

from kbroker.admin.client import ClientError, Cluster
from kbroker.admin.output import Output
from kbroker.admin.topics import check

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51

RESOURCE_TYPES = {
    "any": 1, "topic": 2, "group": 3, "cluster": 4, "transactional-id": 5,
    "delegation-token": 6, "user": 7,
}  # fmt: skip
PATTERN_TYPES = {"any": 1, "match": 2, "literal": 3, "prefixed": 4}
OPERATIONS = {
    "any": 1, "all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7,
    "describe": 8, "cluster-action": 9, "describe-configs": 10, "alter-configs": 11,
    "idempotent-write": 12, "create-tokens": 13, "describe-tokens": 14, "two-phase-commit": 15,
}  # fmt: skip
PERMISSIONS = {"any": 1, "deny": 2, "allow": 3}
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_HASHES = {1: "sha256", 2: "sha512"}
QUOTA_ENTITIES = {"user": "user", "client": "client-id", "ip": "ip"}

Runner = Callable[[Cluster, argparse.Namespace, Output], int]


def _name_of(table: dict[str, int], code: int) -> str:
    for name, value in table.items():
        if value == code:
            return name.upper().replace("-", "_")
    return f"UNKNOWN({code})"


def _operation(text: str) -> int:
    key = text.strip().lower().replace("_", "-")
    if key not in OPERATIONS:
        raise ClientError(f"unknown operation {text!r} (one of {', '.join(OPERATIONS)})")
    return OPERATIONS[key]


# -- ACLs ------------------------------------------------------------------------------------


def _resource_options(parser: argparse.ArgumentParser, required: bool) -> None:
    which = parser.add_mutually_exclusive_group(required=required)
    which.add_argument("--topic", help="a topic (or with --resource-pattern-type prefixed, "
                       "a prefix; * for every topic)")  # fmt: skip
    which.add_argument("--group", help="a consumer, share or classic group")
    which.add_argument("--transactional-id", help="a transactional id")
    which.add_argument("--cluster", action="store_true", help="the cluster")
    which.add_argument("--user-resource", metavar="USER", help="a user (delegation tokens)")


def _resource(args: argparse.Namespace, default_type: int) -> tuple[int, str | None]:
    if args.topic is not None:
        return RESOURCE_TYPES["topic"], args.topic
    if args.group is not None:
        return RESOURCE_TYPES["group"], args.group
    if args.transactional_id is not None:
        return RESOURCE_TYPES["transactional-id"], args.transactional_id
    if args.cluster:
        return RESOURCE_TYPES["cluster"], "kafka-cluster"
    if args.user_resource is not None:
        return RESOURCE_TYPES["user"], args.user_resource
    return default_type, None


def add_acl_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("acls", help="list, create and delete ACLs (kafka-acls)")
    commands = parser.add_subparsers(dest="acls_command", required=True)
    listing = commands.add_parser("list", parents=[common], help="ACLs matching a filter")
    _resource_options(listing, required=False)
    listing.add_argument("--principal", help="only this principal's (User:NAME)")
    listing.add_argument(
        "--resource-pattern-type",
        choices=tuple(PATTERN_TYPES),
        default="any",
        help="literal, prefixed, any (default) or match (every ACL that applies to the name)",
    )
    listing.set_defaults(run=_acls_list)
    create = commands.add_parser("create", parents=[common], help="add ACLs (kafka-acls --add)")
    _resource_options(create, required=True)
    _acl_options(create)
    create.add_argument(
        "--resource-pattern-type", choices=("literal", "prefixed"), default="literal"
    )
    create.set_defaults(run=_acls_create)
    delete = commands.add_parser(
        "delete", parents=[common], help="remove the ACLs matching a filter (kafka-acls --remove)"
    )
    _resource_options(delete, required=False)
    _acl_options(delete)
    delete.add_argument("--resource-pattern-type", choices=tuple(PATTERN_TYPES), default="literal")
    delete.add_argument(
        "--dry-run", action="store_true", help="show the ACLs that would go, delete nothing"
    )
    delete.set_defaults(run=_acls_delete)


def _acl_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    parser.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OPERATION",
        help=f"repeatable: {', '.join(OPERATIONS)} (Kafka's names, any case)",
    )


def _acl_rows(resources: Any) -> list[dict[str, Any]]:
    return [
        {
            "principal": acl.principal,
            "host": acl.host,
            "operation": _name_of(OPERATIONS, int(acl.operation)),
            "permission": _name_of(PERMISSIONS, int(acl.permission_type)),
            "resource_type": _name_of(RESOURCE_TYPES, int(r.resource_type)),
            "resource_name": r.resource_name,
            "pattern_type": _name_of(PATTERN_TYPES, int(r.pattern_type)),
        }
        for r in resources
        for acl in r.acls
    ]


def _print_acls(out: Output, rows: list[dict[str, Any]]) -> None:
    if out.json:
        out.data(rows)
        return
    out.table(
        ["PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE-TYPE", "RESOURCE-NAME",
         "PATTERN-TYPE"],
        [tuple(r.values()) for r in rows],
    )  # fmt: skip


def describe_acls(c: Cluster, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = c.any().call(DESCRIBE_ACLS, body, versions=(1, 3))
    check(response.error_code, "describing ACLs", response.error_message)
    return _acl_rows(response.resources)


def _acls_list(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    rtype, name = _resource(args, RESOURCE_TYPES["any"])
    rows = describe_acls(
        c,
        {
            "resource_type_filter": rtype,
            "resource_name_filter": name,
            "pattern_type_filter": PATTERN_TYPES[args.resource_pattern_type],
            "principal_filter": args.principal,
            "host_filter": None,
            "operation": OPERATIONS["any"],
            "permission_type": PERMISSIONS["any"],
        },
    )
    _print_acls(out, rows)
    return 0


def _bindings(args: argparse.Namespace, filtering: bool) -> list[dict[str, Any]]:
    """(principal, host, operation, permission) combinations of the options, as
    kafka-acls combines them: each principal with each host and operation."""
    operations = [_operation(o) for o in args.operation] or (
        [OPERATIONS["any"]] if filtering else []
    )
    if not operations:
        raise ClientError("name at least one --operation")
    found = []
    for permission, principals, hosts in (
        ("allow", args.allow_principal, args.allow_host),
        ("deny", args.deny_principal, args.deny_host),
    ):
        for principal in principals:
            if ":" not in principal:
                raise ClientError(f"a principal is TYPE:NAME (User:alice), got {principal!r}")
            for host in hosts or (["*"] if not filtering else [None]):
                for op in operations:
                    found.append(
                        {"principal": principal, "host": host, "operation": op,
                         "permission": PERMISSIONS[permission]}
                    )  # fmt: skip
    if not found and filtering:
        found = [
            {"principal": None, "host": None, "operation": op, "permission": PERMISSIONS["any"]}
            for op in operations
        ]
    if not found:
        raise ClientError("name a principal: --allow-principal or --deny-principal")
    return found


def _acls_create(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    rtype, name = _resource(args, RESOURCE_TYPES["any"])
    assert name is not None
    creations = [
        {
            "resource_type": rtype,
            "resource_name": name,
            "resource_pattern_type": PATTERN_TYPES[args.resource_pattern_type],
            "principal": b["principal"],
            "host": b["host"],
            "operation": b["operation"],
            "permission_type": b["permission"],
        }
        for b in _bindings(args, filtering=False)
    ]
    response = c.any().call(CREATE_ACLS, {"creations": creations}, versions=(1, 3))
    for result in response.results:
        check(result.error_code, "creating ACLs", result.error_message)
    rows = [
        {
            "principal": cr["principal"],
            "host": cr["host"],
            "operation": _name_of(OPERATIONS, cr["operation"]),
            "permission": _name_of(PERMISSIONS, cr["permission_type"]),
            "resource_type": _name_of(RESOURCE_TYPES, rtype),
            "resource_name": name,
            "pattern_type": args.resource_pattern_type.upper(),
        }
        for cr in creations
    ]
    if out.json:
        out.data({"created": rows})
    else:
        out.note(f"Created {len(rows)} ACLs.")
        _print_acls(out, rows)
    return 0


def _acls_delete(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    rtype, name = _resource(args, RESOURCE_TYPES["any"])
    filters = [
        {
            "resource_type_filter": rtype,
            "resource_name_filter": name,
            "pattern_type_filter": PATTERN_TYPES[args.resource_pattern_type],
            "principal_filter": b["principal"],
            "host_filter": b["host"],
            "operation": b["operation"],
            "permission_type": b["permission"],
        }
        for b in _bindings(args, filtering=True)
    ]
    if args.dry_run:
        rows: list[dict[str, Any]] = []
        for f in filters:
            for row in describe_acls(c, f):
                if row not in rows:
                    rows.append(row)
    else:
        response = c.any().call(DELETE_ACLS, {"filters": filters}, versions=(1, 3))
        matches = []
        for result in response.filter_results:
            check(result.error_code, "deleting ACLs", result.error_message)
            for m in result.matching_acls:
                check(m.error_code, "deleting an ACL", m.error_message)
                matches.append(m)
        rows = [
            {
                "principal": m.principal,
                "host": m.host,
                "operation": _name_of(OPERATIONS, int(m.operation)),
                "permission": _name_of(PERMISSIONS, int(m.permission_type)),
                "resource_type": _name_of(RESOURCE_TYPES, int(m.resource_type)),
                "resource_name": m.resource_name,
                "pattern_type": _name_of(PATTERN_TYPES, int(m.pattern_type)),
            }
            for m in matches
        ]
    if out.json:
        out.data({"dry_run": bool(args.dry_run), "deleted": rows})
    else:
        verb = "Would delete" if args.dry_run else "Deleted"
        out.note(f"{verb} {len(rows)} ACLs.")
        _print_acls(out, rows)
    return 0


# -- SCRAM users -----------------------------------------------------------------------------


def add_user_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "users", help="SCRAM users: list, create (or change the password), delete"
    )
    commands = parser.add_subparsers(dest="users_command", required=True)
    listing = commands.add_parser(
        "list", parents=[common], help="users with SCRAM credentials and their mechanisms"
    )
    listing.add_argument("user", nargs="*", help="only these users")
    listing.set_defaults(run=_users_list)
    create = commands.add_parser(
        "create",
        parents=[common],
        help="set a user's SCRAM credential; the password from a prompt or stdin",
    )
    create.add_argument("user")
    create.add_argument("--mechanism", choices=tuple(SCRAM_MECHANISMS), default="SCRAM-SHA-256")
    create.add_argument("--iterations", type=int, default=4096, help="default 4096")
    create.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of stdin (default when it is not a terminal)",
    )
    create.set_defaults(run=_users_create)
    delete = commands.add_parser("delete", parents=[common], help="remove a user's credentials")
    delete.add_argument("user")
    delete.add_argument(
        "--mechanism",
        choices=tuple(SCRAM_MECHANISMS),
        action="append",
        help="only this mechanism's credential (default: every one the user has)",
    )
    delete.set_defaults(run=_users_delete)


def describe_users(c: Cluster, users: list[str] | None) -> list[dict[str, Any]]:
    body = {"users": None if not users else [{"name": u} for u in users]}
    response = c.any().call(DESCRIBE_USER_SCRAM_CREDENTIALS, body, versions=(0, 0))
    check(response.error_code, "describing users", response.error_message)
    found = []
    for result in response.results:
        check(result.error_code, f"describing user {result.user}", result.error_message)
        found.append(
            {
                "user": result.user,
                "credentials": [
                    {
                        "mechanism": next(
                            (m for m, v in SCRAM_MECHANISMS.items() if v == int(i.mechanism)),
                            str(int(i.mechanism)),
                        ),
                        "iterations": int(i.iterations),
                    }
                    for i in result.credential_infos
                ],
            }
        )
    return sorted(found, key=lambda u: u["user"])


def _users_list(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    found = describe_users(c, args.user)
    if out.json:
        out.data(found)
    else:
        out.table(
            ["USER", "MECHANISM", "ITERATIONS"],
            [(u["user"], i["mechanism"], i["iterations"]) for u in found for i in u["credentials"]],
        )
    return 0


def read_password(from_stdin: bool) -> str:
    """The password: typed at a prompt that does not echo it (twice, to catch a typo),
    or the first line of stdin when asked or when stdin is not a terminal."""
    if from_stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != password:
            raise ClientError("the passwords typed differ")
    if not password:
        raise ClientError("empty password")
    return password


def salted_password(mechanism: int, password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's SaltedPassword, Hi(password, salt, i): PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password.encode(), salt, iterations)


def _users_create(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    mechanism = SCRAM_MECHANISMS[args.mechanism]
    if args.iterations < 4096:
        raise ClientError("--iterations must be at least 4096, as Kafka requires")
    password = read_password(args.password_stdin)
    salt = os.urandom(32)
    body = {
        "deletions": [],
        "upsertions": [
            {
                "name": args.user,
                "mechanism": mechanism,
                "iterations": args.iterations,
                "salt": salt,
                "salted_password": salted_password(mechanism, password, salt, args.iterations),
            }
        ],
    }
    _alter_users(c, body)
    if out.json:
        out.data({"user": args.user, "mechanism": args.mechanism, "iterations": args.iterations})
    else:
        out.text(f"Set the {args.mechanism} credential of user {args.user}.")
    return 0


def _alter_users(c: Cluster, body: dict[str, Any]) -> None:
    response = c.any().call(ALTER_USER_SCRAM_CREDENTIALS, body, versions=(0, 0))
    for result in response.results:
        check(result.error_code, f"user {result.user}", result.error_message)


def _users_delete(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    mechanisms = args.mechanism
    if not mechanisms:
        found = describe_users(c, [args.user])
        mechanisms = [i["mechanism"] for u in found for i in u["credentials"]]
    # One request per mechanism: Kafka refuses two changes to one user in a request.
    for m in mechanisms:
        body = {
            "deletions": [{"name": args.user, "mechanism": SCRAM_MECHANISMS[m]}],
            "upsertions": [],
        }
        _alter_users(c, body)
    if out.json:
        out.data({"user": args.user, "deleted": mechanisms})
    else:
        out.text(f"Deleted the {', '.join(mechanisms)} credentials of user {args.user}.")
    return 0


# -- client quotas ---------------------------------------------------------------------------


def add_quota_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "quotas", help="client quotas of users and client ids, and their defaults"
    )
    commands = parser.add_subparsers(dest="quotas_command", required=True)
    entity = argparse.ArgumentParser(add_help=False)
    entity.add_argument("--user", help="a user (principal name)")
    entity.add_argument("--user-default", action="store_true", help="the default of users")
    entity.add_argument("--client", "--client-id", dest="client", help="a client id")
    entity.add_argument("--client-default", action="store_true", help="the default of client ids")
    entity.add_argument("--ip", help="an IP address (connection_creation_rate)")
    entity.add_argument("--ip-default", action="store_true", help="the default of IPs")
    describe = commands.add_parser(
        "describe",
        parents=[common, entity],
        help="quotas of the entities named (every entity when none is)",
    )
    describe.add_argument(
        "--strict", action="store_true", help="only entities with exactly the types named"
    )
    describe.set_defaults(run=_quotas_describe)
    alter = commands.add_parser(
        "alter", parents=[common, entity], help="set (--add) or remove (--delete) quotas"
    )
    alter.add_argument(
        "--add",
        action="append",
        default=[],
        metavar="KEY=VALUE[,...]",
        help="producer_byte_rate, consumer_byte_rate, request_percentage, "
        "controller_mutation_rate, connection_creation_rate",
    )
    alter.add_argument("--delete", action="append", default=[], metavar="KEY[,...]")
    alter.set_defaults(run=_quotas_alter)


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """(entity type, name or None for the default) of each entity type named."""
    found: list[tuple[str, str | None]] = []
    for kind, name, default in (
        ("user", args.user, args.user_default),
        ("client-id", args.client, args.client_default),
        ("ip", args.ip, args.ip_default),
    ):
        if name is not None and default:
            raise ClientError(f"name a {kind} or its default, not both")
        if name is not None or default:
            found.append((kind, name))
    return found


def _entity_text(entity: list[tuple[str, str | None]]) -> str:
    return ", ".join(f"{k}={'<default>' if n is None else n}" for k, n in entity)


def _quotas_describe(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    entity = _entity(args)
    components = [
        {"entity_type": k, "match_type": 1 if n is None else 0, "match": n} for k, n in entity
    ]
    response = c.any().call(
        DESCRIBE_CLIENT_QUOTAS,
        {"components": components, "strict": bool(args.strict)},
        versions=(0, 1),
    )
    check(response.error_code, "describing quotas", response.error_message)
    rows = []
    for e in response.entries or ():
        ent = [(x.entity_type, x.entity_name) for x in e.entity]
        rows.append(
            {
                "entity": {k: n for k, n in ent},
                "quotas": {v.key: v.value for v in sorted(e.values, key=lambda v: v.key)},
            }
        )
    rows.sort(key=lambda r: sorted((k, n or "") for k, n in r["entity"].items()))
    if out.json:
        out.data(rows)
    else:
        out.table(
            ["ENTITY", "QUOTA", "VALUE"],
            [
                (_entity_text(list(r["entity"].items())), k, _number(v))
                for r in rows
                for k, v in r["quotas"].items()
            ],
        )
    return 0


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _quotas_alter(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    entity = _entity(args)
    if not entity:
        raise ClientError("name an entity: --user, --client, --ip or their --*-default")
    ops: list[dict[str, Any]] = []
    for item in args.add:
        for pair in item.split(","):
            key, sep, value = pair.partition("=")
            try:
                number = float(value)
            except ValueError:
                sep = ""
            if not sep:
                raise ClientError(f"expected KEY=NUMBER, got {pair!r}")
            ops.append({"key": key.strip(), "value": number, "remove": False})
    for item in args.delete:
        ops.extend(
            {"key": k.strip(), "value": 0.0, "remove": True} for k in item.split(",") if k.strip()
        )
    if not ops:
        raise ClientError("nothing to alter: give --add or --delete")
    response = c.any().call(
        ALTER_CLIENT_QUOTAS,
        {
            "entries": [
                {"entity": [{"entity_type": k, "entity_name": n} for k, n in entity], "ops": ops}
            ],
            "validate_only": False,
        },
        versions=(0, 1),
    )
    for result in response.entries:
        check(result.error_code, f"altering quotas of {_entity_text(entity)}", result.error_message)
    if out.json:
        out.data(
            {
                "entity": {k: n for k, n in entity},
                "set": {o["key"]: o["value"] for o in ops if not o["remove"]},
                "deleted": [o["key"] for o in ops if o["remove"]],
            }
        )
    else:
        out.text(f"Altered the quotas of {_entity_text(entity)}.")
    return 0
