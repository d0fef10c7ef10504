"""Writes annotation files the way the kubelet does, for the tests.

- go_quote: Go's `%q` (`strconv.Quote`), checked against output of real Go in tests/golden (test_annotations.py);
- format_map: `fieldpath.FormatMap` (sorted `key="value"` lines, no final newline);
- AtomicVolume: a downward-API volume directory as the kubelet's AtomicWriter maintains it: the payload in a
  timestamped directory `..2026_01_02_03_04_05.NNNN`, the symlink `..data` to it, and the user-visible
  `annotations` -> `..data/annotations`; an update writes a new timestamped directory, points `..data_tmp` at it,
  renames `..data_tmp` over `..data` (the atomic step) and removes the old directory.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import unicodedata
from pathlib import Path

_NAMED = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _go_is_print(ch: str) -> bool:
    # Go's unicode.IsPrint: categories L, M, N, P, S and the ASCII space.
    return ch == " " or unicodedata.category(ch)[0] in "LMNPS"


def go_quote(value: str) -> str:
    """`fmt.Sprintf("%q", value)`; lone surrogates U+DC80..U+DCFF stand for raw bytes (surrogateescape)."""
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")  # a byte that is not UTF-8
        elif _go_is_print(ch):
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def format_map(values: dict[str, str]) -> str:
    """`fieldpath.FormatMap`: what the kubelet writes for `fieldPath: metadata.annotations`."""
    return "\n".join(f"{key}={go_quote(values[key])}" for key in sorted(values))


def request_value(request_id: int, reason: str = "test", requested_at: str = "2026-01-02T03:04:05Z") -> str:
    """The annotation value trainwarden writes (compact JSON, keys in this order)."""
    return json.dumps({"id": request_id, "reason": reason, "requestedAt": requested_at}, separators=(",", ":"))


class AtomicVolume:
    """A downward-API volume directory holding the file `annotations`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.file = directory / "annotations"
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, annotations: dict[str, str]) -> None:
        payload = format_map(annotations).encode("utf-8", "surrogateescape")
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        new_dir = Path(tempfile.mkdtemp(prefix=stamp, dir=self.directory))
        os.chmod(new_dir, 0o755)
        (new_dir / "annotations").write_bytes(payload)
        os.chmod(new_dir / "annotations", 0o644)
        data = self.directory / "..data"
        old_dir = (self.directory / os.readlink(data)) if data.is_symlink() else None
        tmp = self.directory / "..data_tmp"
        if tmp.is_symlink():
            tmp.unlink()
        os.symlink(new_dir.name, tmp)
        os.rename(tmp, data)  # the atomic step
        if not self.file.is_symlink():
            os.symlink("..data/annotations", self.file)
        if old_dir is not None:
            (old_dir / "annotations").unlink()
            old_dir.rmdir()


def write_plain(path: Path, annotations: dict[str, str]) -> None:
    """What `trainwarden watch` does in local mode: the same format, replaced by rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(format_map(annotations).encode("utf-8", "surrogateescape"))
    os.replace(tmp, path)
