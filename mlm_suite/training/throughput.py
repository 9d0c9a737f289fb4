"""What a training run delivers: real (non-pad) tokens per second over its steady steps and, for pretraining, the
model FLOPs utilisation (MFU) against the device's dense bf16 peak (docs/performance.md#what-a-run-reports).

The peaks of known GPUs are in :data:`PEAK_BF16_TFLOPS`; a device not in it (a CPU, an unlisted GPU) has no peak,
and its MFU is reported as ``"unknown"`` rather than guessed. ``--peak_tflops`` overrides the table.

:class:`ThroughputMixin` counts, for a ``Trainer``, the real tokens of the batches it trains on (on the device,
:class:`~mlm_suite.training.device_tallies.DeviceSum`, read once at the end) and the training FLOPs per token (once,
where the stock Trainer walks the model at every step), and adds the figures to the end-of-training metrics and the
card's rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from mlm_suite.training.controls import StepRateCallback, rows_per_step
from mlm_suite.training.device_tallies import DeviceSum

__all__ = ["PEAK_BF16_TFLOPS", "ThroughputMixin", "UNKNOWN", "model_flops_utilisation", "peak_tflops", "real_tokens"]

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


class ThroughputMixin:
    """A ``transformers.Trainer`` mix-in reporting what a run delivers: ``train_tokens_per_second``, the real (non-pad)
    tokens of the steady steps (:class:`~mlm_suite.training.controls.StepRateCallback`), and, for a Trainer whose
    :attr:`reports_mfu` is set, ``train_mfu`` against ``peak_tflops`` (default: the device's listed peak). The
    end-of-training metrics get them from :meth:`_add_throughput`, which the Trainer's ``log`` calls
    (:meth:`mlm_suite.training.trainer.JobTrainer.log`); the card's rows are in :attr:`throughput`.
    """

    #: Whether the end-of-training metrics include the model FLOPs utilisation (``train_mfu``).
    reports_mfu: ClassVar[bool] = False

    def __init__(self, *args: Any, peak_tflops: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_rate = StepRateCallback()
        self.add_callback(self.step_rate)
        self.peak_tflops = peak_tflops
        self._real_tokens = DeviceSum()  # this train() call's, summed on the device: read once, at the end
        self._steps_fetched = 0
        self._non_embedding_parameters: int | None = None
        #: The card's throughput rows (name -> value), from the end-of-training metrics.
        self.throughput: dict[str, str] = {}

    def flops_per_token(self) -> int:
        """Training FLOPs per token: 6 × the non-embedding parameters (forward and backward), 0 for a model that
        cannot count them. The Trainer's FLOP count and the model FLOPs utilisation both use it.

        Counted once: the stock Trainer walks every module and parameter of the model at every step to count them,
        which costs milliseconds of host time per step; the count does not change during training.
        """
        if not hasattr(self.model, "num_parameters"):
            return 0
        if self._non_embedding_parameters is None:
            self._non_embedding_parameters = self.model.num_parameters(exclude_embeddings=True)
        return 6 * self._non_embedding_parameters

    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        """The stock count (:meth:`flops_per_token` × the main input's tokens, padding included)."""
        main_input = getattr(self.model, "main_input_name", "input_ids")
        if main_input not in inputs:
            return 0
        return inputs[main_input].numel() * self.flops_per_token()

    def train(self, *args: Any, **kwargs: Any) -> Any:
        self._real_tokens, self._steps_fetched = DeviceSum(), 0
        return super().train(*args, **kwargs)

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, Any]:
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        config = getattr(self.model, "config", None)  # a plain torch module has none
        pad_token_id = getattr(config, "pad_token_id", None)
        for batch in batch_samples:
            self._real_tokens.add(real_tokens(batch, pad_token_id))
        self._steps_fetched += 1
        return batch_samples, num_items_in_batch

    def _add_throughput(self, logs: dict[str, float]) -> None:
        """Complete the end-of-training metrics ``logs``: the samples per second of a run with ``max_steps``, the
        steady step and sample rates, and the tokens per second (and MFU) at the steady step rate."""
        rows = rows_per_step(self.args)
        if self.args.max_steps > 0:
            # The Trainer counts max_steps × rows per step as the samples, also when a time budget ended the
            # run long before (and then reports billions per second); its step rate is counted right.
            logs["train_samples_per_second"] = round(logs["train_steps_per_second"] * rows, 3)
        steady = self.step_rate.steps_per_second()
        if steady is not None:
            logs["train_steady_steps_per_second"] = round(steady, 3)
            logs["train_steady_samples_per_second"] = round(steady * rows, 3)
            logs.update(self._throughput(steady))

    def _throughput(self, steady_steps_per_second: float) -> dict[str, float | str]:
        """``train_tokens_per_second`` (and ``train_mfu``) at the steady step rate, and the card's rows for them."""
        if not self._steps_fetched:
            return {}
        # Every process counts its own batches; the processes' batches are alike, so the run's is world_size times.
        tokens_per_step = float(self._real_tokens.value()) * self.args.world_size / self._steps_fetched
        tokens_per_second = round(steady_steps_per_second * tokens_per_step, 1)
        metrics: dict[str, float | str] = {"train_tokens_per_second": tokens_per_second}
        self.throughput = {"real (non-pad) tokens per second, steady steps": f"{tokens_per_second:,.0f}"}
        if self.reports_mfu:
            peak, source = peak_tflops(self.args.device, self.peak_tflops)
            mfu = model_flops_utilisation(tokens_per_second, self.flops_per_token(), peak, self.args.world_size)
            metrics["train_mfu"] = mfu if mfu == UNKNOWN else round(mfu, 4)
            self.throughput["model FLOPs utilisation"] = (
                f"unknown (no dense bf16 peak known for {source}; give --peak_tflops)" if mfu == UNKNOWN
                else f"{mfu:.1%} of {peak:g} TFLOP/s per device ({source}), 6 × non-embedding parameters per token"
            )
        return metrics
