"""mlm_suite's metrics as Hugging Face ``evaluate`` modules, installed with the package: one folder per metric
with its script and metric card, the layout ``evaluate.load`` reads from a local path without the Hub. The
scripts call the library functions, so each metric has one implementation. See docs/metrics.md.
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
