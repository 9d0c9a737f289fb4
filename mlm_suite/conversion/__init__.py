"""Convert Hugging Face checkpoints of the BERT-like families into mlm_suite checkpoints, and back: one module per
family maps its configuration and weight names both ways (:mod:`.bert`, :mod:`.roberta` (and XLM-RoBERTa),
:mod:`.distilbert`, :mod:`.electra`, :mod:`.modernbert`), :mod:`.families` lists them, :mod:`.core` holds what they share, :mod:`.checkpoint` converts a folder
(:func:`convert_checkpoint`) and :mod:`.export_native` writes an mlm_suite folder as the family's own class
(:func:`export_native_checkpoint`); :mod:`.minilm` converts the jobs' default start once. See
docs/models.md#converting-checkpoints.
"""

from mlm_suite.conversion.checkpoint import convert_checkpoint
from mlm_suite.conversion.families import FAMILIES, FAMILY_NAMES, REGISTRY
from mlm_suite.conversion.export_native import export_native_checkpoint
from mlm_suite.conversion.minilm import CONVERTED_MINILM_FOLDER, converted_minilm_dir

__all__ = [
    "CONVERTED_MINILM_FOLDER",
    "FAMILIES",
    "FAMILY_NAMES",
    "REGISTRY",
    "convert_checkpoint",
    "converted_minilm_dir",
    "export_native_checkpoint",
]
