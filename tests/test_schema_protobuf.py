"""Protobuf schemas between `.proto` text and serialized FileDescriptorProtos: what a
Confluent client registers is stored as text, and the text is served back as a
descriptor a DescriptorPool builds and encodes with exactly as the original."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from kbroker.schemas.errors import RegistryError
from kbroker.schemas.formats import parse
from kbroker.schemas.protobuf import serialized
from kbroker.schemas.protobuf_descriptor import descriptor_from_text, text_from_descriptor

ORDER = """syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
message Order {
  string id = 1;
  repeated Line lines = 2;
  map<string, int64> totals = 3;
  optional int32 priority = 4;
  oneof payment { string card = 5; Cash cash = 6; }
  google.protobuf.Timestamp at = 7;
  Status status = 8;
  reserved 10 to 12, 20;
  reserved "old";
  message Line { string sku = 1; uint32 qty = 2; }
  message Cash { double amount = 1; }
  enum Status { NEW = 0; PAID = 1; }
}
"""


def _order_class(data: bytes):
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(data))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.v1.Order"))


def _sample(cls):
    msg = cls(id="o-1", priority=0, card="4111")
    msg.lines.add(sku="a", qty=2)
    msg.totals["eur"] = 12
    msg.at.seconds = 1_700_000_000
    msg.status = 1
    return msg


def test_text_to_descriptor_to_text_is_stable_and_encodes_alike():
    data = descriptor_from_text(ORDER, "shop.proto")
    text = text_from_descriptor(data)
    assert descriptor_from_text(text, "shop.proto") == data
    original = _order_class(data)
    again = _order_class(descriptor_from_text(text, "shop.proto"))
    wire = _sample(original).SerializeToString()
    assert _sample(again).SerializeToString() == wire
    decoded = again.FromString(wire)
    assert decoded.HasField("priority") and decoded.WhichOneof("payment") == "card"
    assert dict(decoded.totals) == {"eur": 12}


def test_a_registered_descriptor_is_stored_as_text_and_served_back():
    data = descriptor_from_text(ORDER, "shop.proto")
    registered = parse("PROTOBUF", base64.b64encode(data).decode(), ())
    assert registered.canonical().startswith('syntax = "proto3";')
    served = base64.b64decode(serialized(registered.canonical()))
    wire = _sample(_order_class(data)).SerializeToString()
    assert _sample(_order_class(served)).SerializeToString() == wire
    # the same descriptor again is the same stored text: one schema, one id
    assert parse("PROTOBUF", base64.b64encode(data).decode(), ()).canonical() == (
        registered.canonical()
    )


def test_garbage_descriptor_is_invalid_schema():
    with pytest.raises(RegistryError) as caught:
        parse("PROTOBUF", base64.b64encode(b"\xff\xff\xff garbage").decode(), ())
    assert caught.value.code == 42201
