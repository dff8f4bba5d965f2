"""The API's JSON parser: depth and size limits, NUL characters refused with their place."""

import io
import json

import pytest
from django.test import override_settings
from rest_framework.exceptions import ParseError

from portal.parsers import (
    MAX_JSON_DEPTH,
    JSONParser,
    PayloadTooLarge,
    json_depth_exceeds,
    nul_at,
)


def parse(text: str):
    return JSONParser().parse(io.BytesIO(text.encode()), "application/json", {})


def nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


def test_depth_counts_arrays_and_objects_but_not_brackets_in_strings():
    assert not json_depth_exceeds(nested(MAX_JSON_DEPTH), MAX_JSON_DEPTH)
    assert json_depth_exceeds(nested(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)
    objects = '{"a":' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1)
    assert json_depth_exceeds(objects, MAX_JSON_DEPTH)
    in_string = json.dumps({"text": "[" * 5000, "quoted": '\\"[[[[' * 100})
    assert not json_depth_exceeds(in_string, MAX_JSON_DEPTH)
    assert parse(in_string)["text"] == "[" * 5000


def test_parser_refuses_deep_json_before_decoding_it():
    assert parse(nested(MAX_JSON_DEPTH)) == json.loads(nested(MAX_JSON_DEPTH))
    for depth in (MAX_JSON_DEPTH + 1, 1000, 100_000):
        with pytest.raises(ParseError) as caught:
            parse(nested(depth))
        assert str(caught.value.detail) == "JSON nested deeper than 64 levels"


def test_parser_refuses_a_body_over_the_upload_limit():
    body = json.dumps({"name": "x" * 200})
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100):
        with pytest.raises(PayloadTooLarge) as caught:
            parse(body)
    assert caught.value.status_code == 413
    assert "larger than 100 bytes" in str(caught.value.detail)
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=len(body)):
        assert parse(body) == {"name": "x" * 200}


def test_nul_is_found_with_its_place():
    assert nul_at({"pods": [{"flavors": ["a100", "h\x00"]}]}) == "pods[0].flavors[1]"
    assert nul_at({"labels": {"te\x00am": "x"}}) == "a key of labels ('te\\x00am')"
    assert nul_at("a\x00") == "the body"
    assert nul_at({"name": "ok", "n": [1, None, True]}) is None
    with pytest.raises(ParseError) as caught:
        parse('{"queue": "rd/vision\\u0000"}')
    assert str(caught.value.detail) == (
        "NUL character (U+0000) in queue: text may not contain NUL")
    # the escape of a backslash followed by u0000 is no NUL
    assert parse('{"queue": "\\\\u0000"}') == {"queue": "\\u0000"}
