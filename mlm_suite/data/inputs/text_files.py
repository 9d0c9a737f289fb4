"""Opening the jobs' text input files: every reader of CSV/TSV, JSON lines, CoNLL and plain-text corpora goes
through :func:`open_text`, so every one of them reads UTF-8 the same way and refuses anything else in one line.

A UTF-8 byte-order mark (Excel's "CSV UTF-8") is dropped rather than read into the first column name; a file that
is not UTF-8 text (Latin-1, UTF-16, a binary file) is a :class:`~mlm_suite.errors.UsageError` naming the file, the
line and the byte offset of the first byte that is not UTF-8. See docs/command_line.md.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from mlm_suite.errors import UsageError

__all__ = ["not_utf8_error", "open_text"]

_SCAN_BYTES = 1 << 16  # how much of a line the scan for the first bad byte reads at once


@contextmanager
def open_text(path: str | Path, newline: str | None = None) -> Iterator[IO[str]]:
    """``open(path)`` for reading UTF-8 text (``newline`` as for :func:`open`; ``""`` for the csv module).

    Raises:
        UsageError: the file (or what the caller read of it) is not UTF-8 text (:func:`not_utf8_error`).
    """
    try:
        with open(path, encoding="utf-8-sig", newline=newline) as handle:
            yield handle
    except UnicodeDecodeError:
        raise not_utf8_error(path) from None


def not_utf8_error(path: str | Path) -> UsageError:
    """The error for a file that is not UTF-8 text, naming its first byte that is not UTF-8 (found by a scan of the
    raw bytes: the text reader's buffer does not know the line)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, offset = 1, 0  # the line being read, bytes read before this chunk
    with open(path, "rb") as handle:
        while chunk := handle.readline(_SCAN_BYTES):
            pending = len(decoder.getstate()[0])  # the start of a character split across two chunks
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                position = offset - pending + error.start
                bad = error.object[error.start:error.start + 1]
                return UsageError(f"{path} line {line} (byte {position}): not UTF-8 text (byte 0x{bad.hex()}); "
                                  "save the file as UTF-8")
            offset += len(chunk)
            line += chunk.endswith(b"\n")
    return UsageError(f"{path}: not UTF-8 text (it ends inside a character); save the file as UTF-8")
