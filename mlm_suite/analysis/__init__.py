"""Analysing what an encoder represents.

* :mod:`~mlm_suite.analysis.embeddings`: contextual word embeddings, anisotropy, rogue dimensions, z-scoring,
  nearest-centroid word-sense disambiguation;
* :mod:`~mlm_suite.analysis.wordnet`: a WordNet 3.0 sense inventory and a sense-labelled WSD dataset.
"""
