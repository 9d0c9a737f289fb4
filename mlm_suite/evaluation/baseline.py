"""Comparing a token-classification model with Hugging Face's ``BertForTokenClassification`` (``--compare_hf``).

``mlm-suite finetune-ner --compare_hf`` fine-tunes, in the same run, HF's ``BertForTokenClassification`` from
the all-MiniLM-L6-v2 weights with the job's own recipe, passed in as a function so that the baseline is trained
exactly as the job trains its own model, and tests the score difference with a paired bootstrap. See
docs/finetuning.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mlm_suite.data.inputs import downloads
from mlm_suite.evaluation.entities import paired_bootstrap
from mlm_suite.evaluation.tagging_metrics import main_metric, predicted_tags

#: ``fit(model, tokenizer) -> (metrics per split, trainer, datasets)``: the job's recipe.
Recipe = Callable[[Any, Any], tuple[dict[str, dict[str, float]], Any, Mapping[str, Any]]]


def compare_with_hf_baseline(
    ours: Any, our_datasets: Mapping[str, Any], label_list: Sequence[str], scheme: str, mode: str, seed: int,
    fit: Recipe,
) -> dict[str, dict[str, float]]:
    """Train the HF baseline with ``fit`` and compare it with the trained model of ``ours`` (a Trainer).

    ``fit(model, tokenizer)`` trains, evaluates and predicts with ``model`` as the job did with its own model
    (the splits aligned with ``tokenizer``, in the baseline's folder, scores named ``hf_*``) and returns the
    metrics per split, its trainer and its datasets. The baseline is ``BertForTokenClassification`` from the
    all-MiniLM-L6-v2 weights over ``label_list`` (in id order), initialised after ``set_seed(seed)``.

    Returns the baseline's metrics per split (``hf_train``, ``hf_eval``, ``hf_test``) and ``comparison``, the
    paired bootstrap (:func:`bootstrap_against_baseline`); they are also saved in the baseline's folder.
    """
    from transformers import AutoTokenizer, BertForTokenClassification, set_seed

    tokenizer = AutoTokenizer.from_pretrained(downloads.minilm_dir())
    set_seed(seed)
    model = BertForTokenClassification.from_pretrained(
        downloads.minilm_dir(), num_labels=len(label_list), id2label=dict(enumerate(label_list)),
        label2id={label: index for index, label in enumerate(label_list)},
    )
    baseline, trainer, datasets = fit(model, tokenizer)
    baseline["comparison"] = bootstrap_against_baseline(ours, our_datasets, trainer, datasets, scheme, mode, seed)
    for split, values in baseline.items():  # the baseline's own folder (hf_baseline/) holds its results
        trainer.save_metrics(split, dict(values))
    return baseline


def bootstrap_against_baseline(
    ours: Any, our_data: Mapping[str, Any], baseline: Any, baseline_data: Mapping[str, Any], scheme: str, mode: str, seed: int
) -> dict[str, float]:
    """Paired bootstrap (Berg-Kirkpatrick et al., 2012) of the score difference, per evaluated split.

    The score is entity F1, or token accuracy for scheme ``none`` (:func:`main_metric`); the
    results are ``<split>_<metric>_delta_vs_hf`` and ``<split>_bootstrap_p_value``. ``delta`` is
    mlm_suite's score minus the baseline's; the p-value is one-sided in the direction observed
    (how often resampled test sets show a difference at least twice as large), so a small value
    means the better model really is better on this data.
    """
    metric = main_metric(scheme)
    results = {}
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if split not in our_data:
            continue
        gold, our_tags = predicted_tags(ours, our_data[split])
        baseline_gold, baseline_tags = predicted_tags(baseline, baseline_data[split])
        if gold != baseline_gold:
            raise RuntimeError(f"the two models were scored on different {split} labels")
        forward = paired_bootstrap(gold, our_tags, baseline_tags, seed=seed, scheme=scheme, mode=mode, metric=metric)
        better_first = forward if forward["delta"] >= 0 else paired_bootstrap(
            gold, baseline_tags, our_tags, seed=seed, scheme=scheme, mode=mode, metric=metric
        )
        results[f"{prefix}_{metric}_delta_vs_hf"] = forward["delta"]
        results[f"{prefix}_bootstrap_p_value"] = better_first["p_value"]
    return results
