"""mlm_suite.training.device_tallies: per-step values kept on the device and folded in batches."""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mlm_suite.training.device_tallies import FOLD_EVERY, DeviceCounts, DeviceSum, StepValues


class CountOps(TorchDispatchMode):
    """Counts the ATen ops (kernels on a device) run while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def test_a_device_sum_adds_tensors_and_host_numbers_across_folds():
    values = [torch.tensor(index % 7) for index in range(3 * FOLD_EVERY + 5)]
    total = DeviceSum()
    for value in values:
        total.add(value)
    total.add(11)
    assert total.value() == sum(int(value) for value in values) + 11
    total.add(torch.tensor(4))  # after a read, the sum goes on
    assert total.value() == sum(int(value) for value in values) + 15



def test_device_counts_count_each_index_across_folds_and_reads():
    counts = DeviceCounts(4)
    assert counts.counts().tolist() == [0, 0, 0, 0]  # nothing added yet
    tags = [torch.tensor([index % 3, 2]) for index in range(2 * FOLD_EVERY + 3)]
    for tag in tags:
        counts.add(tag)
    expected = torch.bincount(torch.cat(tags), minlength=4).tolist()
    assert counts.counts().tolist() == expected and expected[3] == 0
    counts.add(torch.tensor([3, 3]))  # after a read, the counts go on
    assert counts.counts().tolist() == [*expected[:3], 2]


def test_a_device_sum_of_zeros_counts_the_zeros():
    zeros = DeviceSum(zeros=True)
    values = [index % 3 for index in range(FOLD_EVERY + 10)]
    for value in values:
        zeros.add(torch.tensor(value))
    zeros.add(0)
    zeros.add(5)
    assert zeros.value() == values.count(0) + 1


def test_adding_a_step_value_runs_no_kernel_until_a_fold():
    total, losses = DeviceSum(), StepValues("cpu")
    values = [torch.tensor(float(index)) for index in range(FOLD_EVERY)]
    with CountOps() as counter:
        for step, value in enumerate(values[:-1]):
            total.add(value)
            losses.add(step, value)
    assert counter.ops == 0
    with CountOps() as counter:
        total.add(values[-1])  # the FOLD_EVERY-th value: stacked and summed at once
    assert 0 < counter.ops <= 3


def test_step_values_sum_each_steps_micro_batches_also_across_a_fold():
    losses = StepValues("cpu")
    expected = []
    for step in range(3 * FOLD_EVERY + 1000):  # past the buffer's first 1,024 steps
        parts = [torch.tensor(0.5 * step), torch.tensor(1.0)] if step % 3 == 0 else [torch.tensor(float(step))]
        for part in parts:
            losses.add(step, part)
        expected.append(sum(float(part) for part in parts))
    assert losses.read(0, len(expected)) == expected
    # A step that gets a value after its first values were folded: added to them, not written over them.
    losses = StepValues("cpu")
    for step in range(FOLD_EVERY):
        losses.add(step, torch.tensor(1.0))
    losses.add(FOLD_EVERY - 1, torch.tensor(2.0))
    assert losses.read(FOLD_EVERY - 2, FOLD_EVERY) == [1.0, 3.0]


def test_step_values_keep_a_non_finite_value_at_its_step_and_skip_gaps():
    losses = StepValues("cpu")
    losses.add(0, torch.tensor(1.0))
    losses.add(1, torch.tensor(float("nan")))
    losses.add(4, torch.tensor(2.0))  # steps 2 and 3 got nothing
    read = losses.read(0, 5)
    assert read[0] == 1.0 and math.isnan(read[1]) and read[2:] == [0.0, 0.0, 2.0]
