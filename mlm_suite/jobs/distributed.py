"""Running a job's ``main`` from the command line: one-line user errors, the command's name, and a clean end
when it runs as one of several processes (docs/command_line.md).

The Trainer joins a torch.distributed process group and never leaves it; with gloo a process can then abort at
interpreter exit, after the job succeeded (a collective's worker thread freeing Python objects during shutdown).
:func:`end_process_group` therefore ends every job with a barrier, whose in-flight collectives this module keeps
until exit so that the main thread frees them. It runs once per process, where ``main`` is called, because
``mlm-suite seeds`` and the NER job's HF baseline run several Trainers in one process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch.distributed as dist

from mlm_suite.errors import debug_enabled, error_line, is_user_error
from mlm_suite.jobs.output_folder import output_folders_released

# The job's final barrier, freed with this module when the interpreter exits (see above).
_final_barrier: dist.Work | None = None

# The command a job runs as (``mlm-suite finetune-ner``), for its argument parser and error lines.
_PROG: ContextVar[str | None] = ContextVar("mlm_suite_command_prog", default=None)


def end_process_group() -> None:
    """Wait until every process has finished the job, then destroy the default process group.

    Does nothing outside a distributed run (one process, or no group was created).
    """
    global _final_barrier
    if not (dist.is_available() and dist.is_initialized()):
        return
    # Not accelerate's wait_for_everyone(): it does not return the barrier, which must be kept.
    _final_barrier = dist.barrier(async_op=True)
    _final_barrier.wait()
    dist.destroy_process_group()


def command_prog() -> str | None:
    """The command the running job was started as, for its argument parser's ``prog``.

    ``mlm-suite <command>`` when run from the ``mlm-suite`` command line, ``python -m <module>`` when
    run with ``python -m``, else None (argparse then names the script, e.g. ``finetune_ner.py``).
    """
    return _PROG.get()


@contextmanager
def running_as(prog: str | None) -> Iterator[None]:
    """Within the block, :func:`command_prog` is ``prog`` (e.g. for a job that ``mlm-suite seeds`` runs)."""
    token = _PROG.set(prog)
    try:
        yield
    finally:
        _PROG.reset(token)


def _module_prog(main: Callable) -> str | None:
    """``python -m <module>`` when ``main`` belongs to the module that ``python -m`` runs, else None."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(main, "__module__", None) == "__main__" and spec is not None and spec.name:
        return f"python -m {spec.name.removesuffix('.__main__')}"
    return None


def _exit_after_error(status: int) -> None:
    """Exit with ``status``; in a multi-process run, without waiting for the process group's threads.

    Python's own exit would free the process group during interpreter shutdown, which can abort the
    process (see above) and replace the status by SIGABRT's; the launcher stops the other processes.
    """
    if dist.is_available() and dist.is_initialized():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)
    raise SystemExit(status) from None


def run_job(
    main: Callable[[Sequence[str] | None], Any],
    argv: Sequence[str] | None = None,
    *,
    prog: str | None = None,
    debug: bool | None = None,
) -> Any:
    """``main(argv)``, then :func:`end_process_group`; returns what ``main`` returned.

    ``prog`` names the command for the job's argument parser and for error lines (default: see
    :func:`command_prog`). A user error (:data:`mlm_suite.errors.USER_ERRORS`) prints
    ``<prog>: error: <message>`` on stderr and exits with status 2 (``SystemExit``), Ctrl-C prints
    ``<prog>: interrupted`` and exits with 130; other exceptions propagate with their traceback, and so
    does every exception with ``debug`` (default: ``$MLM_SUITE_DEBUG``). ``SystemExit`` (argparse's
    errors and ``--help``) passes through. The output folders ``main`` claimed
    (:func:`~mlm_suite.jobs.output_folder.claim_output_folder`) are released however it ends.

    The barrier runs only after success: when ``main`` fails in one process, the launcher stops the
    others, and a barrier here would wait for a process that never arrives.
    """
    prog = prog or _module_prog(main)
    token = _PROG.set(prog)
    try:
        with output_folders_released():  # before the exit below, which may skip every finally
            result = main(argv)
    except (Exception, KeyboardInterrupt) as error:
        if debug_enabled(debug) or not (is_user_error(error) or isinstance(error, KeyboardInterrupt)):
            raise
        name = prog or os.path.basename(sys.argv[0]) or "mlm-suite"
        interrupted = isinstance(error, KeyboardInterrupt)
        print(f"{name}: interrupted" if interrupted else error_line(name, error), file=sys.stderr)
        _exit_after_error(130 if interrupted else 2)
    finally:
        _PROG.reset(token)
    end_process_group()
    return result


__all__ = ["command_prog", "end_process_group", "run_job", "running_as"]
