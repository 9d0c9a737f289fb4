"""Running a job's ``main`` from the command line: one-line user errors, the command's name, an end by Ctrl-C or
SIGTERM that cleans up as an error does, and a clean end when it runs as one of several processes
(docs/command_line.md).

The Trainer joins a torch.distributed process group and never leaves it; with gloo a process can then abort at
interpreter exit, after the job succeeded (a collective's worker thread freeing Python objects during shutdown).
:func:`end_process_group` therefore ends every job with a barrier, whose in-flight collectives this module keeps
until exit so that the main thread frees them. It runs once per process, where ``main`` is called, because
``mlm-suite seeds`` and the NER job's HF baseline run several Trainers in one process.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch.distributed as dist

from mlm_suite.errors import ONLY_WRITES_FAIL_WITH, WriteError, debug_enabled, error_line, is_user_error, write_error
from mlm_suite.jobs.common.output_folder import output_folders_released

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


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a scheduler's or a launcher's stop) raised in the job's main thread as Ctrl-C raises
    KeyboardInterrupt, so that the job ends as it does on Ctrl-C: what it cleans up on its way out (a staging
    folder, its output folder's lock) is cleaned up, where the signal's default action would leave it."""


# The process whose main thread raises Terminated on SIGTERM (``_sigterm_raises_terminated``), else None.
_terminated_raiser: int | None = None


def _block_sigterm_across_fork() -> None:
    if _terminated_raiser == os.getpid():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _unblock_sigterm_in_parent() -> None:
    if _terminated_raiser == os.getpid():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _default_sigterm_in_child() -> None:
    # A worker forked from the job (datasets' pools, data-loader workers) is stopped by its parent with SIGTERM and
    # must die of it. Python's own handler, inherited, would lose a SIGTERM that comes before the child first runs:
    # the interpreter clears the signals caught before its after-fork set-up, and the pool's parent then waits for
    # the worker forever. Blocked across the fork, the signal stays pending until the default action is back.
    # Ctrl-C reaches the terminal's whole process group: the worker ignores it (its parent stops it), so that the
    # job's one line is all that is printed, not each worker's KeyboardInterrupt traceback.
    if _terminated_raiser is not None and _terminated_raiser != os.getpid():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


os.register_at_fork(before=_block_sigterm_across_fork, after_in_parent=_unblock_sigterm_in_parent,
                    after_in_child=_default_sigterm_in_child)


@contextmanager
def _sigterm_raises_terminated() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in this process's main thread; outside the main thread
    (where no handler can be set) nothing changes. A process forked meanwhile (a ``datasets`` or data-loader
    worker) gets SIGTERM's default action back, so it dies of SIGTERM at once, as its parent stops it that way,
    even when the signal comes before it first ran, and ignores Ctrl-C, which its parent handles."""
    global _terminated_raiser
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    previous_raiser, _terminated_raiser = _terminated_raiser, os.getpid()
    try:
        yield
    finally:
        _terminated_raiser = previous_raiser
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _interruption(error: BaseException | None) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that ``error`` is, or that it was raised while handling (a library's clean-up that
    fails once interrupted, as the worker pool of ``datasets.map`` does), else None."""
    while error is not None and not isinstance(error, KeyboardInterrupt):
        error = error.__context__
    return error


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
    ``<prog>: error: <message>`` on stderr and exits with status 2 (``SystemExit``); a write failure
    (:class:`~mlm_suite.errors.WriteError`, or an error only a write raises) prints ``<prog>: error: could not write
    ...`` and exits with status 1; Ctrl-C prints ``<prog>: interrupted`` and exits with 130, SIGTERM
    ``<prog>: terminated`` and 143 (:class:`Terminated`); other exceptions propagate with their traceback, and so
    does every exception with ``debug`` (default: ``$MLM_SUITE_DEBUG``). ``SystemExit`` (argparse's
    errors and ``--help``) passes through. The output folders ``main`` claimed
    (:func:`~mlm_suite.jobs.common.output_folder.claim_output_folder`) are released however it ends.

    The barrier runs only after success: when ``main`` fails in one process, the launcher stops the
    others, and a barrier here would wait for a process that never arrives.
    """
    prog = prog or _module_prog(main)
    token = _PROG.set(prog)
    try:
        # Both end before the exit below, which may skip every finally.
        with output_folders_released(), _sigterm_raises_terminated():
            result = main(argv)
    except (Exception, KeyboardInterrupt) as error:
        # A full disk or a file-size limit hit by a write no save named (mlm_suite.errors.writing) is one too.
        error = write_error(error, None, ONLY_WRITES_FAIL_WITH) or error
        interruption = _interruption(error)
        if debug_enabled(debug) or not (is_user_error(error) or interruption is not None):
            raise
        name = prog or os.path.basename(sys.argv[0]) or "mlm-suite"
        if interruption is not None:  # the status a shell gives a process its signal ended: 128 + the signal
            terminated = isinstance(interruption, Terminated)
            print(f"{name}: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
            _exit_after_error(128 + (signal.SIGTERM if terminated else signal.SIGINT))
        print(error_line(name, error), file=sys.stderr)
        _exit_after_error(1 if isinstance(error, WriteError) else 2)
    finally:
        _PROG.reset(token)
    end_process_group()
    return result


__all__ = ["Terminated", "command_prog", "end_process_group", "run_job", "running_as"]
