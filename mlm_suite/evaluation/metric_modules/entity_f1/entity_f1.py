"""Entity-level precision, recall and F1 (conlleval-exact or strict), overall and per type: an ``evaluate`` module.

The scores are :func:`mlm_suite.evaluation.entities.entity_scores`; this script only declares the inputs.
"""

import datasets
import evaluate

from mlm_suite.evaluation.entities import MODES, entity_scores

_DESCRIPTION = """\
Entity-level micro precision, recall and F1 of tag sequences, macro F1 over the entity types, the scores of
each type and token accuracy. Entities are read in one of two modes (seqeval's):

- "conlleval" (default) counts chunks exactly as the CoNLL shared-task script conlleval.pl does: lenient,
  "I-X" after "O" or after another type starts an entity, and a type switch inside a span ends one entity and
  starts another. The scheme is only used to check that every tag belongs to it.
- "strict" reads only well-formed entities of the scheme (IOB2 for "BIO", IOB1 for "IOB1" and "IO", IOBES for
  "BIOES"), e.g. in BIO an "I-X" after "O" is no entity at all. It needs a scheme.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of list of str): predicted tags, one list per sentence.
    references (list of list of str): gold tags, the same shape as predictions.
    mode (str): "conlleval" (default) or "strict".
    scheme (str or None): the tag scheme, "IO", "BIO" (default), "IOB1" or "BIOES" (aliases such as "IOB2" and
        "IOBES" are accepted); None only in conlleval mode (no check of the prefixes).
Returns:
    precision, recall, f1: micro-averaged over all entities;
    macro_f1: mean of the per-type F1s;
    accuracy: token accuracy (share of tags equal to the gold tag);
    per_type: {type: {"precision", "recall", "f1", "support"}} for every type in references or predictions,
        support being the number of gold entities. Undefined ratios (0/0) are 0.
Examples:
    >>> from mlm_suite.evaluation import load_metric
    >>> entity_f1 = load_metric("entity_f1")
    >>> predictions = [["B-PER", "I-PER", "O", "B-LOC"], ["I-ORG", "O"]]
    >>> references = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    >>> results = entity_f1.compute(predictions=predictions, references=references)
    >>> results["f1"], results["per_type"]["ORG"]
    (1.0, {'precision': 1.0, 'recall': 1.0, 'f1': 1.0, 'support': 1})
    >>> strict = entity_f1.compute(predictions=predictions, references=references, mode="strict", scheme="BIO")
    >>> round(strict["f1"], 4), strict["per_type"]["ORG"]
    (0.8, {'precision': 0.0, 'recall': 0.0, 'f1': 0.0, 'support': 1})
"""

_CITATION = """\
@inproceedings{tjong-kim-sang-buchholz-2000-introduction,
    title = "Introduction to the {C}o{NLL}-2000 Shared Task: Chunking",
    author = "Tjong Kim Sang, Erik F. and Buchholz, Sabine",
    booktitle = "Fourth Conference on Computational Natural Language Learning and the Second Learning Language in Logic Workshop",
    year = "2000",
    url = "https://aclanthology.org/W00-0726",
    pages = "127--132",
}
@misc{seqeval,
    title = {{seqeval}: A Python framework for sequence labeling evaluation},
    url = {https://github.com/chakki-works/seqeval},
    note = {Software available from https://github.com/chakki-works/seqeval},
    author = {Hiroki Nakayama},
    year = {2018},
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class EntityF1(evaluate.Metric):
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
            reference_urls=["https://github.com/chakki-works/seqeval", "https://www.clips.uantwerpen.be/conll2000/chunking/"],
        )

    def _compute(self, predictions, references, mode=MODES[0], scheme="BIO"):
        return entity_scores(references, predictions, scheme=scheme, mode=mode)
