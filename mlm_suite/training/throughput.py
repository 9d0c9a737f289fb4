"""What a training run delivers: real (non-pad) tokens per second over its steady steps and, for pretraining, the
model FLOPs utilisation (MFU) against the device's dense bf16 peak (docs/performance.md#what-a-run-reports).

The peaks of known GPUs are in :data:`PEAK_BF16_TFLOPS`; a device not in it (a CPU, an unlisted GPU) has no peak,
and its MFU is reported as ``"unknown"`` rather than guessed. ``--peak_tflops`` overrides the table.

:class:`Throughput`, a feature of :class:`~mlm_suite.training.trainer.JobTrainer`, counts the real tokens of the
batches it trains on (on the device, :class:`~mlm_suite.training.device_tallies.DeviceSum`, read once at the end)
and adds the figures to the end-of-training metrics; :func:`throughput_rows` gives the card's rows for them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from transformers import TrainingArguments

from mlm_suite.training.controls import StepRateCallback, rows_per_step
from mlm_suite.training.device_tallies import DeviceSum
from mlm_suite.training.features import Progress, Run, TrainerFeature

__all__ = [
    "PEAK_BF16_TFLOPS", "Throughput", "UNKNOWN", "flops_per_token", "model_flops_utilisation", "peak_tflops",
    "real_tokens", "throughput_rows",
]  # fmt: skip

UNKNOWN = "unknown"

#: Dense (not sparse) bf16 tensor-core peaks in TFLOP/s from the vendors' data sheets, by the model in
#: ``torch.cuda.get_device_name()`` ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"); a two-word key (a form
#: factor) is matched before the model alone.
PEAK_BF16_TFLOPS: dict[str, float] = {
    "B200": 2250.0,
    "H200": 989.0,
    "GH200": 989.0,
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,  # SXM
    "A100": 312.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L4": 121.0,
    "A10": 125.0,
}
_KEYS = {key.lower(): peak for key, peak in PEAK_BF16_TFLOPS.items()}


def peak_tflops(device: torch.device, override: float | None = None) -> tuple[float | None, str]:
    """The dense bf16 peak of ``device`` in TFLOP/s and where it comes from (the flag, or the GPU's name); ``None``
    for a CPU or a GPU that :data:`PEAK_BF16_TFLOPS` does not list."""
    if override is not None:
        return override, "--peak_tflops"
    if device.type != "cuda":
        return None, device.type
    name = torch.cuda.get_device_name(device)
    words = re.split(r"[\s\-_]+", name.lower())
    for size in (2, 1):
        for start in range(len(words) - size + 1):
            peak = _KEYS.get(" ".join(words[start : start + size]))
            if peak is not None:
                return peak, name
    return None, name


def real_tokens(batch: Mapping[str, Any], pad_token_id: int | None = None) -> torch.Tensor | int:
    """The tokens of a collated batch that are not padding, without waiting for the device: a flattened batch
    (``cu_seq_lens_q``) holds real tokens only, except the padding sequences that fill a token-budget batch to its
    size (``pad_token_id`` tokens, counted out when the id is given); a padded one counts its attention masks (a
    query's and a document's for retrieval), summed where they are; a batch with neither counts every input id."""
    if "cu_seq_lens_q" in batch:
        ids = batch["input_ids"]
        return ids.numel() if pad_token_id is None else (ids != pad_token_id).sum()
    counts = [value.sum() for key, value in batch.items() if key.endswith("attention_mask") and isinstance(value, torch.Tensor)]
    if counts:
        return sum(counts[1:], counts[0])  # no 0 + tensor: one kernel fewer per step
    ids = [value for key, value in batch.items() if key.endswith("input_ids") and isinstance(value, torch.Tensor)]
    return sum(value.numel() for value in ids)


def model_flops_utilisation(tokens_per_second: float, flops_per_token: float, peak: float | None, devices: int) -> float | str:
    """Achieved model FLOP/s over ``devices`` × ``peak`` TFLOP/s, or :data:`UNKNOWN` without a peak."""
    if peak is None or not flops_per_token:
        return UNKNOWN
    return tokens_per_second * flops_per_token / (peak * 1e12 * devices)


class Throughput(TrainerFeature):
    """What a run delivers: ``train_tokens_per_second``, the real (non-pad) tokens of the steady steps
    (:class:`~mlm_suite.training.controls.StepRateCallback`, :attr:`step_rate`), and with ``mfu`` (pretraining)
    ``train_mfu`` against ``--peak_tflops`` (default: the device's listed peak), added to the end-of-training metrics
    with the steady step and sample rates. The card's rows are :func:`throughput_rows`."""

    def __init__(self, mfu: bool = False) -> None:
        self.mfu = mfu
        self.step_rate = StepRateCallback()
        self._args: Any = None
        self._real_tokens = DeviceSum()  # this train() call's, summed on the device: read once, at the end
        self._steps_fetched = 0
        self._pad_token_id: int | None = None
        self._flops_per_token = 0

    def attach(self, args: TrainingArguments) -> list:
        return [self.step_rate]

    def start(self, run: Run) -> None:
        self._args = run.args
        self._real_tokens, self._steps_fetched = DeviceSum(), 0
        self._pad_token_id = getattr(getattr(run.model, "config", None), "pad_token_id", None)  # a torch module has none
        self._flops_per_token = flops_per_token(run.model) if self.mfu else 0

    def batches(self, batches: list[dict[str, Any]], num_items: Any) -> Any:
        for batch in batches:
            self._real_tokens.add(real_tokens(batch, self._pad_token_id))
        self._steps_fetched += 1
        return num_items

    def real_tokens_counted(self) -> float:
        """The real tokens of the batches this process fetched in the current ``train()`` call (waits for the device)."""
        return float(self._real_tokens.value())

    def log_values(self, logs: dict[str, Any], progress: Progress) -> dict[str, Any]:
        """The end-of-training metrics: the samples per second of a run with ``max_steps``, the steady step and sample
        rates, and the tokens per second (and MFU) at the steady step rate."""
        if "train_runtime" not in logs:
            return {}
        rows = rows_per_step(self._args)
        values: dict[str, Any] = {}
        if self._args.max_steps > 0:
            # The Trainer counts max_steps × rows per step as the samples, also when a time budget ended the
            # run long before (and then reports billions per second); its step rate is counted right.
            values["train_samples_per_second"] = round(logs["train_steps_per_second"] * rows, 3)
        steady = self.step_rate.steps_per_second()
        if steady is None or not self._steps_fetched:
            return values
        values["train_steady_steps_per_second"] = round(steady, 3)
        values["train_steady_samples_per_second"] = round(steady * rows, 3)
        # Every process counts its own batches; the processes' batches are alike, so the run's is world_size times.
        tokens_per_step = self.real_tokens_counted() * self._args.world_size / self._steps_fetched
        values["train_tokens_per_second"] = round(steady * tokens_per_step, 1)
        if self.mfu:
            peak, _ = peak_tflops(self._args.device, getattr(self._args, "peak_tflops", None))
            mfu = model_flops_utilisation(values["train_tokens_per_second"], self._flops_per_token, peak,
                                          self._args.world_size)
            values["train_mfu"] = mfu if mfu == UNKNOWN else round(mfu, 4)
        return values


def flops_per_token(model: torch.nn.Module) -> int:
    """Training FLOPs per token: 6 × the non-embedding parameters (forward and backward), 0 for a model that cannot
    count them."""
    return 6 * model.num_parameters(exclude_embeddings=True) if hasattr(model, "num_parameters") else 0


def throughput_rows(metrics: dict[str, Any], args: TrainingArguments) -> dict[str, str]:
    """The model card's rows for the end-of-training ``metrics`` :class:`Throughput` added (none without them)."""
    if "train_tokens_per_second" not in metrics:
        return {}
    rows = {"real (non-pad) tokens per second, steady steps": f"{metrics['train_tokens_per_second']:,.0f}"}
    if "train_mfu" in metrics:
        peak, source = peak_tflops(args.device, getattr(args, "peak_tflops", None))
        mfu = metrics["train_mfu"]
        rows["model FLOPs utilisation"] = (
            f"unknown (no dense bf16 peak known for {source}; give --peak_tflops)" if mfu == UNKNOWN
            else f"{mfu:.1%} of {peak:g} TFLOP/s per device ({source}), 6 × non-embedding parameters per token"
        )
    return rows
