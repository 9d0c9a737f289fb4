"""The model code: the folder ``save_pretrained`` copies next to the weights for ``trust_remote_code`` users. See docs/models.md."""

from .configuration_mlm_suite import PRESETS, MlmSuiteConfig
from .modeling_mlm_suite import (
    AUTO_CLASSES,
    MlmSuiteForMaskedLM,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForPairClassification,
    MlmSuiteForPreTraining,
    MlmSuiteForPreTrainingOutput,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSentenceEmbedding,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
    MlmSuitePreTrainedModel,
    SentenceEmbeddingOutput,
    SequenceLayout,
    in_batch_negatives_loss,
)

__all__ = [
    "AUTO_CLASSES",
    "PRESETS",
    "MlmSuiteConfig",
    "MlmSuiteForMaskedLM",
    "MlmSuiteForNextSentencePrediction",
    "MlmSuiteForPairClassification",
    "MlmSuiteForPreTraining",
    "MlmSuiteForPreTrainingOutput",
    "MlmSuiteForQuestionAnswering",
    "MlmSuiteForSentenceEmbedding",
    "MlmSuiteForSequenceClassification",
    "MlmSuiteForTokenClassification",
    "MlmSuiteModel",
    "MlmSuitePreTrainedModel",
    "SentenceEmbeddingOutput",
    "SequenceLayout",
    "in_batch_negatives_loss",
]
