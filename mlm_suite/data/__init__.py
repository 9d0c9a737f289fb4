"""Data pipeline: tokenisation with word ids, dynamic masking, NSP pairs, packing, fast padding collators,
word/sub-word label alignment and entity prediction on raw text, WordPiece training and multilingual sampling.
The jobs' input files are read in :mod:`mlm_suite.data.inputs.readers`, their built-in datasets listed in
:mod:`mlm_suite.data.inputs.builtin`. See docs/data.md."""

from mlm_suite.data.finetuning.alignment import (
    align_labels,
    b_to_i_map,
    document_word_predictions,
    predict_entities,
    tokenize_and_align,
    word_predictions,
)
from mlm_suite.data.pretraining.chunking import WORD_ID_SENTINEL, tokenize_for_mlm
from mlm_suite.data.pretraining.masking import DataCollatorForMaskedLM, MaskingEpochCallback, count_tokens
from mlm_suite.data.pretraining.nsp import build_nsp_examples, nsp_map_function, split_sentences
from mlm_suite.data.pretraining.packing import document_boundaries, pack_documents, packing_map_function
from mlm_suite.data.padding import DataCollatorForPadding, DataCollatorForTokenLabels
from mlm_suite.data.pretraining.vocabulary import language_sampling_probs, sample_multilingual_corpus, train_wordpiece_tokenizer

__all__ = [
    "WORD_ID_SENTINEL",
    "DataCollatorForMaskedLM",
    "DataCollatorForPadding",
    "DataCollatorForTokenLabels",
    "MaskingEpochCallback",
    "align_labels",
    "b_to_i_map",
    "build_nsp_examples",
    "count_tokens",
    "document_boundaries",
    "document_word_predictions",
    "language_sampling_probs",
    "nsp_map_function",
    "pack_documents",
    "packing_map_function",
    "predict_entities",
    "sample_multilingual_corpus",
    "split_sentences",
    "tokenize_and_align",
    "tokenize_for_mlm",
    "train_wordpiece_tokenizer",
    "word_predictions",
]
