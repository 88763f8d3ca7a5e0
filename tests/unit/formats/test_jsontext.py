"""formats/metadata/jsontext.py writes what json.dumps writes, character for character."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.formats.metadata import jsontext

# What json.loads can make: the only input jsontext sees (consolidated entries).
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def reference(value: Any, indent: int | None, sort_keys: bool) -> str:
    return json.dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=True, allow_nan=True)


@settings(max_examples=400)
@given(value=values, indent=st.sampled_from([None, 0, 1, 2, 4]), sort_keys=st.booleans())
def test_same_text_as_json_dumps(value: Any, indent: int | None, sort_keys: bool) -> None:
    assert jsontext.dumps(value, indent, sort_keys) == reference(value, indent, sort_keys)


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        {"a": {}, "b": [], "c": [[]], "d": [{}]},
        {"fill_value": math.nan, "x": math.inf, "y": -math.inf, "z": -0.0},
        {"name": 'température ☃ \u2028 "quoted" \\ \n tab\t'},
        {"big": 10**30, "neg": -(10**30), "t": True, "f": False, "n": None},
        {"b": 1, "a": 2, "c": {"z": 1, "y": [3, 2, 1]}},
        [1.5, 1e16, 1e-7, 123456789.0, 0.1],
    ],
)
@pytest.mark.parametrize("indent", [2, 4])
@pytest.mark.parametrize("sort_keys", [False, True])
def test_table(value: Any, indent: int, sort_keys: bool) -> None:
    assert jsontext.dumps(value, indent, sort_keys) == reference(value, indent, sort_keys)


def test_what_json_loads_never_makes_is_left_to_json_dumps() -> None:
    # A tuple (json.dumps writes it as a list) and non-string keys (json.dumps
    # converts them): not handled here, so json.dumps answers, with its result.
    for value in ({"t": (1, 2)}, {1: "a", None: "b"}, {"s": {1.5: 2}}):
        assert jsontext.dumps(value, 2, False) == reference(value, 2, False)
    with pytest.raises(TypeError):
        jsontext.dumps({"s": {1, 2}}, 2, False)  # as json.dumps: not serialisable
