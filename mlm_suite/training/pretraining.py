"""The pretraining job's training parts, its collators and its final evaluation (``mlm-suite pretrain``).

* :class:`HeadWarmup`: the feature that trains only the heads for ``--head_warmup_steps``;
* :func:`training_collator` / :func:`evaluation_collator`: the seeded training masks and the fixed held-out ones;
* :func:`evaluate_pretraining`: the saved model's held-out metrics (perplexity included) and its fill-mask probe;
* :func:`describe_evaluation`: those as the job prints them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase, Trainer

from mlm_suite.data.pretraining.masking import DataCollatorForMaskedLM
from mlm_suite.data.pretraining.rows import EVAL_SEED
from mlm_suite.evaluation.masked_lm import fill_mask_probe
from mlm_suite.training.features import TrainerFeature

__all__ = [
    "HeadWarmup",
    "describe_evaluation",
    "evaluate_pretraining",
    "evaluation_collator",
    "final_evaluation",
    "training_collator",
]


def training_collator(
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float,
    *,
    seed: int,
    masking: str = "token",
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    seed_per_rank: bool = False,
    flatten: bool = False,
    max_tokens_per_batch: int | None = None,
    max_seq_length: int | None = None,
) -> DataCollatorForMaskedLM:
    """The training masks: ``mlm_probability`` (and its replacement split), a function of ``(seed, epoch, example
    index)`` (and of the process rank with ``seed_per_rank``); flattened batches with ``flatten``. With
    ``max_tokens_per_batch`` every batch is flattened and padded to exactly that many tokens, and ``max_length_q`` is
    ``max_seq_length``: one shape for every step."""
    if max_tokens_per_batch is not None:
        flatten = True
        # Rounding to a multiple of the longest row makes the longest-sequence bound that row length in every batch.
        multiple = max_seq_length
    else:
        multiple = 8 if flatten else None  # rounds max_length_q: fewer torch.compile shapes
    return DataCollatorForMaskedLM(
        tokenizer,
        mlm_probability=mlm_probability,
        mask_replace_prob=mask_replace_prob,
        random_replace_prob=random_replace_prob,
        masking=masking,
        seed=seed,
        process_rank=None if seed_per_rank else 0,
        flatten=flatten,
        pad_to_multiple_of=multiple,
        pad_to_tokens=max_tokens_per_batch,
    )


def evaluation_collator(
    tokenizer: PreTrainedTokenizerBase, mlm_probability: float = 0.15, masking: str = "token"
) -> DataCollatorForMaskedLM:
    """The held-out masks: ``mlm_probability`` with a fixed seed, whatever the training rate or process."""
    return DataCollatorForMaskedLM(
        tokenizer, mlm_probability=mlm_probability, masking=masking, seed=EVAL_SEED, process_rank=0
    )


class HeadWarmup(TrainerFeature):
    """Trains only the heads for the first ``steps`` optimizer steps (``--head_warmup_steps``), a feature of
    :class:`~mlm_suite.training.trainer.JobTrainer`: the encoder's gradients are dropped after each backward, before
    clipping and the optimizer step. The optimizer skips a parameter without a gradient entirely (no update, no
    weight decay, no moment estimates), so the encoder is frozen without rebuilding the optimizer or changing what DDP
    reduces."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def after_backward(self, model: torch.nn.Module, step: int, loss: torch.Tensor) -> None:
        if step < self.steps:
            for parameter in model.encoder.parameters():
                parameter.grad = None


def final_evaluation(trainer: Trainer) -> dict[str, float]:
    """Metrics of the saved model: those of the scheduled evaluation if it just ran at the last step, else a
    new evaluation (always after early stopping, which restores the best model rather than the last one)."""
    history = trainer.state.log_history
    last = next((entry for entry in reversed(history) if "eval_loss" in entry), None)
    if last is not None and last["step"] == trainer.state.global_step and not trainer.args.load_best_model_at_end:
        return {key: value for key, value in last.items() if key.startswith("eval_") or key == "epoch"}
    return trainer.evaluate()


def evaluate_pretraining(
    trainer: Trainer, tokenizer: PreTrainedTokenizerBase, probes: Sequence[tuple[str, str]], eval_rows: int
) -> tuple[dict[str, float], list[dict]]:
    """The saved model's held-out metrics (:func:`final_evaluation`, plus ``perplexity``, ``eval_samples`` and the
    fill-mask probe's counts) and its fill-mask probe answers."""
    eval_metrics = final_evaluation(trainer)
    eval_metrics["perplexity"] = math.exp(min(eval_metrics["eval_mlm_loss"], 700.0))  # exp overflows past ~709
    eval_metrics["eval_samples"] = eval_rows
    probe = fill_mask_probe(trainer.model, tokenizer, probes)
    eval_metrics["fill_mask_probe_top1_correct"] = sum(item["predictions"][0] == item["answer"] for item in probe)
    eval_metrics["fill_mask_probe_distinct_top1"] = len({item["predictions"][0] for item in probe})
    return eval_metrics, probe


def describe_evaluation(metrics: dict[str, float], probe: list[dict], baseline_token: str) -> str:
    """The held-out scores and the fill-mask probe as the job prints them (plain text)."""
    rows = [("MLM loss / perplexity", f"{metrics['eval_mlm_loss']:.4f} / {metrics['perplexity']:.1f}")]
    for name, key in (("[MASK] positions", "mask"), ("random-token positions", "random"), ("kept positions", "kept")):
        rows.append((f"accuracy at {name}", f"{metrics[f'eval_{key}_accuracy']:.4f}  ({metrics[f'eval_{key}_tokens']} tokens)"))
    rows.append(("top-5 accuracy at [MASK]", f"{metrics['eval_mask_top5_accuracy']:.4f}"))
    rows.append(
        (
            "baseline at [MASK]",
            f"{metrics['eval_mask_baseline_accuracy']:.4f}  (always {baseline_token!r}, the most frequent training token)",
        )
    )
    if "eval_nsp_accuracy" in metrics:
        rows.append(("next-sentence accuracy", f"{metrics['eval_nsp_accuracy']:.4f}"))
    lines = [f"held-out evaluation ({metrics['eval_selected_tokens']} selected tokens, {metrics['eval_samples']} rows):"]
    lines += [f"  {label:<36}{value}" for label, value in rows]
    if probe:
        lines.append("fill-mask probe (held-out sentences; answer -> top-5):")
        lines += [f"  {item['sentence']}\n      {item['answer']} -> {', '.join(item['predictions'])}" for item in probe]
    return "\n".join(lines)
