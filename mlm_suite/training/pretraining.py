"""The pretraining job's training parts, its collators and its final evaluation (``mlm-suite pretrain``).

* :class:`HeadWarmup`: the feature that trains only the heads for ``--head_warmup_steps``;
* :func:`training_collator` / :func:`evaluation_collator`: the seeded training masks and the fixed held-out ones;
* :func:`evaluate_pretraining`: the saved model's held-out metrics (perplexity included) and its fill-mask probe;
* :func:`describe_evaluation`: those as the job prints them;
* :func:`evaluate_languages`: a run of several languages' results per language (:class:`LanguageResults`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, Trainer

from mlm_suite.data.pretraining.languages import pieces_per_word
from mlm_suite.data.pretraining.masking import DataCollatorForMaskedLM
from mlm_suite.data.pretraining.rows import EVAL_SEED
from mlm_suite.evaluation.masked_lm import fill_mask_probe, make_mlm_compute_metrics, readable_token
from mlm_suite.training.features import TrainerFeature

__all__ = [
    "HeadWarmup",
    "LanguageResults",
    "PIECES_PER_WORD_DOCUMENTS",
    "describe_evaluation",
    "evaluate_languages",
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


#: The training documents per language whose words a run's pieces per word are counted on.
PIECES_PER_WORD_DOCUMENTS = 2000
# Of a per-language evaluation, the keys kept: the scores (not its timing, nor the epoch the Trainer adds).
_TIMING_KEYS = ("_runtime", "_samples_per_second", "_steps_per_second")


@dataclass(frozen=True)
class LanguageResults:
    """A run of several languages' results per language: ``scores`` (language → its held-out metrics, keys
    ``eval_<language>_...``), ``pieces_per_word`` (language → the tokenizer's pieces per word on its training
    documents), ``baseline_tokens`` (language → its most frequent training token, readable) and ``documents`` and
    ``rows`` (language → its training documents and rows; "streamed" for a stream)."""

    scores: Mapping[str, Mapping[str, float]]
    pieces_per_word: Mapping[str, float]
    baseline_tokens: Mapping[str, str]
    documents: Mapping[str, int | str]
    rows: Mapping[str, int | str]

    def eval_metrics(self) -> dict[str, float]:
        """``eval_<language>_mask_accuracy``, ``eval_<language>_mask_baseline_accuracy``, ... of every language."""
        return {key: value for scores in self.scores.values() for key, value in scores.items()}

    def tokenizer_metrics(self) -> dict[str, float]:
        """``<language>_pieces_per_word`` of every language."""
        return {f"{language}_pieces_per_word": value for language, value in self.pieces_per_word.items()}

    def _rows(self, train_metrics: Mapping[str, float]) -> list[tuple[str, ...]]:
        rows = []
        for language, scores in self.scores.items():
            share = train_metrics.get(f"train_language_share_{language}", math.nan)
            documents = self.documents[language]
            rows.append((language, f"{documents:,}" if isinstance(documents, int) else str(documents), f"{share:.1%}",
                         f"{scores[f'eval_{language}_mask_accuracy']:.4f}",
                         f"{scores[f'eval_{language}_mask_baseline_accuracy']:.4f} ({self.baseline_tokens[language]})",
                         f"{self.pieces_per_word[language]:.2f}"))
        return rows

    _HEADER = ("language", "training documents", "share of training rows", "[MASK] accuracy", "baseline (its token)",
               "pieces per word")

    def table(self, train_metrics: Mapping[str, float]) -> str:
        """The per-language results as a markdown table (the card's)."""
        lines = ["| " + " | ".join(self._HEADER) + " |", "|" + "---|" * len(self._HEADER)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in self._rows(train_metrics)]
        return "\n".join(lines) + (
            "\n\nEach language is scored on its own held-out documents, against its own most frequent training token. "
            "The share is of the rows the run trained on; a word is a run between spaces, or one Chinese or Japanese "
            "character."
        )

    def describe(self, train_metrics: Mapping[str, float]) -> str:
        """The per-language results as the job prints them (plain text)."""
        rows = [self._HEADER, *self._rows(train_metrics)]
        widths = [max(len(row[column]) for row in rows) for column in range(len(self._HEADER))]
        lines = ["per language (held-out [MASK] accuracy against each language's own baseline):"]
        lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        return "\n".join(lines)


def evaluate_languages(trainer: Trainer, corpus: Any, tokenizer: PreTrainedTokenizerBase, eval_rows: Any) -> LanguageResults:
    """The saved model's held-out metrics per language of a :class:`~mlm_suite.data.pretraining.corpora.MultilingualCorpus`
    (``eval_rows``: its held-out rows; each language is scored on its part, with the same masks, against its own most
    frequent training token) and the tokenizer's pieces per word on each language's training documents."""
    baselines = corpus.language_baseline_token_ids(tokenizer)
    overall = trainer.compute_metrics
    scores = {}
    try:
        for language, rows in corpus.language_eval_rows(eval_rows).items():
            trainer.compute_metrics = make_mlm_compute_metrics(tokenizer.mask_token_id, baselines[language])
            metrics = trainer.evaluate(eval_dataset=rows, metric_key_prefix=f"eval_{language}")
            scores[language] = {key: value for key, value in metrics.items()
                                if key.startswith("eval_") and not key.endswith(_TIMING_KEYS)}
    finally:
        trainer.compute_metrics = overall
    sizes = corpus.language_sizes()
    return LanguageResults(
        scores=scores,
        pieces_per_word={language: pieces_per_word(tokenizer, corpus.language_texts(language, PIECES_PER_WORD_DOCUMENTS))
                         for language in corpus.languages},
        baseline_tokens={language: readable_token(tokenizer, token) for language, token in baselines.items()},
        documents={language: documents for language, (documents, _) in sizes.items()},
        rows={language: rows for language, (_, rows) in sizes.items()},
    )  # fmt: skip
