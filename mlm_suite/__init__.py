"""mlm_suite: a BERT-family bidirectional encoder for Hugging Face Transformers.

Importing the package registers ``MlmSuiteConfig`` (model_type ``"mlm_suite"``) and every head
with the ``transformers`` Auto classes; the built-in ``bert`` mapping is left alone.
"""

import transformers

from .model import (
    AUTO_CLASSES,
    PRESETS,
    MlmSuiteConfig,
    MlmSuiteForMaskedLM,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForPairClassification,
    MlmSuiteForPreTraining,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSentenceEmbedding,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
    MlmSuitePreTrainedModel,
)
from .conversion import convert_checkpoint, export_native_checkpoint

__version__ = "0.1.0"


def _register_auto_classes() -> None:
    transformers.AutoConfig.register(MlmSuiteConfig.model_type, MlmSuiteConfig, exist_ok=True)
    for auto_name, class_name in AUTO_CLASSES.items():
        getattr(transformers, auto_name).register(MlmSuiteConfig, globals()[class_name], exist_ok=True)


_register_auto_classes()

__all__ = [
    "PRESETS",
    "MlmSuiteConfig",
    "MlmSuiteForMaskedLM",
    "MlmSuiteForNextSentencePrediction",
    "MlmSuiteForPairClassification",
    "MlmSuiteForPreTraining",
    "MlmSuiteForQuestionAnswering",
    "MlmSuiteForSentenceEmbedding",
    "MlmSuiteForSequenceClassification",
    "MlmSuiteForTokenClassification",
    "MlmSuiteModel",
    "MlmSuitePreTrainedModel",
    "convert_checkpoint",
    "export_native_checkpoint",
]
