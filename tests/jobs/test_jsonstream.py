"""jsonstream.walk: one array streamed out of a JSON object, whatever the chunk boundaries."""

from __future__ import annotations

import json

import pytest

from apps.jobs.adapters.jsonstream import JsonStreamError, stream, walk

DOC = {"schemaVersion": 1, "baseTimeNanoseconds": 1790857026000000000,
       "distributedInfo": {"rank": 3, "pg_config": [{"ranks": [0, 1]}]},
       "traceEvents": [{"name": "ProfilerStep#2", "ts": 12.5}, {"name": "é→ü", "ts": -1},
                       [1, 2], "x", 7],
       "traceName": "/tmp/rank3.json"}


def _walk(data: bytes, size: int):
    items = []
    chunks = iter([data[i:i + size] for i in range(0, len(data), size)])
    return walk(chunks, "traceEvents", items.extend), items


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1 << 20])
def test_it_streams_the_array_and_returns_the_rest_at_any_chunk_size(size):
    # size 1 and 2 split the big number and the multi-byte characters across chunks
    members, items = _walk(json.dumps(DOC, ensure_ascii=False).encode(), size)
    assert items == DOC["traceEvents"]
    assert members == {**DOC, "traceEvents": 5}


@pytest.mark.parametrize(("data", "not_json", "message"), [
    (b'{"traceEvents": [{"a": 1}, {"a": ', True, "Expecting value"),
    (b'{"traceEvents": [1 2]}', True, "expected ']'"),
    (b'{"a": 1', True, "truncated"),
    (b"\xff\xfe{}", True, "not UTF-8"),
    (b"garbage", True, "starts with 'g'"),
    (b"", True, "no data"),
    (b"[1, 2]", False, "not an object"),
    (b'{"traceEvents": {"a": 1}}', False, "not a list"),
    # issue 27: a RecursionError and a ValueError escaped before
    (b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", False, "nested too"),
    (b'{"x": ' + b'{"a": ' * 100_000, False, "nested too deeply"),
    (b'{"traceEvents": [' + b"9" * 5000 + b"]}", False, "a number too long to read"),
])
def test_bad_input_says_what_is_wrong(data, not_json, message):
    with pytest.raises(JsonStreamError, match=message) as caught:
        _walk(data, 4)
    assert caught.value.not_json is not_json


# --- An array inside nested objects (Prometheus's data.result, issue 29) ----------------

ANSWER = {"status": "success",
          "data": {"resultType": "matrix",
                   "result": [{"metric": {"gpu": "0"}, "values": [[1.5, "1"], [2.5, "NaN"]]},
                              {"metric": {}, "values": []}],
                   "stats": {"x": 1}},
          "warnings": ["partial"]}


@pytest.mark.parametrize("size", [1, 3, 16, 1 << 20])
def test_it_streams_an_array_inside_nested_objects(size):
    data = json.dumps(ANSWER).encode()
    chunks = iter([data[i:i + size] for i in range(0, len(data), size)])
    members: dict[str, object] = {}
    items = [item for batch in stream(chunks, "result", members, inside=("data",))
             for item in batch]
    assert items == ANSWER["data"]["result"]
    assert members == {"status": "success", "resultType": "matrix", "result": 2,
                       "stats": {"x": 1}, "warnings": ["partial"]}


def test_a_nested_member_that_is_not_an_object_is_refused():
    with pytest.raises(JsonStreamError, match="'data' is not an object") as caught:
        list(stream(iter([b'{"data": [1]}']), "result", inside=("data",)))
    assert caught.value.not_json is False
