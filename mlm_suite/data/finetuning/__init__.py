"""The fine-tuning pipeline's data: labels (:mod:`~mlm_suite.data.finetuning.labels`), entity tag schemes
(:mod:`~mlm_suite.data.finetuning.tagging`), word ↔ sub-token label alignment and entity prediction on raw text
(:mod:`~mlm_suite.data.finetuning.alignment`), and class-balanced nested training subsets
(:mod:`~mlm_suite.data.finetuning.subsets`). See docs/finetuning.md.
"""

from mlm_suite.data.finetuning.alignment import (
    align_labels,
    b_to_i_map,
    document_word_predictions,
    predict_entities,
    tokenize_and_align,
    word_predictions,
)

__all__ = [
    "align_labels",
    "b_to_i_map",
    "document_word_predictions",
    "predict_entities",
    "tokenize_and_align",
    "word_predictions",
]
