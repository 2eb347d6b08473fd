"""torchburn's strict JSON reader from Python: JSONTestSuite-style accept (y_), reject (n_) and
implementation-defined (i_) cases, with Python's json module as the oracle for accepted documents."""
from __future__ import annotations

import json
import math
import time

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

from torchburn.files import json_parse  # noqa: E402

ACCEPT = {
    "y_array_empty": b"[]",
    "y_array_nested": b"[[[]],[{}]]",
    "y_object_basic": b'{"a":1,"b":[true,false,null],"c":{"d":"e"}}',
    "y_object_same_key_different_case": b'{"a":1,"A":2}',
    "y_structure_whitespace": b" \t\n\r[ 1 ,\n2 ]\r\n ",
    "y_scalar_true": b"true",
    "y_scalar_null": b"null",
    "y_scalar_string": b'"x"',
    "y_string_escapes": b'"\\"\\\\\\/\\b\\f\\n\\r\\t"',
    "y_string_unicode_escape": b'"\\u00e9\\u20AC"',
    "y_string_surrogate_pair": b'"\\ud83d\\ude00"',
    "y_string_utf8": "\"é€😀\U0010ffff\"".encode(),
    "y_string_escaped_nul": b'"a\\u0000b"',
    "y_string_del": b'"\x7f"',
    "y_number_zero": b"0",
    "y_number_negative_zero": b"-0",
    "y_number_fraction": b"0.5",
    "y_number_exponents": b"[1e10,1E+2,1e-2,-1.5E-3,0e0]",
    "y_number_int64_min": b"-9223372036854775808",
    "y_number_int64_max": b"9223372036854775807",
    "y_number_max_double": b"1.7976931348623157e308",
    "y_number_min_subnormal": b"5e-324",
    "y_number_many_digits": b"3.14159265358979323846264338327950288",
    "i_number_underflow": b"1e-400",
    "i_object_key_with_nul": b'{"a\\u0000":1}',
    "i_string_noncharacter": '"\uffff"'.encode(),
}

REJECT = {
    "n_empty": (b"", "empty input"),
    "n_array_trailing_comma": (b"[1,]", "line 1, column 4"),
    "n_array_leading_comma": (b"[,1]", "expected a value"),
    "n_array_unclosed": (b"[1", "expected ',' or ']'"),
    "n_object_trailing_comma": (b'{"a":1,}', "expected a string key"),
    "n_object_missing_colon": (b'{"a" 1}', "expected ':'"),
    "n_object_non_string_key": (b"{1:1}", "expected a string key"),
    "n_object_single_quote": (b"{'a':1}", "expected a string key"),
    "n_object_duplicate_key": (b'{"a":1,"a":2}', 'duplicate key "a"'),
    "n_object_duplicate_key_large": (
        ("{" + ",".join(f'"k{i}":{i}' for i in range(50)) + ',"k17":0}').encode(),
        'duplicate key "k17"',
    ),
    "n_number_leading_zero": (b"01", "leading zeros"),
    "n_number_plus": (b"+1", "unexpected '+'"),
    "n_number_leading_dot": (b".5", "unexpected '.'"),
    "n_number_trailing_dot": (b"1.", "a digit must follow '.'"),
    "n_number_exponent_empty": (b"1e", "exponent"),
    "n_number_hex": (b"0x1", "unexpected 'x'"),
    "n_number_nan": (b"NaN", "unexpected 'N'"),
    "n_number_infinity": (b"Infinity", "unexpected 'I'"),
    "n_number_minus_infinity": (b"-Infinity", "a digit must follow '-'"),
    "i_number_huge_exponent": (b"1e400", "out of the range of a double"),
    "n_string_unescaped_newline": (b'"a\nb"', "control character 0x0a"),
    "n_string_bad_escape": (b'"\\x41"', "invalid escape"),
    "n_string_unterminated": (b'"abc', "unterminated string"),
    "n_string_short_unicode": (b'"\\u12"', "4 hex digits"),
    "i_string_lone_high_surrogate": (b'"\\ud800"', "not followed by a low surrogate"),
    "i_string_lone_low_surrogate": (b'"\\udc00"', "lone low surrogate"),
    "n_string_invalid_utf8": (b'"\xff"', "invalid UTF-8 byte 0xff"),
    "n_string_overlong": (b'"\xc0\xaf"', "invalid UTF-8"),
    "n_string_utf8_surrogate": (b'"\xed\xa0\x80"', "invalid UTF-8"),
    "n_string_above_10ffff": (b'"\xf4\x90\x80\x80"', "invalid UTF-8"),
    "n_string_truncated_utf8": (b'"\xe2\x82"', "invalid UTF-8"),
    "i_structure_bom": (b"\xef\xbb\xbf{}", "byte order mark"),
    "n_structure_trailing_garbage": (b"[] x", "after the document"),
    "n_structure_two_values": (b"1 2", "after the document"),
    "n_structure_comment": (b"[1]//c", "after the document"),
    "n_structure_nul_after": (b"[1]\x00", "byte 0x00 after the document"),
    "n_literal_truncated": (b"tru", "unexpected 't'"),
    "n_literal_capital": (b"True", "unexpected 'T'"),
    "n_structure_deep": (b"[" * 129 + b"]" * 129, "nesting deeper than 128 levels"),
    "n_error_position": (b"[1,\n x]", "line 2, column 2"),
}


@pytest.mark.parametrize("name", sorted(ACCEPT))
def test_accept(name: str) -> None:
    text = ACCEPT[name]
    got = json_parse(text)
    expected = json.loads(text.decode("utf-8"))
    assert got == expected or (isinstance(expected, float) and math.isclose(got, expected))
    assert type(got) is type(expected)


@pytest.mark.parametrize("name", sorted(REJECT))
def test_reject(name: str) -> None:
    text, message = REJECT[name]
    with pytest.raises(ValueError, match=None) as info:
        json_parse(text)
    assert message in str(info.value), str(info.value)


def test_integers_stay_exact() -> None:
    assert json_parse(b"9007199254740993") == 9007199254740993
    assert isinstance(json_parse(b"9223372036854775808"), float)  # beyond int64: a double
    assert json_parse(b"-0.0") == 0.0 and math.copysign(1.0, json_parse(b"-0.0")) == -1.0


def test_limits() -> None:
    with pytest.raises(ValueError, match="more than the limit of 4 bytes"):
        json_parse(b"[1,2,3]", max_bytes=4)
    assert json_parse(b"[[1]]", max_depth=2) == [[1]]
    with pytest.raises(ValueError, match="nesting deeper than 2 levels"):
        json_parse(b"[[[1]]]", max_depth=2)


# lone surrogates are not valid Unicode scalar values: Python's json accepts them, we reject them
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_matches_python_json(value: object, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert json_parse(text) == json.loads(text)


def test_parse_time_10mb() -> None:
    vocab = {f"\u0120tok{i}\u00e9n": i for i in range(210_000)}
    merges = [f"\u0120to k{i}xyz" for i in range(210_000)]
    text = json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": merges}}).encode()
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        doc = json_parse(text)
        best = min(best, time.perf_counter() - start)
    python_start = time.perf_counter()
    json.loads(text)
    python_time = time.perf_counter() - python_start
    assert doc["model"]["vocab"]["\u0120tok1234\u00e9n"] == 1234
    print(
        f"\njson: {len(text) / 1e6:.1f} MB parsed into Python objects in {best * 1e3:.1f} ms "
        f"(json.loads: {python_time * 1e3:.1f} ms); the C parse alone is timed by tests/c/test_json.c"
    )
