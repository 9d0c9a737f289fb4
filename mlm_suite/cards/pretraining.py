"""The card of ``mlm-suite pretrain``: objective, architecture, data, recipe, held-out scores, the fill-mask probe.

:func:`pretraining_card` builds it from the run's values; :func:`default_source` says where a value whose default
depends on the mode (from scratch or continued) came from, for the card and the job's printed configuration.
See docs/models.md#what-the-jobs-write.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlm_suite.cards.card import PretrainingCard
from mlm_suite.cards.metadata import CardDataset, base_model_fields, card_scores
from mlm_suite.cards.rendering import markdown_table, table_cell

#: The held-out scores in the pretraining card's metadata: metric key (after ``eval_``) → (metric type, name as the
#: card says it).
PRETRAINING_CARD_SCORES = {
    "mask_accuracy": ("accuracy", "accuracy at [MASK] positions"),
    "mask_top5_accuracy": ("top5_accuracy", "top-5 accuracy at [MASK] positions"),
    "perplexity": ("perplexity", "perplexity"),
    "nsp_accuracy": ("accuracy", "next-sentence accuracy"),
}
#: The model-index's split of held-out documents that were held out of the dataset's train split (a share of it, or
#: the first documents of a stream) because it has no validation split.
HELD_OUT_OF_TRAIN = "held-out part of train"
#: The embedded default data, as the card's metadata names them.
EMBEDDED_DATA = CardDataset.embedded("pang_lee_movie_reviews", "Pang & Lee movie reviews (built in, held-out split)")
#: The built-in corpora a run may name (``--builtin_dataset``), as the card's metadata names them.
BUILTIN_DATA = {
    "pang_lee_reviews": EMBEDDED_DATA,
    "debian_reference": CardDataset.embedded(
        "debian_reference", "The Debian Reference in 8 languages (built in, GPL-2+, held-out part of each language)",
        ["en", "de", "fr", "es", "it", "pt", "ja", "zh"],
    ),
}


def default_source(value_sources: Mapping[str, str], name: str) -> str:
    """`` (continued-pretraining default)``, `` (from-scratch default)`` or `` (given)``: where the value of ``name``
    came from (``value_sources``: name → source); empty when unknown."""
    source = value_sources.get(name)
    return f" ({source})" if source else ""


def architecture_rows(config: Any) -> dict[str, object]:
    """The hyper-parameters a reader of a card wants to see, from an ``MlmSuiteConfig``."""
    names = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "norm_position",
        "position_embedding_type",
        "ffn_type",
    )
    return {name: getattr(config, name) for name in names}


def probe_table(probe: list[dict]) -> str:
    """The fill-mask probe as a markdown table for the model card."""
    rows = ["| sentence | masked word | top-5 predictions |", "|---|---|---|"]
    for item in probe:
        cells = (item["sentence"], item["answer"], ", ".join(item["predictions"]))
        rows.append("| " + " | ".join(map(table_cell, cells)) + " |")
    return "\n".join(rows)


@dataclass(frozen=True, kw_only=True)
class PretrainingRecipe:
    """How a pretrained model was trained, as its card says it.

    ``base_model``: the checkpoint continued (``--model_name_or_path``), else the model is new, built from
    ``config_name`` or else the preset ``config_preset``. The data: ``dataset_name`` (a Hub id or a saved folder) with
    its configuration, else ``prepared_data``, ``train_file`` and ``validation_file`` (one per language), else the
    built-in corpus ``builtin_dataset`` (None: the embedded reviews); ``languages``: a run of several's, in order.
    ``value_sources``: where mode-dependent values came from (:func:`default_source`); ``max_steps``: the step limit
    to show (None: none, a time budget decides); ``rows_per_step``: a step's rows, or a token-budget run's batch in
    words; ``lr_schedule``: the schedule in words; ``controls``: the pretraining controls that are on (name -> one
    line; the learning-rate schedule has its own row).
    """

    base_model: str | None
    config_name: str | None
    config_preset: str
    dataset_name: str | None
    dataset_config_name: str | None
    prepared_data: str | None
    train_file: Sequence[str]
    validation_file: Sequence[str]
    builtin_dataset: str | None
    objective: str
    masking: str
    mlm_probability: float
    eval_mlm_probability: float
    value_sources: Mapping[str, str]
    max_steps: int | None
    rows_per_step: int | str
    learning_rate: float
    adam_beta2: float
    lr_schedule: str
    weight_decay: float
    max_seq_length: int
    packing: bool
    seed: int
    max_train_minutes: float | None
    head_warmup_steps: int
    controls: Mapping[str, str]
    languages: Sequence[str] = ()


def pretraining_card(
    *,
    model: Any,
    tokenizer: Any,
    recipe: PretrainingRecipe,
    held_out_split: str | None,
    data: Mapping[str, object],
    train_metrics: Mapping[str, float],
    eval_metrics: Mapping[str, float],
    probe: list[dict],
    baseline_token: str,
    figures: str = "",
    languages: str = "",
) -> PretrainingCard:
    """The pretraining card of ``model``, trained as ``recipe`` says.

    ``held_out_split``: the dataset's split the held-out documents were read from (None: the validation file, else
    :data:`HELD_OUT_OF_TRAIN`); ``data``: the rows of the data table. ``train_metrics`` and ``eval_metrics``: the
    job's results (``train_steps``; ``eval_*`` and ``perplexity``); ``probe``: the fill-mask probe;
    ``baseline_token``: the baseline's prediction as people read it
    (:func:`~mlm_suite.evaluation.masked_lm.readable_token`); ``figures``: markdown shown after the scores;
    ``languages``: a run of several languages' table of results per language (markdown, shown after the scores). The
    usage snippet and the probe write the tokenizer's own mask token; the scores keep the name ``[MASK]`` for the
    masked positions, whatever the tokenizer's mask token, which the text then names.
    """
    objective_text = "masked language modelling" + (" + next-sentence prediction" if recipe.objective == "mlm_nsp" else "")
    objective_text += (
        f", {recipe.masking.replace('_', '-')} masking of {recipe.mlm_probability:.0%} of the tokens in training"
        + default_source(recipe.value_sources, "mlm_probability")
    )
    if recipe.base_model:
        start = f"continued from `{recipe.base_model}`"
    else:
        start = f"config `{recipe.config_name}`" if recipe.config_name else f"preset `{recipe.config_preset}`"
    step_limit = ""
    if recipe.value_sources and recipe.max_steps is not None:
        step_limit = f" (--max_steps {recipe.max_steps}{default_source(recipe.value_sources, 'max_steps')})"
    training = {
        "initialisation": start,
        "optimizer steps": f"{train_metrics['train_steps']}" + step_limit,
        "batch size (global)": recipe.rows_per_step,
        "learning rate": f"{recipe.learning_rate:g}{default_source(recipe.value_sources, 'learning_rate')} (AdamW β₂ "
        f"{recipe.adam_beta2:g}, {recipe.lr_schedule})",
        "weight decay": recipe.weight_decay,
        "max sequence length": recipe.max_seq_length,
        "packing": recipe.packing,
        "seed": recipe.seed,
        "time budget": f"{recipe.max_train_minutes:g} min" if recipe.max_train_minutes else "none (fixed step count)",
        **({"head warm-up": f"{recipe.head_warmup_steps} steps with the encoder frozen"} if recipe.head_warmup_steps else {}),
        # masking-rate schedule, replacement split, batch-size warmup, context extension
        **{name: value for name, value in recipe.controls.items() if name != "learning-rate schedule"},
        "final train loss": train_metrics["train_loss"],
        "train runtime (s)": train_metrics["train_runtime"],
    }
    shown = {
        "**accuracy at `[MASK]` positions**": eval_metrics["eval_mask_accuracy"],
        "most-frequent-token baseline at `[MASK]` positions": eval_metrics["eval_mask_baseline_accuracy"],
        "top-5 accuracy at `[MASK]` positions": eval_metrics["eval_mask_top5_accuracy"],
        "accuracy at random-token positions": eval_metrics["eval_random_accuracy"],
        "accuracy at kept positions (the answer is visible)": eval_metrics["eval_kept_accuracy"],
        "MLM loss (all selected positions)": eval_metrics["eval_mlm_loss"],
        "perplexity": eval_metrics["perplexity"],
        "selected tokens: `[MASK]` / random / kept": "{eval_mask_tokens} / {eval_random_tokens} / {eval_kept_tokens}".format(
            **eval_metrics
        ),
    }
    if "eval_nsp_accuracy" in eval_metrics:
        shown["next-sentence accuracy"] = eval_metrics["eval_nsp_accuracy"]
    metrics = markdown_table(shown, ("metric", "value")) + (
        f"\n\nEvaluation selects {recipe.eval_mlm_probability:.0%} of the tokens with fixed (seeded) masks, 80 % "
        "`[MASK]` / 10 % random / 10 % kept, so these numbers compare across runs whatever the training masking "
        "rate. The headline is the accuracy at `[MASK]` positions: kept positions show the answer and are not a "
        f"test of the model. The baseline predicts the most frequent training token, `{baseline_token}`, at every "
        "`[MASK]`."
    )
    if tokenizer.mask_token != "[MASK]":
        metrics += f" `[MASK]` stands for this tokenizer's mask token, `{tokenizer.mask_token}`."
    if languages:
        metrics += "\n\n### Per language\n\n" + languages
    if probe:
        metrics += "\n\n### Fill-mask probe\n\nHeld-out sentences, one word masked:\n\n" + probe_table(probe)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    held_out = held_out_split or (", ".join(Path(file).name for file in recipe.validation_file) + " (--validation_file)"
                                  if recipe.validation_file else HELD_OUT_OF_TRAIN)
    builtin = BUILTIN_DATA[recipe.builtin_dataset or "pang_lee_reviews"]
    if recipe.builtin_dataset == "debian_reference" and recipe.languages:  # the languages the run read of it
        builtin = dataclasses.replace(builtin, language=list(recipe.languages))
    dataset = CardDataset.read_by_job(recipe.dataset_name, recipe.dataset_config_name,
                                      (recipe.prepared_data, *recipe.train_file, *recipe.validation_file),
                                      builtin, {"validation": held_out})
    return PretrainingCard(
        base_model=recipe.base_model,
        dataset=dataset,
        scores=card_scores({**eval_metrics, "eval_perplexity": eval_metrics["perplexity"]}, PRETRAINING_CARD_SCORES,
                           splits=(("eval", "validation"),)),
        architecture=f"{parameters / 1e6:.1f}M-parameter BERT-style",
        origin=f"pretrained further from {base_model_fields(recipe.base_model)['base_model_text']}" if recipe.base_model
        else "pretrained from scratch",
        objective=objective_text,
        architecture_table=markdown_table(architecture_rows(model.config), ("hyper-parameter", "value")),
        data=markdown_table({**data, "tokenizer": f"{type(tokenizer).__name__}, {len(tokenizer)} tokens"}),
        training=markdown_table(training),
        metrics=metrics + figures,
        fill_mask_example=json.dumps(f"the movie was {tokenizer.mask_token} ."),
    )
