"""Masked-LM accuracy per corruption kind, top-k at [MASK] and the most-frequent-token baseline: an ``evaluate`` module.

The scores are :func:`mlm_suite.evaluation.masked_lm.kind_scores`; this script only declares the inputs and turns
ranked predictions into top-1 ids and top-k hits.
"""

import datasets
import evaluate
import numpy as np

from mlm_suite.evaluation.masked_lm import KINDS, kind_scores

_DESCRIPTION = """\
Accuracy of a masked language model at the positions selected for prediction, split by how BERT-style masking
corrupted them: "mask" (replaced by [MASK], 80 %), "random" (a random token, 10 %) and "kept" (unchanged, 10 %).
Accuracy over all selected positions mixes the three, and kept positions are trivial (the answer is visible);
the headline is the accuracy at [MASK] positions, reported with the top-k accuracy at [MASK] positions (when
the predictions are ranked lists) and the accuracy of always predicting the most frequent training token at
those same positions (the baseline a model must beat to have learned anything from context).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int, or list of list of int): per selected position, the predicted token id, or the
        top-k predicted ids best first (the same k everywhere).
    references (list of int): per selected position, the original token id.
    kinds (list of str): per selected position, how it was corrupted: "mask", "random" or "kept".
    baseline_token_id (int, optional): the baseline's single prediction, the most frequent token of the
        training data; without it no baseline is reported.
Returns:
    mask_accuracy, random_accuracy, kept_accuracy: top-1 accuracy per kind (NaN for a kind with no position);
    mask_tokens, random_tokens, kept_tokens, selected_tokens: the positions counted;
    mask_top<k>_accuracy: share of [MASK] positions whose original id is among the k predicted (ranked
        predictions with k > 1 only);
    mask_baseline_accuracy: share of [MASK] positions whose original id is baseline_token_id (with it only).
Examples:
    >>> from mlm_suite.evaluation import load_metric
    >>> masked_lm_accuracy = load_metric("masked_lm_accuracy")
    >>> results = masked_lm_accuracy.compute(
    ...     predictions=[[7, 2], [6, 8], [7, 8], [2, 6], [6, 5], [9, 3]],  # top-2 ids per position
    ...     references=[7, 8, 7, 30, 5, 9],
    ...     kinds=["mask", "mask", "mask", "mask", "random", "kept"],
    ...     baseline_token_id=7,
    ... )
    >>> [results[key] for key in ("mask_accuracy", "mask_top2_accuracy", "mask_baseline_accuracy", "mask_tokens")]
    [0.5, 0.75, 0.5, 4]
    >>> results["random_accuracy"], results["kept_accuracy"], results["selected_tokens"]
    (0.0, 1.0, 6)
"""

_CITATION = """\
@inproceedings{devlin-etal-2019-bert,
    title = "{BERT}: Pre-training of Deep Bidirectional Transformers for Language Understanding",
    author = "Devlin, Jacob and Chang, Ming-Wei and Lee, Kenton and Toutanova, Kristina",
    booktitle = "Proceedings of the 2019 Conference of the North {A}merican Chapter of the Association for Computational Linguistics: Human Language Technologies",
    year = "2019",
    url = "https://aclanthology.org/N19-1423",
    pages = "4171--4186",
}
"""


def _features(prediction: datasets.Value | datasets.Sequence) -> datasets.Features:
    return datasets.Features(
        {"predictions": prediction, "references": datasets.Value("int64"), "kinds": datasets.Value("string")}
    )


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MaskedLmAccuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            # ranked predictions (top-k ids, best first) or one id per position
            features=[_features(datasets.Sequence(datasets.Value("int64"))), _features(datasets.Value("int64"))],
            reference_urls=["https://aclanthology.org/N19-1423"],
        )

    def _compute(self, predictions, references, kinds, baseline_token_id=None):
        ranked = [prediction if isinstance(prediction, list) else [prediction] for prediction in predictions]
        lengths = sorted({len(ids) for ids in ranked})
        if len(lengths) > 1 or 0 in lengths:
            raise ValueError(f"every prediction must list the same number k >= 1 of ids, got lengths {lengths}")
        top_k = lengths[0] if lengths else 1
        ranked = np.asarray(ranked, dtype=np.int64).reshape(len(ranked), top_k)  # (positions, k)
        labels = np.asarray(references, dtype=np.int64)
        hits = (ranked == labels[:, None]).any(axis=1) if top_k > 1 else None
        return kind_scores(np.asarray(kinds, dtype=str), labels, ranked[:, 0], baseline_token_id, hits, top_k=top_k)
