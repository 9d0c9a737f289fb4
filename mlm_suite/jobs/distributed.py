"""Ending a job cleanly when it runs as one of several processes (``accelerate launch``, torchrun).

The Trainer joins a torch.distributed process group and never leaves it. With the gloo backend
(CPU) a process can then crash or hang *after* the job succeeded, while it exits:

* gloo runs collectives in worker threads, and the thread that ran one may free it (its tensors,
  hence their Python objects, which takes the GIL) just after the Python call returned. If the
  interpreter is shutting down by then, CPython ends that thread inside a C++ destructor and the
  process aborts: "terminate called without an active exception".
* ``destroy_process_group()`` alone does not help: it neither frees the group nor stops its
  threads. DDP's reducer still holds the group, and when Python frees the reducer at exit, the
  group's destructor (run with the GIL held) waits for a worker thread that waits for the GIL.

:func:`end_process_group` therefore ends the job with a barrier, the point after which no process
uses the group (the main process alone saves the model and writes the model card; the others must
not leave before it is done). A gloo barrier holds the collectives still in flight when it starts,
and whoever frees the barrier frees them. The worker thread that ran the barrier lets go of it
right away; this module keeps it until the interpreter exits, so that the main thread frees them.

This runs once per process, where a job's ``main`` is called from the command line
(``mlm-suite <command>`` and ``examples/*.py``), not inside the jobs: ``mlm-suite seeds`` and the
NER job's HF baseline run several Trainers in one process, and each needs the group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.distributed as dist

# The job's final barrier, freed with this module when the interpreter exits (see above).
_final_barrier: dist.Work | None = None


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


def run_job(main: Callable[[Sequence[str] | None], Any], argv: Sequence[str] | None = None) -> Any:
    """``main(argv)``, then :func:`end_process_group`; returns what ``main`` returned.

    Only after success: when ``main`` raises in one process, the launcher stops the others, and
    a barrier here would wait for a process that never arrives.
    """
    result = main(argv)
    end_process_group()
    return result


__all__ = ["end_process_group", "run_job"]
