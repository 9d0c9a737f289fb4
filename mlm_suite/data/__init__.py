"""Data pipelines, grouped by the job that runs them (see docs/data.md):

* :mod:`mlm_suite.data.inputs`: the jobs' input files and Hub datasets read into rows, one reader per format; the
  built-in datasets and the registry downloads they are read from.
* :mod:`mlm_suite.data.pretraining`: documents → model rows (chunked, packed or NSP pairs; in memory, prepared or
  streamed) → masked batches, the masking-rate and batch-size schedules, and WordPiece vocabularies.
* :mod:`mlm_suite.data.finetuning`: labels (which rows have one, the label list), tag schemes, word/sub-token label
  alignment and entity prediction on raw text, and class-balanced training subsets.

Shared by both pipelines: the padding collators and their primitives (:mod:`mlm_suite.data.padding`), flattened
batches (:mod:`mlm_suite.data.flattening`), the options of ``datasets.map`` (:mod:`mlm_suite.data.mapping`) and the
word splitter of raw text (:mod:`mlm_suite.data.words`).
"""
