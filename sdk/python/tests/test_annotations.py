"""The downward-API annotations file: parsed exactly as the kubelet (Go's %q) writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubelet_files import format_map, go_quote
from trainwarden.annotations import GoQuoteError, go_unquote, parse_annotations

GOLDEN = Path(__file__).parent / "golden"
RAW_BYTES_KEY = "test.example/raw-bytes"
RAW_BYTES = b"\xff\xfe ok \xc3".decode("utf-8", "surrogateescape")


def golden_map() -> dict[str, str]:
    values: dict[str, str] = json.loads((GOLDEN / "annotations.json").read_text())
    values[RAW_BYTES_KEY] = RAW_BYTES  # added by formatmap.go (JSON cannot hold it)
    return values


def test_parses_what_go_wrote() -> None:
    """tests/golden/annotations was written by real Go (formatmap.go): every escape Go produces comes back."""
    text = (GOLDEN / "annotations").read_bytes().decode("utf-8")
    parsed = parse_annotations(text, "golden")
    assert parsed.errors == ()
    assert parsed.values == golden_map()
    request = json.loads(parsed.values["trainwarden.dev/checkpoint-request"])
    assert request["id"] == 1767225600123
    assert request["reason"].startswith('ETA passes the deadline "Fri 18:00"\nby 2h \\ ')


def test_the_tests_writer_matches_go() -> None:
    """The helper the other tests write kubelet files with produces Go's bytes exactly."""
    expected = (GOLDEN / "annotations").read_bytes()
    assert format_map(golden_map()).encode("utf-8", "surrogateescape") == expected


@pytest.mark.parametrize(
    ("quoted", "value"),
    [
        ('""', ""),
        ('"plain"', "plain"),
        ('"\\a\\b\\f\\n\\r\\t\\v\\\\\\""', '\a\b\f\n\r\t\v\\"'),
        ('"\\x41\\x7f"', "A\x7f"),
        ('"\\u00e9\\U0001f680"', "\u00e9\U0001f680"),
        ('"\\u00E9"', "\u00e9"),  # Go reads upper-case hex too
        ('"\\101\\377"', "A" + b"\xff".decode("utf-8", "surrogateescape")),  # octal: Go reads it, never writes it
        ('"\\xc3\\xa9"', "\u00e9"),  # \x escapes are bytes: two of them make one UTF-8 character
        ('"é \'single\' `tick`"', "é 'single' `tick`"),
    ],
)
def test_go_unquote(quoted: str, value: str) -> None:
    assert go_unquote(quoted) == value


@pytest.mark.parametrize(
    ("quoted", "problem"),
    [
        ("plain", "not a double-quoted string"),
        ('"', "not a double-quoted string"),
        ('"a"b"', 'unescaped "'),
        ('"a\nb"', "raw newline"),
        ('"a\\"', "lone backslash"),
        ('"\\q"', "unknown escape \\q"),
        ('"\\\'"', "unknown escape \\'"),  # \' is valid only in a Go rune literal
        ('"\\x4"', "\\x needs 2 hex digits"),
        ('"\\u12g4"', "\\u needs 4 hex digits"),
        ('"\\ud800"', "not a valid Unicode code point"),
        ('"\\U00110000"', "not a valid Unicode code point"),
        ('"\\400"', "over 255"),
        ('"\\12"', "octal escape needs 3 digits"),
    ],
)
def test_go_unquote_refuses_what_go_refuses(quoted: str, problem: str) -> None:
    with pytest.raises(GoQuoteError, match=problem.replace("\\", "\\\\")):
        go_unquote(quoted)


@pytest.mark.parametrize("value", ["", "x", '"', "\\", "\n", "a\x00b", "\u2028", "\U000f0000", "日本", "\ud800x"])
def test_round_trip(value: str) -> None:
    if value == "\ud800x":
        value = b"\xed\xa0\x80x".decode("utf-8", "surrogateescape")  # bytes Go would write as \xed\xa0\x80
    assert go_unquote(go_quote(value)) == value


def test_malformed_lines_are_reported_and_skipped() -> None:
    text = "\n".join(
        [
            'a="1"',
            "no equals sign",
            'b=unquoted',
            'c="bad \\q escape"',
            '="no key"',
            'trainwarden.dev/checkpoint-request="{\\"id\\":7}"',
        ]
    )
    parsed = parse_annotations(text, "/etc/trainwarden/annotations")
    assert parsed.values == {"a": "1", "trainwarden.dev/checkpoint-request": '{"id":7}'}
    assert [e.split(": ", 1)[0] for e in parsed.errors] == [
        "/etc/trainwarden/annotations:2",
        "/etc/trainwarden/annotations:3",
        "/etc/trainwarden/annotations:4",
        "/etc/trainwarden/annotations:5",
    ]
    assert "unknown escape \\q" in parsed.errors[2]


def test_empty_file_and_trailing_newline() -> None:
    assert parse_annotations("").values == {}
    assert parse_annotations('a="1"\n').values == {"a": "1"}
    assert parse_annotations('a="1"\n').errors == ()
    assert parse_annotations('a="1"\n\nb="2"').errors != ()  # an empty line inside is not the kubelet's
