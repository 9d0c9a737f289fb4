"""A CPU stand-in for CUDA's host-device synchronisation: record, during a job's plain training steps, every op that
would make the host wait for the device on a GPU, with the line of our (or transformers') code that called it.
See docs/performance.md#no-host-synchronisation-in-a-training-step.

On CUDA a step synchronises when the host needs a value the device computes: a scalar read (``.item()``, ``bool()``,
``int()``, ``.tolist()``), an output whose size depends on values (``nonzero``, boolean-mask indexing), or a copy
to host memory. On CPU none of these wait, so the recorder watches for the calls themselves.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import TrainerCallback

# The aten ops that synchronise on CUDA whatever their arguments. _local_scalar_dense is every scalar read
# (.item(), bool(), int(), float(), `if tensor:`); the others give an output whose size the host must learn.
# Left out, though they look alike: searchsorted, cumsum, index_select, index_add, scatter_reduce, where (sizes
# known in advance) and masked_fill (shape kept); index/index_put_ count only with a boolean index.
ALWAYS_SYNCING = frozenset({
    "aten._local_scalar_dense.default",
    "aten.nonzero.default",
    "aten.nonzero_static.default",
    "aten.masked_select.default",
    "aten.equal.default",
    "aten._unique2.default",
    "aten.unique_dim.default",
    "aten.unique_consecutive.default",
    "aten.bincount.default",
})
# repeat_interleave with tensor repeats learns its output size from the repeats unless given output_size.
SIZED_BY_VALUES = frozenset({"aten.repeat_interleave.Tensor", "aten.repeat_interleave.self_Tensor"})
BOOLEAN_INDEXED = frozenset({"aten.index.Tensor", "aten.index_put.default", "aten.index_put_.default"})
# Python-level reads that copy a tensor to the host. On a CPU tensor they are free and dispatch no aten op
# (.tolist() and .numpy() read memory directly, .cpu() returns the tensor itself), so they are caught here.
# Not seen on CPU: .to(device) or .to("cpu") (the training device is the host, so the two look the same) and
# non_blocking=False copies to the device (on CUDA they wait for the queued steps).
HOST_COPIES = frozenset({"tolist", "numpy", "cpu"})
HERE = os.path.abspath(__file__)
TORCH = os.path.dirname(torch.__file__) + os.sep


@dataclass(frozen=True)
class HostSync:
    op: str
    frame: str  # file:line function of the first caller outside torch

    def __str__(self) -> str:
        return f"{self.op} at {self.frame}"


def _caller() -> str:
    """The innermost frame that is neither torch's nor this module's: where the synchronising call was written."""
    for frame in reversed(traceback.extract_stack()):
        filename = os.path.abspath(frame.filename)
        if filename != HERE and not filename.startswith(TORCH):
            return f"{frame.filename}:{frame.lineno} {frame.name}"
    return "<torch internals>"


def _in_optimizer() -> bool:
    """True inside torch.optim: its step counters are host tensors (unless capturable), read without a wait on CUDA."""
    optim = os.path.join(TORCH, "optim") + os.sep
    return any(os.path.abspath(frame.filename).startswith(optim) for frame in traceback.extract_stack())


def _has_boolean_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in indices or ())


class _AtenRecorder(TorchDispatchMode):
    def __init__(self, found: list[HostSync]):
        super().__init__()
        self.found = found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        syncs = (
            name in ALWAYS_SYNCING
            or (name in SIZED_BY_VALUES and kwargs.get("output_size") is None)
            or (name in BOOLEAN_INDEXED and _has_boolean_index(args))
        )
        # The optimizer's scalar reads of its host-side step counter (see _in_optimizer).
        if syncs and not (name == "aten._local_scalar_dense.default" and _in_optimizer()):
            self.found.append(HostSync(name, _caller()))
        return func(*args, **kwargs)


class _HostCopyRecorder(TorchFunctionMode):
    def __init__(self, found: list[HostSync]):
        super().__init__()
        self.found = found

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_COPIES:
            self.found.append(HostSync(f"Tensor.{name}", _caller()))
        return func(*args, **(kwargs or {}))


@contextmanager
def recording_host_syncs(found: list[HostSync]) -> Iterator[list[HostSync]]:
    """Append to ``found`` every call made inside the block that would synchronise on CUDA."""
    with _HostCopyRecorder(found), _AtenRecorder(found):
        yield found


@dataclass
class HostSyncRecorder(TrainerCallback):
    """Records host synchronisations during the training steps that neither log, evaluate nor save.

    Steps up to ``warmup_steps`` are left out (first-step set-up such as the optimizer's state is allowed to read
    values). Whether a step logs, evaluates or saves is known only at its end, so each watched step's findings
    are kept only when the step ends without asking for any of the three.
    """

    warmup_steps: int = 1
    found: list[HostSync] = field(default_factory=list)
    steps_watched: int = 0
    _step: list[HostSync] = field(default_factory=list)
    _recording: object = None

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step >= self.warmup_steps:
            self._step = []
            self._recording = recording_host_syncs(self._step)
            self._recording.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self._recording is None:
            return
        self._recording.__exit__(None, None, None)
        self._recording = None
        if not (control.should_log or control.should_evaluate or control.should_save):
            self.steps_watched += 1
            self.found.extend(self._step)

    def report(self) -> str:
        """One line per distinct synchronisation, most frequent first."""
        counts: dict[HostSync, int] = {}
        for sync in self.found:
            counts[sync] = counts.get(sync, 0) + 1
        return "\n".join(f"{count:4d} x {sync}" for sync, count in sorted(counts.items(), key=lambda item: -item[1]))
