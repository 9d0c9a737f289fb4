"""Batches that cross from a data-loader worker to the training process in one transfer.

A ``DataLoader`` worker hands each tensor of a batch to the main process through its own shared-memory file, and
the main process fetches every file with a new authenticated connection to the worker: ~0.5 ms of the training
process's time per tensor, on the host thread that feeds the GPU. A batch of four tensors then costs the training
loop ~2 ms per step before the step even starts. Copied into one buffer in the worker, the same batch arrives in
one transfer, as views of that buffer: through the worker's pipe when it is small (0.2–0.4 ms for up to
:data:`PIPE_BYTES`), else as one shared-memory file (0.8–1.8 ms up to 4 MiB; the pipe's copies would cost more).
``python benchmarks/bench_job_throughput.py --overhead`` measures both against torch's transfer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils.data import get_worker_info

_ALIGNMENT = 64  # bytes: every tensor starts where a view of any dtype may start
#: Batches of at most this many bytes cross through the worker's pipe; larger ones as one shared-memory file.
PIPE_BYTES = 256 * 1024

# (key, dtype, shape, byte offset) of each tensor of a batch in its buffer
Layout = list[tuple[str, torch.dtype, tuple[int, ...], int]]


def _packable(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.layout == torch.strided and value.device.type == "cpu"


def buffer_layout(batch: Mapping[str, Any]) -> tuple[Layout, int]:
    """Where each dense CPU tensor of ``batch`` lies in one buffer, and the buffer's size in bytes."""
    layout, size = [], 0
    for key, value in batch.items():
        if _packable(value):
            layout.append((key, value.dtype, tuple(value.shape), size))
            size += -(-value.numel() * value.element_size() // _ALIGNMENT) * _ALIGNMENT
    return layout, size


def views_of(buffer: torch.Tensor | bytearray, layout: Layout, others: Mapping[str, Any]) -> dict[str, Any]:
    """The batch whose tensors are ``layout``'s views of ``buffer`` (uint8), with its other values ``others``."""
    if isinstance(buffer, bytearray):  # unpickled from a pipe (torch.frombuffer refuses an empty one)
        buffer = torch.frombuffer(buffer, dtype=torch.uint8) if buffer else torch.empty(0, dtype=torch.uint8)
    batch = dict(others)
    for key, dtype, shape, offset in layout:
        numel = torch.Size(shape).numel()
        batch[key] = buffer[offset : offset + numel * dtype.itemsize].view(dtype).view(shape)
    return batch


def in_one_buffer(batch: Mapping[str, Any]) -> tuple[torch.Tensor, Layout, dict[str, Any]]:
    """``batch``'s tensors copied into one ``(bytes,)`` uint8 buffer, their layout in it, and its other values."""
    layout, size = buffer_layout(batch)
    buffer = torch.empty(size, dtype=torch.uint8)
    for key, view in views_of(buffer, layout, {}).items():
        view.copy_(batch[key])
    return buffer, layout, {key: value for key, value in batch.items() if not _packable(value)}


class PipedBatch:
    """A batch in one buffer that pickles as the buffer's bytes and unpickles as the batch (views of a copy of the
    buffer): what a worker sends through its pipe instead of a shared-memory file."""

    def __init__(self, buffer: torch.Tensor, layout: Layout, others: dict[str, Any]) -> None:
        self.buffer, self.layout, self.others = buffer, layout, others

    def __reduce__(self) -> tuple[Callable, tuple]:
        return views_of, (bytearray(self.buffer.numpy()), self.layout, self.others)


class OneBufferCollator:
    """``collate``, whose batches made in a loader worker cross to the training process in one transfer.

    In the training process itself (``dataloader_num_workers=0``) it returns ``collate``'s batch unchanged.
    """

    def __init__(self, collate: Callable[[list], Mapping[str, Any]]) -> None:
        self.collate = collate

    def __call__(self, features: list) -> Any:
        batch = self.collate(features)
        if get_worker_info() is None or not isinstance(batch, Mapping):
            return batch
        buffer, layout, others = in_one_buffer(batch)
        if not layout:
            return batch
        return PipedBatch(buffer, layout, others) if len(buffer) <= PIPE_BYTES else views_of(buffer, layout, others)
