"""Convert Hugging Face checkpoints of the BERT-like families into mlm_suite checkpoints: one module per family
maps its configuration and weight names (:mod:`.bert`, :mod:`.roberta` (and XLM-RoBERTa), :mod:`.distilbert`,
:mod:`.electra`), :mod:`.core` holds what they share and :mod:`.checkpoint` converts a folder
(:func:`convert_checkpoint`). See docs/models.md#converting-checkpoints.
"""

from .checkpoint import FAMILIES, convert_checkpoint

__all__ = ["FAMILIES", "convert_checkpoint"]
