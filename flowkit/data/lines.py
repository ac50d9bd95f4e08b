"""Physical lines of a data file, at most ``cap`` bytes each: a longer line is skipped in
chunks, never held whole, and stands as ``_TOO_LONG``; ``_Lines`` decodes them for
``csv.reader``, noting the lines that are not UTF-8. ``flowkit.data.read`` builds its JSONL and
CSV rows on these, so one bad or huge line costs one row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

_BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 16


_TOO_LONG = b"\0flowkit: line too long\0"
"""Stands in for a line past the cap: it can be no real line (it holds NUL bytes and no
newline), and readers report it instead of parsing it."""


def _bounded_lines(f: BinaryIO, cap: int) -> Iterator[bytes]:
    """The file's lines, each at most ``cap`` bytes; a longer one is skipped in chunks (never
    held whole) and yields ``_TOO_LONG``."""
    while True:
        raw = f.readline(cap + 1)
        if not raw:
            return
        if len(raw) > cap and not raw.endswith(b"\n"):
            while (rest := f.readline(_CHUNK)) and not rest.endswith(b"\n"):
                pass
            yield _TOO_LONG
            continue
        yield raw


def _too_long(cap: int) -> str:
    return f"the row is longer than {cap} bytes; raise FLOWKIT_MAX_ROW_BYTES if it is real data"


class _Lines:
    """Feed ``csv.reader`` one decoded physical line at a time, noting the undecodable ones.

    A bad line is decoded with ``surrogateescape`` so the csv parser keeps its place (quoted
    fields may span lines); the record that swallowed it is then reported, not the file.
    """

    def __init__(self, f: BinaryIO, cap: int) -> None:
        self._f = _bounded_lines(f, cap)
        self.number = 0
        self.bad: dict[int, int] = {}  # physical line -> 1-based byte of the first bad byte
        self.long: set[int] = set()  # physical lines past the cap

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        raw = next(self._f)
        self.number += 1
        if raw is _TOO_LONG:
            self.long.add(self.number)
            return "\n"
        if self.number == 1:
            raw = raw.removeprefix(_BOM)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.bad.setdefault(self.number, e.start + 1)
            return raw.decode("utf-8", "surrogateescape")
