"""The pod's annotations as the kubelet writes them into a downward-API volume, parsed exactly.

A downwardAPI volume item with `fieldRef: {fieldPath: metadata.annotations}` is a file the kubelet writes with
`fieldpath.FormatMap` (kubernetes `pkg/fieldpath/fieldpath.go`): one `key="value"` line per annotation, keys
sorted, the key as is (`%v`: annotation keys are qualified names, never holding `=` or a newline) and the value
quoted by Go's `%q` (`strconv.Quote`), the last line without a newline. An empty map is an empty file.

Go's quoting keeps printable runes as they are and escapes the rest: `\\a \\b \\f \\n \\r \\t \\v \\\\ \\"`,
`\\xNN` for other control bytes and for bytes that are not UTF-8, `\\uNNNN`/`\\UNNNNNNNN` for non-printable runes.
[`go_unquote`] is the inverse, with the rules of Go's `strconv.Unquote` for a double-quoted string (so it also
reads the octal escapes `\\NNN` Go accepts but never writes). A line that is not `key="value"` with a valid quoted
value is reported and skipped: the other annotations still count.

The kubelet replaces the file atomically (a new timestamped directory, then a rename of the `..data` symlink), so
one `open` + `read` sees either the old or the new content, never a mixture; `trainwarden watch` writes a plain
file by rename, with the same guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Annotations", "GoQuoteError", "go_unquote", "parse_annotations"]

_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
}
_HEX = "0123456789abcdefABCDEF"
_OCTAL = "01234567"


class GoQuoteError(ValueError):
    """A string that Go's `strconv.Unquote` would reject; the message says what and at which character."""


def go_unquote(quoted: str) -> str:
    """Decodes a Go double-quoted string literal (what `%q` writes), as Go's `strconv.Unquote` does.

    Bytes written as `\\xNN` or octal escapes that do not form UTF-8 come back as lone surrogates
    (`surrogateescape`), so nothing is lost; the API server never stores such values (it keeps strings UTF-8).
    """
    if len(quoted) < 2 or quoted[0] != '"' or quoted[-1] != '"':
        raise GoQuoteError("not a double-quoted string")
    body = quoted[1:-1]
    out = bytearray()
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c == "\n":
            raise GoQuoteError(f"raw newline at character {i + 2}")
        if c == '"':
            raise GoQuoteError(f'unescaped " at character {i + 2}')
        if c != "\\":
            out += c.encode("utf-8", "surrogateescape")
            i += 1
            continue
        if i + 1 >= n:
            raise GoQuoteError(f"lone backslash at character {i + 2}")
        e = body[i + 1]
        if e in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[e].encode()
            i += 2
        elif e in "xuU":
            digits = {"x": 2, "u": 4, "U": 8}[e]
            hex_digits = body[i + 2 : i + 2 + digits]
            if len(hex_digits) != digits or any(h not in _HEX for h in hex_digits):
                raise GoQuoteError(f"\\{e} needs {digits} hex digits at character {i + 2}")
            value = int(hex_digits, 16)
            if e == "x":
                out.append(value)  # a byte, not a rune: Go's \xNN may write half of a UTF-8 sequence
            elif value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
                raise GoQuoteError(f"\\{e}{hex_digits} is not a valid Unicode code point (character {i + 2})")
            else:
                out += chr(value).encode("utf-8")
            i += 2 + digits
        elif e in _OCTAL:
            octal = body[i + 1 : i + 4]
            if len(octal) != 3 or any(o not in _OCTAL for o in octal):
                raise GoQuoteError(f"octal escape needs 3 digits at character {i + 2}")
            value = int(octal, 8)
            if value > 255:
                raise GoQuoteError(f"octal escape \\{octal} is over 255 (character {i + 2})")
            out.append(value)
            i += 4
        else:
            raise GoQuoteError(f"unknown escape \\{e} at character {i + 2}")
    return out.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Annotations:
    """What one read of the file holds: the annotations that parsed, and one message per line that did not."""

    values: dict[str, str] = field(default_factory=dict)
    errors: tuple[str, ...] = ()


def parse_annotations(text: str, source: str = "annotations") -> Annotations:
    """Parses the content of a `metadata.annotations` downward-API file (see the module documentation).

    `source` names the file in the error messages (`FILE:LINE: what`). A key that appears twice keeps its last
    value (the kubelet never writes a key twice).
    """
    values: dict[str, str] = {}
    errors: list[str] = []
    if text == "":
        return Annotations(values, ())
    for number, line in enumerate(text.split("\n"), start=1):
        if line == "" and number == 1 + text.count("\n") and text.endswith("\n"):
            continue  # a trailing newline: FormatMap trims it, a hand-written file may not
        key, sep, quoted = line.partition("=")
        if not sep or key == "":
            errors.append(f"{source}:{number}: not a key=\"value\" line: {line[:80]!r}")
            continue
        try:
            values[key] = go_unquote(quoted)
        except GoQuoteError as err:
            errors.append(f"{source}:{number}: the value of {key!r} is not a Go-quoted string: {err}")
    return Annotations(values, tuple(errors))
