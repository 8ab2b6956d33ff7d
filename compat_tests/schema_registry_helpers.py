"""Talking to kbroker's schema registry in tests: plain HTTP calls and a Protobuf message
class built at run time (no protoc needed)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from compat_tests.waiting import eventually

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def call(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    timeout: float = 20.0,
    auth: str | None = None,
    context: Any = None,
) -> tuple[int, Any]:
    """(status, parsed JSON body) of one request; JSON errors come back as their body."""
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    request = urllib.request.Request(url + path, data=data, method=method)
    request.add_header("Content-Type", CONTENT_TYPE)
    if auth:
        request.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        status = exc.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode()


def basic(user: str, password: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def wait_serving(url: str, timeout: float = 20.0, node: Any = None, **kwargs: Any) -> None:
    """Wait until the registry at `url` lists subjects; on timeout the failure carries the
    tail of `node`'s log (a BrokerProcess), which says why it does not serve."""
    try:
        eventually(
            lambda: call(url, "GET", "/subjects", timeout=2, **kwargs)[0] == 200,
            timeout=timeout,
            what=f"a schema registry at {url}",
            interval=0.1,
        )
    except AssertionError as exc:
        if node is None:
            raise
        raise AssertionError(f"{exc}\n{node.log_tail()}") from exc


def avro_record(name: str, fields: list[tuple[str, Any]] | list[dict[str, Any]]) -> str:
    return json.dumps({"type": "record", "name": name, "fields": fields})


def protobuf_message_class(package: str, name: str, fields: list[tuple[str, int, int]]) -> Any:
    """A message class for `package.name` with (field name, number, descriptor type)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto()
    proto.name = f"{package.replace('.', '/')}/{name.lower()}.proto"
    proto.package = package
    proto.syntax = "proto3"
    message = proto.message_type.add()
    message.name = name
    for field_name, number, ftype in fields:
        f = message.field.add()
        f.name = field_name
        f.number = number
        f.type = ftype
        f.label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
