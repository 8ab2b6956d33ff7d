"""`kbroker schemas`: the schema registry from the command line (list, get, register,
check, delete, config, mode), over its REST API like any client.

The registry is `--registry URL`, else $KBROKER_SCHEMA_REGISTRY, else
http://127.0.0.1:8081; `--user`/`--password` for basic authentication, `--ca-file` to
trust an https registry's certificate. Failures are one line and exit status 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

DEFAULT_REGISTRY = "http://127.0.0.1:8081"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
TYPES_BY_SUFFIX = {".avsc": "AVRO", ".avro": "AVRO", ".json": "JSON", ".proto": "PROTOBUF"}


class CliError(Exception):
    pass


def add_schemas_command(sub: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--registry",
        default=os.environ.get("KBROKER_SCHEMA_REGISTRY", DEFAULT_REGISTRY),
        help="the registry's URL (default $KBROKER_SCHEMA_REGISTRY or http://127.0.0.1:8081)",
    )
    common.add_argument("--user", help="basic authentication user")
    common.add_argument("--password", help="basic authentication password")
    common.add_argument("--ca-file", help="CA certificate(s) to trust for an https registry")
    schemas = sub.add_parser("schemas", help="the schema registry: subjects, schemas, config")
    verbs = schemas.add_subparsers(dest="schemas_command", required=True)

    listing = verbs.add_parser("list", parents=[common], help="subjects, one per line")
    listing.add_argument("--deleted", action="store_true", help="soft-deleted ones too")
    listing.add_argument("--prefix", default="", help="only subjects starting with this")
    listing.set_defaults(schemas_run=_list)

    get = verbs.add_parser("get", parents=[common], help="a subject's version, or a schema by id")
    get.add_argument("subject", nargs="?", help="the subject (or --id)")
    get.add_argument("--version", default="latest", help="a version number or latest")
    get.add_argument("--id", type=int, help="the schema with this id")
    get.add_argument("--schema-only", action="store_true", help="print the schema text alone")
    get.set_defaults(schemas_run=_get)

    for name, helptext in (
        ("register", "register a schema from a file under a subject; prints its id"),
        ("check", "whether a schema from a file is compatible with a subject (exit 1 if not)"),
    ):
        verb = verbs.add_parser(name, parents=[common], help=helptext)
        verb.add_argument("subject")
        verb.add_argument("file", type=Path, help="the schema (.avsc, .json, .proto)")
        verb.add_argument(
            "--type", choices=("AVRO", "JSON", "PROTOBUF"), help="default: from the suffix"
        )
        verb.add_argument(
            "--reference",
            action="append",
            default=[],
            metavar="NAME=SUBJECT:VERSION",
            help="a schema it refers to (repeatable)",
        )
        verb.add_argument("--normalize", action="store_true")
        if name == "check":
            verb.add_argument("--version", default="latest", help="check against this version")
        verb.set_defaults(schemas_run=_register if name == "register" else _check)

    delete = verbs.add_parser("delete", parents=[common], help="soft-delete a subject or version")
    delete.add_argument("subject")
    delete.add_argument("--version", help="only this version")
    delete.add_argument("--permanent", action="store_true", help="after a soft delete: remove")
    delete.set_defaults(schemas_run=_delete)

    config = verbs.add_parser("config", parents=[common], help="show or set a compatibility level")
    config.add_argument("subject", nargs="?", help="a subject (default: the global level)")
    config.add_argument("--set", metavar="LEVEL", help="NONE, BACKWARD, FULL_TRANSITIVE, ...")
    config.add_argument("--delete", action="store_true", help="remove the subject's level")
    config.set_defaults(schemas_run=_config)

    mode = verbs.add_parser("mode", parents=[common], help="show or set the mode")
    mode.add_argument("subject", nargs="?", help="a subject (default: the global mode)")
    mode.add_argument("--set", metavar="MODE", help="READWRITE, READONLY or IMPORT")
    mode.add_argument("--force", action="store_true", help="IMPORT over existing schemas")
    mode.set_defaults(schemas_run=_mode)


def run_schemas_command(args: argparse.Namespace) -> int:
    try:
        return int(args.schemas_run(args))
    except CliError as exc:
        print(f"kbroker schemas {args.schemas_command}: {exc}", file=sys.stderr)
        return 1


# -- the client ---------------------------------------------------------------------------


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    url = args.registry.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", CONTENT_TYPE)
    request.add_header("Accept", CONTENT_TYPE)
    if args.user is not None:
        token = base64.b64encode(f"{args.user}:{args.password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            error = json.loads(raw)
            raise CliError(f"error {error['error_code']}: {error['message']}") from None
        except (ValueError, KeyError, TypeError):
            raise CliError(f"HTTP {exc.code} from {url}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(f"cannot reach the registry at {args.registry}: {reason}") from None
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _schema_body(args: argparse.Namespace) -> dict[str, Any]:
    try:
        text = args.file.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    schema_type = args.type or TYPES_BY_SUFFIX.get(args.file.suffix.lower(), "AVRO")
    body: dict[str, Any] = {"schema": text}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    refs = []
    for item in args.reference:
        name, sep, where = item.partition("=")
        subject, sep2, version = where.rpartition(":")
        if not sep or not sep2 or not name or not subject:
            raise CliError(f"--reference {item!r} is not NAME=SUBJECT:VERSION")
        try:
            refs.append({"name": name, "subject": subject, "version": int(version)})
        except ValueError:
            raise CliError(f"--reference {item!r}: the version is not a number") from None
    if refs:
        body["references"] = refs
    return body


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


# -- the verbs ----------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    query = {"deleted": "true"} if args.deleted else {}
    if args.prefix:
        query["subjectPrefix"] = args.prefix
    path = "/subjects" + ("?" + urllib.parse.urlencode(query) if query else "")
    for subject in _call(args, "GET", path):
        print(subject)
    return 0


def _get(args: argparse.Namespace) -> int:
    if args.id is not None:
        found = _call(args, "GET", f"/schemas/ids/{args.id}")
    elif args.subject:
        found = _call(args, "GET", f"/subjects/{_q(args.subject)}/versions/{_q(args.version)}")
    else:
        raise CliError("name a subject or give --id")
    if args.schema_only:
        print(found["schema"])
    else:
        _print_json(found)
    return 0


def _register(args: argparse.Namespace) -> int:
    suffix = "?normalize=true" if args.normalize else ""
    answer = _call(
        args, "POST", f"/subjects/{_q(args.subject)}/versions{suffix}", _schema_body(args)
    )
    print(answer["id"])
    return 0


def _check(args: argparse.Namespace) -> int:
    query = "?verbose=true" + ("&normalize=true" if args.normalize else "")
    path = f"/compatibility/subjects/{_q(args.subject)}/versions/{_q(args.version)}{query}"
    answer = _call(args, "POST", path, _schema_body(args))
    if answer.get("is_compatible"):
        print("compatible")
        return 0
    print("incompatible")
    for message in answer.get("messages") or []:
        print(f"  {message}")
    return 1


def _delete(args: argparse.Namespace) -> int:
    path = f"/subjects/{_q(args.subject)}"
    if args.version:
        path += f"/versions/{_q(args.version)}"
    if args.permanent:
        path += "?permanent=true"
    answer = _call(args, "DELETE", path)
    print(" ".join(str(v) for v in answer) if isinstance(answer, list) else answer)
    return 0


def _config(args: argparse.Namespace) -> int:
    path = "/config" + (f"/{_q(args.subject)}" if args.subject else "")
    if args.set and args.delete:
        raise CliError("--set and --delete: choose one")
    if args.set:
        answer = _call(args, "PUT", path, {"compatibility": args.set.upper()})
        print(answer["compatibility"])
    elif args.delete:
        _call(args, "DELETE", path)
        print("deleted")
    else:
        suffix = "?defaultToGlobal=true" if args.subject else ""
        print(_call(args, "GET", path + suffix)["compatibilityLevel"])
    return 0


def _mode(args: argparse.Namespace) -> int:
    path = "/mode" + (f"/{_q(args.subject)}" if args.subject else "")
    if args.set:
        suffix = "?force=true" if args.force else ""
        print(_call(args, "PUT", path + suffix, {"mode": args.set.upper()})["mode"])
    else:
        suffix = "?defaultToGlobal=true" if args.subject else ""
        print(_call(args, "GET", path + suffix)["mode"])
    return 0
