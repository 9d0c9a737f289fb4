"""Scoring what the models predict.

* :mod:`~mlm_suite.evaluation.entities`: entity- and token-level scores (conlleval and strict seqeval), a
  ``compute_metrics`` for token classification, the paired bootstrap;
* :mod:`~mlm_suite.evaluation.tagging_metrics`: scoring a token-classification model inside the ``Trainer``
  (``finetune-ner``'s ``compute_metrics``, CRF decoding, the predictions kept, the per-split figures);
* :mod:`~mlm_suite.evaluation.baseline`: ``--compare_hf``, HF's ``BertForTokenClassification`` trained with the same
  recipe and the paired bootstrap against it;
* :mod:`~mlm_suite.evaluation.classification`: accuracy and macro-F1 (or correlations) of sequence and pair
  classification, the predictions of unlabelled splits and the confusion matrices;
* :mod:`~mlm_suite.evaluation.masked_lm`: masked-language-model accuracy per corruption kind, the fill-mask probe;
* :mod:`~mlm_suite.evaluation.retrieval`: recall@k, MRR@10, nDCG@10, reranking;
* :mod:`~mlm_suite.evaluation.metric_modules`: the same metrics as ``evaluate`` modules;
* :mod:`~mlm_suite.evaluation.plots`: the plots the jobs write next to their results.
"""
