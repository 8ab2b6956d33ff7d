"""The schema-id walk of broker-side validation: the C walk and the Python reference
agree on every input, and a batch's offending records are named by index."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.protocol.batch import encode_batch
from kbroker.schemas.validation import (
    TopicValidation,
    invalid_schema_ids,
    invalid_schema_ids_py,
    record_errors,
)


def _section(records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    batch = bytes(encode_batch(records, int(time.time() * 1000)))
    return batch[61:]


def framed(schema_id: int, payload: bytes = b"x") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


payloads = st.one_of(
    st.none(),
    st.binary(max_size=12),
    st.builds(framed, st.integers(0, 2**32 - 1), st.binary(max_size=4)),
    st.builds(framed, st.sampled_from([1, 2, 3])),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(payloads, payloads), min_size=1, max_size=20),
    st.sets(st.integers(0, 5)),
    st.integers(0, 1),
)
def test_c_and_python_walks_agree(records, valid, field):
    section = _section(records)
    expected = [
        i
        for i, (key, value) in enumerate(records)
        if not (
            (v := (key, value)[field]) is not None
            and len(v) >= 5
            and v[0] == 0
            and int.from_bytes(v[1:5], "big") in valid
        )
    ]
    assert invalid_schema_ids_py(section, len(records), field, valid) == expected
    assert invalid_schema_ids(section, len(records), field, valid) == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.integers(1, 8), st.integers(0, 1))
def test_garbage_never_crashes_and_both_walks_agree(data, count, field):
    assert invalid_schema_ids(data, count, field, {1}) == invalid_schema_ids_py(
        data, count, field, {1}
    )


@pytest.mark.parametrize("keys", [None, frozenset({7})])
def test_record_errors_names_records_across_batches(keys):
    first = bytes(encode_batch([(framed(7), framed(1)), (b"k", b"plain")], 0))
    second = bytes(encode_batch([(framed(7), None)], 0))
    errors = record_errors(first + second, TopicValidation(keys, frozenset({1})))
    key_errors = [] if keys is None else [(1, "key")]
    assert [(i, "key" if "key" in m else "value") for i, m in errors] == [
        *key_errors,
        (1, "value"),
        (0, "value"),
    ]
