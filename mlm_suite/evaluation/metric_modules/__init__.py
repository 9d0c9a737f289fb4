"""mlm_suite's metrics as Hugging Face ``evaluate`` modules, installed with the package.

Each metric is a folder ``<name>/`` holding the module script ``<name>.py`` and its metric card
``README.md``, the layout ``evaluate.load`` reads from a local path: it copies the script into its
modules cache and imports it from there, without any Hub request. The scripts are thin: they call
the library functions (:func:`mlm_suite.evaluation.entities.entity_scores`, :func:`mlm_suite.evaluation.entities.tag_scores`,
:func:`mlm_suite.evaluation.masked_lm.kind_scores`), so each metric has one implementation::

    from mlm_suite.evaluation import load_metric
    entity_f1 = load_metric("entity_f1")          # = evaluate.load(str(metric_path("entity_f1")))
    entity_f1.compute(predictions=[["B-PER", "O"]], references=[["B-PER", "O"]], mode="strict", scheme="BIO")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The metric modules shipped with mlm_suite.
METRIC_NAMES = ("entity_f1", "token_accuracy", "masked_lm_accuracy")


def metric_path(name: str) -> Path:
    """The folder of metric ``name`` inside the installed package, for ``evaluate.load(str(path))``."""
    if name not in METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; mlm_suite ships {', '.join(METRIC_NAMES)}")
    return Path(__file__).resolve().parent / name


def load_metric(name: str, **kwargs: Any) -> Any:
    """``evaluate.load`` of the metric module ``name`` shipped with mlm_suite (no Hub access).

    ``kwargs`` go to ``evaluate.load`` (``experiment_id``, ``num_process``, ``process_id``, ``cache_dir`` ...).
    """
    import evaluate

    return evaluate.load(str(metric_path(name)), **kwargs)
