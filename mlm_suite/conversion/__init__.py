"""Convert Hugging Face checkpoints of the BERT-like families into mlm_suite checkpoints: one module per family
maps its configuration and weight names (:mod:`.bert`, :mod:`.roberta` (and XLM-RoBERTa), :mod:`.distilbert`,
:mod:`.electra`), :mod:`.core` holds what they share and :mod:`.checkpoint` converts a folder
(:func:`convert_checkpoint`); :mod:`.minilm` converts the jobs' default start once. See docs/models.md#converting-checkpoints.
"""

from mlm_suite.conversion.checkpoint import FAMILIES, convert_checkpoint
from mlm_suite.conversion.minilm import CONVERTED_MINILM_FOLDER, converted_minilm_dir

__all__ = ["CONVERTED_MINILM_FOLDER", "FAMILIES", "convert_checkpoint", "converted_minilm_dir"]
