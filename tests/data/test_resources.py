"""``mlm_suite.data.inputs.downloads``: the default fine-tuning start (the damaged-cache and concurrency paths are in
tests/e2e/test_hostile_files.py)."""

from __future__ import annotations

import json

from mlm_suite.data.inputs import downloads


def test_the_default_fine_tuning_start_keeps_the_mean_pooling_minilm_was_trained_for():
    """Chosen on validation by benchmarks/bench_default_pooling.py; a cache converted under the earlier [CLS] rule
    sits in another folder and is not reused."""
    folder = downloads.converted_minilm_dir()
    assert folder.name == downloads.CONVERTED_MINILM_FOLDER != "minilm-l6-mlm_suite"
    config = json.loads((folder / "config.json").read_text())
    assert (config["classifier_pooling"], config["sentence_pooling"], config["normalize_embeddings"]) == ("mean", "mean", True)
