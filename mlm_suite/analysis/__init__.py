"""Analysing what an encoder represents: contextual word embeddings, anisotropy and rogue dimensions, z-scoring,
contextual similarity, and word-sense disambiguation on a WordNet 3.0 sense inventory. See docs/analysis.md.
"""

from mlm_suite.analysis.embeddings import (
    ContextualEmbedder,
    RogueDimensions,
    SenseCentroidClassifier,
    Standardizer,
    TextEmbedding,
    anisotropy,
    contextual_similarity,
    layerwise_anisotropy,
    most_frequent_sense_baseline,
    rogue_dimensions,
    similarity_in_context,
)
from mlm_suite.analysis.wordnet import (
    WordNet,
    WSDInstance,
    WSDSplit,
    evaluate_wsd,
    read_jsonl,
    wordnet_wsd_dataset,
    write_jsonl,
)

__all__ = [
    "ContextualEmbedder",
    "RogueDimensions",
    "SenseCentroidClassifier",
    "Standardizer",
    "TextEmbedding",
    "WSDInstance",
    "WSDSplit",
    "WordNet",
    "anisotropy",
    "contextual_similarity",
    "evaluate_wsd",
    "layerwise_anisotropy",
    "most_frequent_sense_baseline",
    "read_jsonl",
    "rogue_dimensions",
    "similarity_in_context",
    "wordnet_wsd_dataset",
    "write_jsonl",
]
