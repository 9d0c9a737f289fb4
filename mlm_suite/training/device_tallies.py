"""What a run counts at every step, kept on the device and folded in batches: no kernel launch per step for the
count's running total, and no wait for the device until the total is read (docs/performance.md#what-a-run-reports).

A step's value (the real tokens of its batches, the items its loss is divided by, its loss) is already a tensor on
the device. Adding it to a running total would be one more kernel per step, a few microseconds of the host thread
that feeds the GPU, which adds up over a run of small steps; instead the values are kept as they are and folded
every :data:`FOLD_EVERY` steps, two kernels for the lot.
"""

from __future__ import annotations

import torch

__all__ = ["FOLD_EVERY", "DeviceCounts", "DeviceSum", "StepValues"]

#: Steps whose values are kept before they are folded into their total (two kernels).
FOLD_EVERY = 256


class DeviceSum:
    """The sum of numbers added one at a time, device tensors (scalars) or host numbers, read with :meth:`value`.

    With ``zeros=True`` it counts the added numbers that are 0 instead of summing them.
    """

    def __init__(self, zeros: bool = False) -> None:
        self.zeros = zeros
        self._host: int | float = 0
        self._device: torch.Tensor | None = None
        self._pending: list[torch.Tensor] = []

    def add(self, number: torch.Tensor | int | float) -> None:
        if not isinstance(number, torch.Tensor):
            self._host += int(number == 0) if self.zeros else number
            return
        self._pending.append(number)
        if len(self._pending) >= FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        if not self._pending:
            return
        stacked = torch.stack(self._pending)  # (steps,)
        self._pending = []
        total = (stacked == 0).sum() if self.zeros else stacked.sum()
        self._device = total if self._device is None else self._device + total

    def value(self) -> int | float:
        """The total: waits for the device when tensors were added."""
        self._fold()
        return self._host + (self._device.item() if self._device is not None else 0)


class DeviceCounts:
    """How often each of ``classes`` indices occurs in the index tensors added one at a time, read with :meth:`counts`."""

    def __init__(self, classes: int) -> None:
        self.classes = classes
        self._device: torch.Tensor | None = None  # (classes,)
        self._pending: list[torch.Tensor] = []  # (indices,) each

    def add(self, indices: torch.Tensor) -> None:
        self._pending.append(indices)
        if len(self._pending) >= FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        if not self._pending:
            return
        counted = torch.bincount(torch.cat(self._pending), minlength=self.classes)  # (classes,)
        self._pending = []
        self._device = counted if self._device is None else self._device + counted

    def counts(self) -> torch.Tensor:
        """The counts, ``(classes,)``, where the indices are (zeros on the CPU when none were added)."""
        self._fold()
        return self._device if self._device is not None else torch.zeros(self.classes, dtype=torch.long)


class StepValues:
    """One device scalar per optimizer step, the sum of the values added during that step (its micro-batches'), kept
    in a device buffer whose first entries :meth:`read` returns (waiting for the device)."""

    def __init__(self, device: torch.device | str) -> None:
        self._values = torch.zeros(1024, device=device)  # (steps,)
        self._pending: list[torch.Tensor] = []  # the values of the steps from self._first_pending on
        self._first_pending = 0

    def add(self, step: int, value: torch.Tensor) -> None:
        """Add ``value`` to step ``step``'s (steps are added in order; a step may get several values)."""
        last = self._first_pending + len(self._pending) - 1
        if self._pending and step == last:
            self._pending[-1] = self._pending[-1] + value  # another micro-batch of the step: one kernel
            return
        if self._pending and step != last + 1:
            self._fold()  # the kept values are consecutive steps
        if not self._pending:
            self._first_pending = step
        self._pending.append(value)
        if len(self._pending) >= FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        if not self._pending:
            return
        start, end = self._first_pending, self._first_pending + len(self._pending)
        while end > len(self._values):
            self._values = torch.cat([self._values, torch.zeros_like(self._values)])
        # Added, not copied: the last step folded may get more values afterwards.
        self._values[start:end].add_(torch.stack(self._pending).to(self._values.dtype))
        self._pending = []

    def read(self, start: int, end: int) -> list[float]:
        """Steps ``start`` to ``end`` (excluded) on the host."""
        self._fold()
        return self._values[start:end].tolist()
