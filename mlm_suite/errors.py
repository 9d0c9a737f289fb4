"""Errors the command line reports in one line, and which errors count as the user's.

``mlm-suite <command>``, ``python -m mlm_suite.jobs.<job>`` and ``examples/*.py`` all run their job
through :func:`mlm_suite.jobs.distributed.run_job`, which sorts what the job raises:

* **user errors** — :data:`USER_ERRORS`: mlm_suite's own :class:`MlmSuiteError` (a flag value the
  model cannot take, a missing data file, a package that could not be fetched), any ``ValueError``
  (bad values in flags or data files: the library raises them for exactly that, and so does
  ``transformers`` for its flags; :class:`mlm_suite.data.tagging.UnknownTagError` is one) and any
  ``OSError`` (a file or folder that is missing or unreadable, a model name that resolves to
  nothing, no network). The command prints ``<prog>: error: <message>`` on stderr and exits with
  status 2, as argparse does for a bad flag.
* anything else (``RuntimeError`` from torch, ``KeyError``, ``TypeError`` ...) is a bug or a failure
  worth reading in full: it propagates with its traceback (exit status 1).

``mlm-suite --debug <command>`` or ``MLM_SUITE_DEBUG=1`` lets user errors propagate too, with their
full traceback. Ctrl-C prints ``<prog>: interrupted`` and exits with 130.
"""

from __future__ import annotations

import os

DEBUG_ENVIRONMENT_VARIABLE = "MLM_SUITE_DEBUG"


class MlmSuiteError(Exception):
    """Base of mlm_suite's errors about what it was asked to do; the command line reports them in one line."""


class UsageError(MlmSuiteError, ValueError):
    """A flag value, a combination of flags or an input file that the job cannot use."""


class FetchError(MlmSuiteError, RuntimeError):
    """Offline data or weights could not be fetched from the package index."""


class InputIndexError(UsageError, IndexError):
    """An index in an input file (e.g. a target word's position) outside what it indexes."""


# What the command line reports in one line (exit status 2) rather than with a traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (MlmSuiteError, ValueError, OSError)


def is_user_error(error: BaseException) -> bool:
    return isinstance(error, USER_ERRORS)


def debug_enabled(debug: bool | None = None) -> bool:
    """``debug`` when given, else whether ``$MLM_SUITE_DEBUG`` is set to something other than 0/false/no/off."""
    if debug is not None:
        return debug
    return os.environ.get(DEBUG_ENVIRONMENT_VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


def error_line(prog: str, error: BaseException) -> str:
    """``<prog>: error: <message>`` (the exception's name when it carries no message)."""
    return f"{prog}: error: {str(error).strip() or type(error).__name__}"


__all__ = [
    "DEBUG_ENVIRONMENT_VARIABLE",
    "USER_ERRORS",
    "FetchError",
    "InputIndexError",
    "MlmSuiteError",
    "UsageError",
    "debug_enabled",
    "error_line",
    "is_user_error",
]
