"""Scoring what the models predict: entity and tag scores, masked-LM accuracy per corruption kind, retrieval
scores and reranking, the paired bootstrap and t-intervals, and the same metrics as ``evaluate`` modules. The
modules the jobs use beside these (``tagging_metrics``, ``baseline``, ``classification``, ``plots``) are
imported from their own paths. See docs/metrics.md.
"""

from mlm_suite.evaluation.entities import entity_scores, make_compute_metrics, paired_bootstrap, tag_scores
from mlm_suite.evaluation.intervals import mean_interval
from mlm_suite.evaluation.masked_lm import (
    fill_mask_probe,
    kind_scores,
    make_mlm_compute_metrics,
    preprocess_logits_for_mlm_metrics,
    probe_sentences,
)
from mlm_suite.evaluation.metric_modules import METRIC_NAMES, load_metric, metric_path
from mlm_suite.evaluation.retrieval import RetrievalMetrics, evaluate_retrieval, rerank, retrieval_metrics

__all__ = [
    "METRIC_NAMES",
    "RetrievalMetrics",
    "entity_scores",
    "evaluate_retrieval",
    "fill_mask_probe",
    "kind_scores",
    "load_metric",
    "make_compute_metrics",
    "make_mlm_compute_metrics",
    "mean_interval",
    "metric_path",
    "paired_bootstrap",
    "preprocess_logits_for_mlm_metrics",
    "probe_sentences",
    "rerank",
    "retrieval_metrics",
    "tag_scores",
]
