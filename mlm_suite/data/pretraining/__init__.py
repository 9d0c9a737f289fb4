"""The pretraining pipeline: documents (:mod:`~mlm_suite.data.pretraining.documents`) become model rows, chunked
(:mod:`~mlm_suite.data.pretraining.chunking`), packed (:mod:`~mlm_suite.data.pretraining.packing`) or NSP sentence
pairs (:mod:`~mlm_suite.data.pretraining.nsp`), by :mod:`~mlm_suite.data.pretraining.rows`; in memory, in a prepared
folder (:mod:`~mlm_suite.data.pretraining.prepared`) or from a stream (:mod:`~mlm_suite.data.pretraining.streaming`),
each a :class:`~mlm_suite.data.pretraining.corpora.PretrainingCorpus`. Rows are masked in batches
(:mod:`~mlm_suite.data.pretraining.masking`), whose masking rate and size follow the step
(:mod:`~mlm_suite.data.pretraining.schedules`, :mod:`~mlm_suite.data.pretraining.token_budget`); several languages
are drawn by :mod:`~mlm_suite.data.pretraining.languages`. WordPiece and Unigram vocabularies are trained by
:mod:`~mlm_suite.data.pretraining.vocabulary`, and extended by :mod:`~mlm_suite.data.pretraining.extension`. See docs/data.md and docs/pretraining.md.
"""

from mlm_suite.data.pretraining.chunking import WORD_ID_SENTINEL, tokenize_for_mlm
from mlm_suite.data.pretraining.masking import DataCollatorForMaskedLM, MaskingEpochCallback, count_tokens
from mlm_suite.data.pretraining.nsp import build_nsp_examples, nsp_map_function, split_sentences
from mlm_suite.data.pretraining.packing import document_boundaries, pack_documents, packing_map_function
from mlm_suite.data.pretraining.languages import language_sampling_probs, sample_multilingual_corpus
from mlm_suite.data.pretraining.vocabulary import train_unigram_tokenizer, train_wordpiece_tokenizer

__all__ = [
    "WORD_ID_SENTINEL",
    "DataCollatorForMaskedLM",
    "MaskingEpochCallback",
    "build_nsp_examples",
    "count_tokens",
    "document_boundaries",
    "language_sampling_probs",
    "nsp_map_function",
    "pack_documents",
    "packing_map_function",
    "sample_multilingual_corpus",
    "split_sentences",
    "tokenize_for_mlm",
    "train_unigram_tokenizer",
    "train_wordpiece_tokenizer",
]
