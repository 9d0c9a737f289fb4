"""What a training run delivers: real (non-pad) tokens per second over its steady steps and, for pretraining, the
model FLOPs utilisation (MFU) against the device's dense bf16 peak (docs/performance.md#what-a-run-reports).

The peaks of known GPUs are in :data:`PEAK_BF16_TFLOPS`; a device not in it (a CPU, an unlisted GPU) has no peak,
and its MFU is reported as ``"unknown"`` rather than guessed. ``--peak_tflops`` overrides the table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["PEAK_BF16_TFLOPS", "UNKNOWN", "model_flops_utilisation", "peak_tflops", "real_tokens"]

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
