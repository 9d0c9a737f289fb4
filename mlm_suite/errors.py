"""Errors the command line reports in one line, and which errors count as the user's.

``mlm-suite <command>``, ``python -m mlm_suite.jobs.<job>`` and ``examples/*.py`` all run their job
through :func:`mlm_suite.jobs.common.running.run_job`, which sorts what the job raises:

* **user errors** — :data:`USER_ERRORS`: mlm_suite's own :class:`MlmSuiteError` (a flag value the
  model cannot take, a missing data file, a package that could not be fetched), any ``ValueError``
  (bad values in flags or data files: the library raises them for exactly that, and so does
  ``transformers`` for its flags; :class:`mlm_suite.data.finetuning.tagging.UnknownTagError` is one) and any
  ``OSError`` (a file or folder that is missing or unreadable, a model name that resolves to
  nothing, no network). The command prints ``<prog>: error: <message>`` on stderr and exits with
  status 2, as argparse does for a bad flag.
* **write failures** — :class:`WriteError`: an output the machine would not store (no space left, a file-size
  limit, no permission, a read-only file system). Not the user's mistake, and no bug: the command prints
  ``<prog>: error: could not write <path>: [Errno N] <reason>`` and exits with status 1. The saves name what they
  write with :func:`writing`; a failure only a write can raise (no space, a file-size limit, a read-only file
  system) elsewhere is reported alike, naming the file when the OS does.
* anything else (``RuntimeError`` from torch, ``KeyError``, ``TypeError`` ...) is a bug or a failure
  worth reading in full: it propagates with its traceback (exit status 1).

``mlm-suite --debug <command>`` or ``MLM_SUITE_DEBUG=1`` lets user errors propagate too, with their
full traceback. Ctrl-C prints ``<prog>: interrupted`` and exits with 130.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEBUG_ENVIRONMENT_VARIABLE = "MLM_SUITE_DEBUG"


class MlmSuiteError(Exception):
    """Base of mlm_suite's errors about what it was asked to do; the command line reports them in one line."""


class UsageError(MlmSuiteError, ValueError):
    """A flag value, a combination of flags or an input file that the job cannot use."""


class FetchError(MlmSuiteError, RuntimeError):
    """Offline data or weights could not be fetched from the package index."""


class InputIndexError(UsageError, IndexError):
    """An index in an input file (e.g. a target word's position) outside what it indexes."""


class WriteError(MlmSuiteError, OSError):
    """An output that could not be written (see :func:`writing`); the command line exits with status 1."""


# What the command line reports in one line (exit status 2, or 1 for a WriteError) rather than with a traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (MlmSuiteError, ValueError, OSError)

#: OS errors that only a write raises: no space left (or quota), a file-size limit (``ulimit -f``; CPython ignores
#: SIGXFSZ, so the write fails with EFBIG instead of killing the process), a read-only file system.
ONLY_WRITES_FAIL_WITH = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
#: OS errors of a failed write: those, and no permission (which a read can raise too).
WRITE_FAILURES = (*ONLY_WRITES_FAIL_WITH, errno.EACCES, errno.EPERM)
# How Rust libraries (safetensors, tokenizers) report an I/O error in their exceptions' messages.
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def write_error(
    error: BaseException, path: str | os.PathLike | None, failures: tuple[int, ...] = WRITE_FAILURES
) -> WriteError | None:
    """``error`` as the :class:`WriteError` ``could not write <path>: [Errno N] <reason>``, or None when it is not
    an OS error among ``failures``: an ``OSError``'s ``errno``, or the ``(os error N)`` of safetensors' and tokenizers'
    messages (they name no file). ``path`` None: the file the ``OSError`` names, else "an output"."""
    if isinstance(error, WriteError):
        return error
    number = error.errno if isinstance(error, OSError) else None
    if number is None:
        match = _RUST_OS_ERROR.search(str(error))
        number = int(match.group(1)) if match else None
    if number not in failures:
        return None
    if path is None:
        path = getattr(error, "filename", None) or "an output"
    failure = WriteError(f"could not write {os.fspath(path)}: [Errno {number}] {os.strerror(number)}")
    failure.errno = number
    return failure


@contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Within the block, a write failure (:data:`WRITE_FAILURES`) raises :class:`WriteError` naming ``path`` (the
    file or folder the block writes); other errors pass unchanged. The one place a save's failure gets its message."""
    try:
        yield
    except Exception as error:
        failure = write_error(error, path)
        if failure is None or failure is error:
            raise
        raise failure from error


#: How an output folder names the staging folder a job builds its contents in (:func:`staging_folder`); one that a killed
#: run left is removed by the next run that claims the folder (:mod:`mlm_suite.jobs.common.output_folder`).
PARTIAL_PREFIX = ".partial-"


@contextmanager
def staging_folder(parent: str | os.PathLike, prefix: str) -> Iterator[Path]:
    """A new empty folder ``parent/<prefix><16 random hex digits>``, removed with everything in it when the block
    ends, normally or by any exception (Ctrl-C and SIGTERM included); what the block moved out of it stays. The one
    way an output is built beside where it goes and moved in whole, so that a failed or interrupted write leaves
    nothing half-made (a prepared data folder, a cached download, an ONNX export).

    SIGTERM raises in a job's main thread (:class:`mlm_suite.jobs.common.running.Terminated`) at whatever bytecode it comes,
    so the name is chosen before the folder is made, and the ``mkdir`` runs inside the block that removes it
    (``tempfile.mkdtemp`` returns the name only after making the folder: a signal just after it leaves the folder).
    """
    folder = Path(parent) / f"{prefix}{secrets.token_hex(8)}"
    made_here = True
    try:
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # another process's folder, by a clash of 64 random bits: never removed here
            made_here = False
            raise
        yield folder
    finally:
        if made_here:
            shutil.rmtree(folder, ignore_errors=True)


def is_user_error(error: BaseException) -> bool:
    return isinstance(error, USER_ERRORS)


def debug_enabled(debug: bool | None = None) -> bool:
    """``debug`` when given, else whether ``$MLM_SUITE_DEBUG`` is set to something other than 0/false/no/off."""
    if debug is not None:
        return debug
    return os.environ.get(DEBUG_ENVIRONMENT_VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


def error_line(prog: str, error: BaseException) -> str:
    """``<prog>: error: <message>`` (the exception's name when it carries no message). Another library's message is
    put on one line (transformers' "couldn't connect ... / Check your internet connection ..." spans two); mlm_suite's
    own keep theirs, where a second line quotes what a tool said (pip's reason for a failed download)."""
    message = str(error).strip()
    if not isinstance(error, MlmSuiteError):
        message = " ".join(line.strip() for line in message.splitlines() if line.strip())
    return f"{prog}: error: {message or type(error).__name__}"


__all__ = [
    "DEBUG_ENVIRONMENT_VARIABLE",
    "USER_ERRORS",
    "FetchError",
    "InputIndexError",
    "MlmSuiteError",
    "ONLY_WRITES_FAIL_WITH",
    "UsageError",
    "WRITE_FAILURES",
    "WriteError",
    "debug_enabled",
    "error_line",
    "is_user_error",
    "staging_folder",
    "write_error",
    "writing",
]
