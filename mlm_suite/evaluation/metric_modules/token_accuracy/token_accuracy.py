"""Token accuracy and per-tag precision, recall and F1 of tag sets without entities (POS): an ``evaluate`` module.

The scores are :func:`mlm_suite.evaluation.entities.tag_scores`; this script only declares the inputs.
"""

import datasets
import evaluate

from mlm_suite.evaluation.entities import tag_scores

_DESCRIPTION = """\
Token-level scores of tag sequences whose tags are not an entity scheme (part-of-speech tags such as NN, VBZ,
PRP$): every token counts once. Accuracy, and for each tag t precision (tokens tagged t correctly / tokens
predicted t), recall (the same / tokens whose gold tag is t) and F1, with their macro averages (unweighted
means over the tags found in references or predictions) and micro averages (pooled counts; with one gold and
one predicted tag per token they all equal accuracy). For entity tags use entity_f1.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of list of str): predicted tags, one list per sentence.
    references (list of list of str): gold tags, the same shape as predictions.
Returns:
    accuracy: share of tokens whose predicted tag is the gold tag;
    micro_precision, micro_recall, micro_f1: pooled over all tags (equal to accuracy);
    macro_precision, macro_recall, macro_f1: means of the per-tag values (macro_f1 is the mean of the F1s);
    n_tokens: the number of tokens scored;
    per_tag: {tag: {"precision", "recall", "f1", "support"}} for every tag in references or predictions,
        sorted, support being the number of gold tokens. Undefined ratios (0/0) are 0.
Examples:
    >>> from mlm_suite.evaluation import load_metric
    >>> token_accuracy = load_metric("token_accuracy")
    >>> results = token_accuracy.compute(predictions=[["DT", "NN", "VBZ"], ["NN", "NN"]],
    ...                                  references=[["DT", "NN", "VBZ"], ["PRP", "VBD"]])
    >>> results["accuracy"], results["n_tokens"], results["per_tag"]["NN"]
    (0.6, 5, {'precision': 0.3333333333333333, 'recall': 1.0, 'f1': 0.5, 'support': 1})
"""

_CITATION = """\
@book{jurafsky-martin-slp3,
    title = {Speech and Language Processing (3rd ed. draft)},
    author = {Daniel Jurafsky and James H. Martin},
    chapter = {17: Sequence Labeling for Parts of Speech and Named Entities},
    url = {https://web.stanford.edu/~jurafsky/slp3/},
    year = {2024},
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TokenAccuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
            reference_urls=["https://web.stanford.edu/~jurafsky/slp3/"],
        )

    def _compute(self, predictions, references):
        return tag_scores(references, predictions)
