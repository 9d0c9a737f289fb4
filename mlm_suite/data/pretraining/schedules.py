"""What each optimizer step trains on: a masking-rate schedule and a batch-size warmup, as pure functions of the step.

* :class:`MaskRateSchedule`: the share of tokens selected for MLM at optimizer step ``s`` of ``T``: ``constant``,
  ``linear`` or ``cosine`` from a start to an end rate, ``step`` (the start rate for the first half, then the end
  rate; MosaicBERT's ``mlm_scheduling.py`` has the same four), or phases such as mmBERT's inverse schedule
  ``0.3,0.15@0.6,0.05@0.9`` (30 % from the start, 15 % from 60 % of the steps, 5 % from 90 %; an ``@`` value of 1 or
  more is a step number).
* :class:`BatchSizeWarmup`: rows per optimizer step growing linearly in the tokens trained on (rows × row length,
  every process together), from ``min_rows`` to ``max_rows`` per device and micro-batch, as ModernBERT warms up its
  batch size.

**How a step's rate reaches the collator.** A masking rate that changes per optimizer step must reach the collator
wherever it runs: in every training process and in every dataloader worker, which hold copies of the collator and
collate batches ahead of time (prefetching). Instead of telling the collator the current step (which a worker's copy
would see late, or never), the step travels with the rows. :class:`ScheduledBatchSampler`, which runs in the main
thread of each training process, knows which optimizer step every micro-batch it yields belongs to, so it yields row
indices tagged ``(row index, data epoch, masking rate of that step)``; :class:`TaggedRows` (the dataset the loader
reads) turns a tag into the row's features plus ``epoch`` and ``mlm_probability`` fields, which
:class:`~mlm_suite.data.pretraining.masking.DataCollatorForMaskedLM` reads per example. A batch collated early, in any
worker, is therefore masked at the rate of the step it is trained in: no lag, no shared state. A resumed run skips the
micro-batches already trained by iterating the same deterministic sampler from the start of the epoch (the Trainer's
``skip_first_batches``), so it trains on the same rows, with the same rates and masks, as the uninterrupted run.

The sampler has three layouts:

* **per epoch** (no batch-size warmup): exactly the batches the Trainer would draw itself: each data epoch is a
  permutation seeded by ``seed + epoch`` (accelerate's ``SeedableRandomSampler``), cut into micro-batches of
  ``per_device_train_batch_size`` and dealt to the processes as accelerate's ``BatchSamplerShard`` deals them. A
  constant schedule therefore trains exactly like the job without one.
* **stream** (batch-size warmup): the permutations of successive epochs end to end, read ``rows(s)`` rows per step,
  with no partial batch at epoch ends. The Trainer sees the whole run as a single epoch of ``max_steps ×
  gradient_accumulation_steps`` micro-batches (so ``--max_steps`` or ``--max_train_minutes`` is needed); each row
  still carries its data epoch, so its mask changes with every pass over the data. A step's rows are split evenly:
  micro-batch ``m`` of process ``p`` is the ``(m × processes + p)``-th block of ``rows(s)`` rows of the step.
* **token budget** (``max_tokens``, no batch-size warmup): each data epoch's permutation packed into micro-batches of
  at most ``max_tokens`` tokens (:func:`~mlm_suite.data.pretraining.token_budget.token_budget_batches`), drawn in the
  order of the permutation's rank of their first row; batch ``b`` goes to process ``b mod processes``, and when the batches
  do not divide evenly the first ones are dealt again (as accelerate's ``even_batches``), so every process takes the
  same number of steps.

The loss stays a mean over the labelled tokens of the whole step whatever its row count: the Trainer divides the
summed token losses by ``num_items_in_batch``, the labelled tokens of all the step's micro-batches (and processes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import BatchSampler, Dataset

from mlm_suite.data.pretraining.token_budget import token_budget_batches
from mlm_suite.errors import UsageError

__all__ = [
    "MASK_SCHEDULE_KINDS",
    "BatchSizeWarmup",
    "MaskRateSchedule",
    "ScheduledBatchSampler",
    "TaggedRows",
    "permutation",
]

MASK_SCHEDULE_KINDS = ("constant", "linear", "cosine", "step")
STEP_SWITCH = 0.5  # the "step" schedule switches to the end rate half-way, as MosaicBERT's StepScheduler by default

Tag = tuple[int, int, float | None]  # (row index, data epoch, masking rate or None for the collator's own)


def _rate(value: float, name: str) -> float:
    if not 0.0 < value < 1.0:
        raise UsageError(f"{name} must lie in (0, 1), got {value:g}")
    return float(value)


@dataclass(frozen=True)
class MaskRateSchedule:
    """The masking rate at each optimizer step: a pure function of the step and the run's total steps.

    ``phases``: ``(at, rate)`` pairs, ``at`` increasing from 0; an ``at`` below 1 is a fraction of the total steps,
    one of 1 or more a step number. ``kind`` ``"phases"`` holds the rate of the last phase begun; the others
    interpolate ``start`` → ``end`` over the run (``progress = step / total``).
    """

    kind: str
    start: float
    end: float
    phases: tuple[tuple[float, float], ...] = ()

    @classmethod
    def parse(cls, spec: str, start: float, end: float | None = None) -> MaskRateSchedule:
        """``--mlm_probability_schedule spec`` with ``--mlm_probability start`` and ``--mlm_probability_end end``
        (rates in (0, 1), checked with the other flags).

        Raises UsageError (a one-line message naming the flag) for anything else.
        """
        spec = (spec or "constant").strip()
        if spec in MASK_SCHEDULE_KINDS:
            if spec == "constant":
                if end is not None and end != start:
                    raise UsageError("--mlm_probability_end needs --mlm_probability_schedule linear, cosine or step")
                return cls("constant", start, start)
            if end is None:
                raise UsageError(f"--mlm_probability_schedule {spec} needs --mlm_probability_end (the final rate)")
            phases = ((0.0, start), (STEP_SWITCH, end)) if spec == "step" else ()
            return cls(spec, start, end, phases)
        if end is not None:
            raise UsageError("--mlm_probability_end does not apply to a list of phases; the phases give every rate")
        return cls.from_phases(spec)

    @classmethod
    def from_phases(cls, spec: str) -> MaskRateSchedule:
        usage = (
            f"--mlm_probability_schedule {spec}: give constant, linear, cosine, step, or phases RATE[@AT],... such as "
            "0.3,0.15@0.6,0.05@0.9 (AT below 1: a fraction of the steps; 1 or more: a step)"
        )
        phases: list[tuple[float, float]] = []
        for index, part in enumerate(item.strip() for item in spec.split(",")):
            rate_text, _, at_text = part.partition("@")
            try:
                rate = float(rate_text)
                at = float(at_text) if at_text else (0.0 if index == 0 else math.nan)
            except ValueError:
                raise UsageError(usage) from None
            if math.isnan(at) or at < 0 or (at >= 1 and not at.is_integer()):
                raise UsageError(usage)
            phases.append((at, _rate(rate, f"--mlm_probability_schedule rate {rate_text}")))
        if phases[0][0] != 0.0:
            raise UsageError(f"--mlm_probability_schedule {spec}: the first phase starts at step 0 (drop its @)")
        ats = [at for at, _ in phases[1:]]
        if any(at < 1 for at in ats) and any(at >= 1 for at in ats):
            raise UsageError(f"--mlm_probability_schedule {spec}: give every @ as a fraction of the steps or every one as a step")
        if any(later <= earlier for earlier, later in zip([0.0, *ats], ats)):
            raise UsageError(f"--mlm_probability_schedule {spec}: the phases must start in increasing order")
        if len(phases) == 1:
            return cls("constant", phases[0][1], phases[0][1])
        return cls("phases", phases[0][1], phases[-1][1], tuple(phases))

    @property
    def varies(self) -> bool:
        return self.kind != "constant"

    def rate(self, step: int, total_steps: int) -> float:
        """The rate of optimizer step ``step`` (0-based) of a run of ``total_steps``."""
        if self.phases:
            rate = self.phases[0][1]
            for at, phase_rate in self.phases[1:]:
                if step >= (at * total_steps if at < 1 else at):
                    rate = phase_rate
            return rate
        progress = min(1.0, max(0.0, step / max(1, total_steps)))
        if self.kind == "linear":
            return self.start + (self.end - self.start) * progress
        if self.kind == "cosine":
            return self.end + (self.start - self.end) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.start

    def describe(self) -> str:
        """One line for the model card and the job's printed configuration."""
        if self.kind == "constant":
            return f"constant {self.start:.0%}"
        if self.kind in ("linear", "cosine"):
            return f"{self.kind} {self.start:.0%} → {self.end:.0%} over the run"
        if self.kind == "step":
            return f"step: {self.start:.0%}, then {self.end:.0%} from half of the steps"

        def where(at: float) -> str:
            return f"{at:.0%} of the steps" if at < 1 else f"step {at:.0f}"

        return "phases: " + ", ".join(
            f"{rate:.0%}" + ("" if at == 0 else f" from {where(at)}") for at, rate in self.phases
        )


@dataclass(frozen=True)
class BatchSizeWarmup:
    """Rows per device and micro-batch at each optimizer step, growing linearly in the tokens trained on.

    Step ``s`` takes ``rows(s) = min(max_rows, min_rows + floor((max_rows - min_rows) × tokens_before(s) / tokens))``
    rows on each of ``rows_multiplier`` (processes × accumulated micro-batches) micro-batches, where
    ``tokens_before(s)`` counts ``row_tokens`` per row trained on in the steps before ``s``: the warmup ends once
    ``tokens`` tokens are trained on.
    """

    tokens: int
    min_rows: int
    max_rows: int
    row_tokens: int
    rows_multiplier: int = 1
    _plan: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise UsageError(f"--batch_size_warmup_tokens must be positive, got {self.tokens}")
        if not 1 <= self.min_rows <= self.max_rows:
            raise UsageError(
                f"--batch_size_warmup_min_rows must lie in [1, --per_device_train_batch_size = {self.max_rows}], "
                f"got {self.min_rows}"
            )
        plan: list[int] = []
        rows_before = 0
        while True:
            rows = self.max_rows
            if rows_before * self.row_tokens < self.tokens:
                growth = (self.max_rows - self.min_rows) * rows_before * self.row_tokens // self.tokens
                rows = min(self.max_rows, self.min_rows + growth)
            if rows == self.max_rows:
                break
            plan.append(rows)
            rows_before += rows * self.rows_multiplier
        object.__setattr__(self, "_plan", tuple(plan))

    @property
    def warmup_steps(self) -> int:
        """The steps before the first one with ``max_rows``."""
        return len(self._plan)

    def rows(self, step: int) -> int:
        """Rows per device and micro-batch at optimizer step ``step`` (0-based)."""
        return self._plan[step] if step < len(self._plan) else self.max_rows

    def rows_before(self, step: int) -> int:
        """Rows trained on (every process and micro-batch) in the steps before ``step``."""
        warm = min(step, len(self._plan))
        return (sum(self._plan[:warm]) + (step - warm) * self.max_rows) * self.rows_multiplier

    def describe(self) -> str:
        return (
            f"{self.min_rows * self.rows_multiplier} → {self.max_rows * self.rows_multiplier} rows per step over the "
            f"first {self.tokens:,} tokens (rows × {self.row_tokens}; {self.warmup_steps} steps)"
        )


def permutation(num_rows: int, seed: int, epoch: int) -> list[int]:
    """The order of the rows in data epoch ``epoch``: what accelerate's ``SeedableRandomSampler`` (the Trainer's
    sampler) yields with ``data_seed`` ``seed``."""
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(num_rows, generator=generator).tolist()


class ScheduledBatchSampler:
    """Micro-batches of tagged row indices for one training process (see the module for the two layouts).

    Args:
        num_rows: rows of the training set.
        batch_size: ``per_device_train_batch_size`` (with a warmup, the rows after it).
        gradient_accumulation_steps, num_processes, process_index: as the Trainer's arguments say.
        seed: the data order's seed (``data_seed``, else the Trainer's seed).
        mask_schedule: tags every row with its step's rate; None leaves the collator's own rate.
        total_steps: the run's steps for the schedule, asked whenever a batch is tagged (a time budget re-plans it).
        warmup: a :class:`BatchSizeWarmup`: the stream layout.
        max_steps: with a warmup, the optimizer steps of the run (the length of its single epoch).
        drop_last, even_batches: the Trainer's ``dataloader_drop_last`` and accelerate's ``even_batches``.
        max_tokens, lengths: the token-budget layout: micro-batches of at most ``max_tokens`` tokens of rows of
            ``lengths`` tokens (``batch_size`` is then unused).
        shuffle: False reads the rows in their order, every epoch (rows already drawn in training order: a
            multilingual run's phases, :mod:`mlm_suite.data.pretraining.languages`).
    """

    def __init__(
        self,
        num_rows: int,
        batch_size: int,
        gradient_accumulation_steps: int = 1,
        num_processes: int = 1,
        process_index: int = 0,
        seed: int = 0,
        mask_schedule: MaskRateSchedule | None = None,
        total_steps: Callable[[], int] | None = None,
        warmup: BatchSizeWarmup | None = None,
        max_steps: int | None = None,
        drop_last: bool = False,
        even_batches: bool = True,
        max_tokens: int | None = None,
        lengths: Sequence[int] | None = None,
        shuffle: bool = True,
    ) -> None:
        if num_rows < 1:
            raise ValueError("no training rows to sample")
        if warmup is not None and not (max_steps and max_steps > 0):
            raise UsageError("--batch_size_warmup_tokens needs --max_steps (or --max_train_minutes)")
        if max_tokens is not None and (warmup is not None or lengths is None or len(lengths) != num_rows):
            raise ValueError("a token budget needs the length of every row and no batch-size warmup")
        self.max_tokens = max_tokens
        self.lengths = lengths
        self.num_rows = num_rows
        self.batch_size = batch_size
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.num_processes = num_processes
        self.process_index = process_index
        self.seed = seed
        self.mask_schedule = mask_schedule
        self.total_steps = total_steps or (lambda: max_steps or 1)
        self.warmup = warmup
        self.max_steps = max_steps
        self.drop_last = drop_last
        self.even_batches = even_batches
        self.shuffle = shuffle
        self.epoch = 0
        self._per_epoch = self._epoch_batches(list(range(num_rows))) if warmup is None else None

    # ---------------------------------------------------------------- layout
    def _epoch_batches(self, order: Sequence[int]) -> Any:
        """This process's micro-batches of one data epoch in ``order``, as accelerate deals them."""
        if self.max_tokens is not None:
            return self._token_budget_batches(order)
        batches = BatchSampler(order, self.batch_size, self.drop_last)
        if self.num_processes == 1:
            return batches
        from accelerate.data_loader import BatchSamplerShard

        return BatchSamplerShard(batches, self.num_processes, self.process_index, False, self.even_batches)

    def _token_budget_batches(self, order: Sequence[int]) -> list[list[int]]:
        rank = {row: position for position, row in enumerate(order)}
        batches = token_budget_batches(self.lengths, order, self.max_tokens)
        batches.sort(key=lambda batch: rank[batch[0]])  # batch[0], its longest row: no bias by the batch's row count
        share = -(-len(batches) // self.num_processes)
        # Round-robin, wrapping round to the first batches when they do not divide evenly.
        return [batches[(self.process_index + k * self.num_processes) % len(batches)] for k in range(share)]

    def __len__(self) -> int:
        if self.warmup is not None:
            return self.max_steps * self.gradient_accumulation_steps
        return len(self._per_epoch)

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per Trainer epoch (the Trainer's ``num_update_steps_per_epoch``)."""
        return max(1, math.ceil(len(self) / self.gradient_accumulation_steps))

    def set_epoch(self, epoch: int) -> None:
        """The Trainer's epoch (ignored by the stream layout, whose run is a single Trainer epoch)."""
        self.epoch = int(epoch)

    def rate(self, step: int) -> float | None:
        if self.mask_schedule is None:
            return None
        return self.mask_schedule.rate(step, max(1, int(self.total_steps())))

    def rows_per_step(self, step: int) -> int:
        """Rows of optimizer step ``step``, every process and micro-batch together."""
        rows = self.warmup.rows(step) if self.warmup is not None else self.batch_size
        return rows * self.num_processes * self.gradient_accumulation_steps

    def rows_before(self, step: int) -> int:
        if self.warmup is not None:
            return self.warmup.rows_before(step)
        return step * self.batch_size * self.num_processes * self.gradient_accumulation_steps

    # ---------------------------------------------------------------- iteration
    def _order(self, epoch: int) -> list[int]:
        return permutation(self.num_rows, self.seed, epoch) if self.shuffle else list(range(self.num_rows))

    def __iter__(self) -> Iterator[list[Tag]]:
        return self._stream() if self.warmup is not None else self._one_epoch(self.epoch)

    def _one_epoch(self, epoch: int) -> Iterator[list[Tag]]:
        order = self._order(epoch)
        first_step = epoch * self.steps_per_epoch
        for number, batch in enumerate(self._epoch_batches(order)):
            rate = self.rate(first_step + number // self.gradient_accumulation_steps)
            yield [(index, epoch, rate) for index in batch]

    def _stream(self) -> Iterator[list[Tag]]:
        if self.epoch > 0:  # the whole run is the Trainer's epoch 0
            return
        orders: dict[int, list[int]] = {}

        def tag(position: int, rate: float | None) -> Tag:
            epoch, offset = divmod(position, self.num_rows)
            if epoch not in orders:  # positions only grow: two epochs are enough to keep
                if len(orders) > 1:
                    orders.clear()
                orders[epoch] = self._order(epoch)
            return (orders[epoch][offset], epoch, rate)

        for step in range(self.max_steps):
            rows, start, rate = self.warmup.rows(step), self.warmup.rows_before(step), self.rate(step)
            for micro in range(self.gradient_accumulation_steps):
                first = start + (micro * self.num_processes + self.process_index) * rows
                yield [tag(position, rate) for position in range(first, first + rows)]


class TaggedRows(Dataset):
    """The training rows as the loader reads them through :class:`ScheduledBatchSampler`'s tags: row ``index``'s
    features plus ``epoch`` and, when the tag has one, ``mlm_probability`` (both consumed by the collator)."""

    def __init__(self, rows: Any) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @staticmethod
    def _tagged(row: dict, tag: Tag) -> dict:
        _, epoch, rate = tag
        row = {**row, "epoch": epoch}
        if rate is not None:
            row["mlm_probability"] = rate
        return row

    def __getitem__(self, tag: Tag) -> dict:
        return self._tagged(dict(self.rows[int(tag[0])]), tag)

    def __getitems__(self, tags: list[Tag]) -> list[dict]:
        fetch = getattr(self.rows, "__getitems__", None)
        indices = [int(tag[0]) for tag in tags]
        rows = fetch(indices) if fetch is not None else [self.rows[index] for index in indices]
        return [self._tagged(dict(row), tag) for row, tag in zip(rows, tags)]
