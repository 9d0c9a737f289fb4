"""Data pipeline for MLM pretraining: tokenisation with word ids, dynamic masking, NSP pairs, packing; fast
padding collators for fine-tuning. The jobs' input files and Hub datasets are read in :mod:`mlm_suite.data.readers`,
their labels resolved in :mod:`mlm_suite.data.labels`."""

from mlm_suite.data.chunking import WORD_ID_SENTINEL, tokenize_for_mlm
from mlm_suite.data.masking import DataCollatorForMaskedLM, MaskingEpochCallback, count_tokens
from mlm_suite.data.nsp import build_nsp_examples, nsp_map_function, split_sentences
from mlm_suite.data.packing import document_boundaries, pack_documents, packing_map_function
from mlm_suite.data.padding import DataCollatorForPadding, DataCollatorForTokenLabels

__all__ = [
    "WORD_ID_SENTINEL",
    "DataCollatorForMaskedLM",
    "DataCollatorForPadding",
    "DataCollatorForTokenLabels",
    "MaskingEpochCallback",
    "build_nsp_examples",
    "count_tokens",
    "document_boundaries",
    "nsp_map_function",
    "pack_documents",
    "packing_map_function",
    "split_sentences",
    "tokenize_for_mlm",
]
