"""Running a command as a user would, and what a refusal must look like (docs/command_line.md).

:func:`run_command` runs ``mlm-suite <command> ...`` in this process through :func:`mlm_suite.cli.main` (what the
console script calls) and returns an :class:`Outcome`; :func:`assert_refused` checks the rule every user error
follows: exit status 2, one line on stderr naming the problem, no traceback. :func:`held_by_another_process` makes
an output folder busy, as a concurrent run would.
"""

from __future__ import annotations

import csv
import json
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlm_suite.cli import main
from mlm_suite.jobs.output_folder import lock_path


@dataclass
class Outcome:
    status: int
    out: str
    err: str


def run_command(argv: list[str], capsys: pytest.CaptureFixture) -> Outcome:
    """``mlm-suite <argv>`` in this process: its exit status, stdout and stderr."""
    capsys.readouterr()
    try:
        status = main([str(arg) for arg in argv])
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return Outcome(status, captured.out, captured.err)


def assert_refused(outcome: Outcome, command: str, *fragments: str) -> str:
    """Exit status 2 and one error line ``mlm-suite <command>: error: ...`` holding every fragment; returns the line.

    Lines before it that are not errors (progress, ``resuming ...``) are allowed; a traceback is not.
    """
    assert "Traceback" not in outcome.err + outcome.out, outcome.err[-3000:]
    assert outcome.status == 2, (outcome.status, outcome.err[-3000:])
    errors = [line for line in outcome.err.splitlines() if ": error: " in line]
    assert len(errors) == 1, outcome.err[-3000:]
    line = errors[0]
    assert line.startswith(f"mlm-suite {command}: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def folder_files(folder: Path) -> list[str]:
    """The files under ``folder`` as sorted relative paths ([] when it does not exist)."""
    if not folder.exists():
        return []
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def write_csv(path: Path, header: list[str], rows: list[tuple]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@contextmanager
def held_by_another_process(folder: Path) -> Iterator[int]:
    """Within the block, a live process of this host holds ``folder``'s lock, as a run writing it would; yields its
    pid. The lock is gone afterwards."""
    process = subprocess.Popen(["sleep", "300"])
    lock = lock_path(folder)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"pid": process.pid, "host": socket.gethostname(), "command": ["mlm-suite"]}))
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()
        lock.unlink(missing_ok=True)


def finished_process_id() -> int:
    """The pid of a process that has ended (and been reaped): what a stale lock holds."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid
