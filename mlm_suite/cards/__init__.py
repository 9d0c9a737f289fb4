"""Model cards: the ``README.md`` that ``push_to_hub`` uploads next to the weights.

A job builds one card object (:mod:`~mlm_suite.cards.card`: a dataclass per template in ``templates/``) with the
section functions of its kind (:mod:`~mlm_suite.cards.pretraining`, :mod:`~mlm_suite.cards.finetuning`,
:mod:`~mlm_suite.cards.tagging`, :mod:`~mlm_suite.cards.seeds`) and hands it to
:meth:`JobTrainer.publish <mlm_suite.training.trainer.JobTrainer.publish>`, the only writer
(:func:`~mlm_suite.cards.rendering.render_card`). The front matter is built in :mod:`~mlm_suite.cards.metadata`.
This package never imports the trainer. See docs/models.md#what-the-jobs-write.
"""

from mlm_suite.cards.card import (
    FinetunedCard, JobCard, PretrainingCard, RetrievalCard, SeedSummaryCard, TrainedModelCard,
)  # fmt: skip
from mlm_suite.cards.finetuning import card_base_model, initialisation, training_summary
from mlm_suite.cards.metadata import (
    MINILM_HUB_ID, PROJECT_LICENSE, RANDOM_START, CardDataset, CardScore, base_model_fields, base_model_license,
    base_model_text, card_scores, front_matter, model_card_data, update_card_data,
)  # fmt: skip
from mlm_suite.cards.pretraining import HELD_OUT_OF_TRAIN, PretrainingRecipe, default_source, pretraining_card
from mlm_suite.cards.rendering import label_table, markdown_table, render_card
from mlm_suite.cards.seeds import seed_summary_card
from mlm_suite.cards.tagging import (
    ner_card_score_names, ner_labels_section, ner_metrics_section, ner_summary, ner_task_description,
)  # fmt: skip

__all__ = [
    "HELD_OUT_OF_TRAIN",
    "MINILM_HUB_ID",
    "PROJECT_LICENSE",
    "RANDOM_START",
    "CardDataset",
    "CardScore",
    "FinetunedCard",
    "JobCard",
    "PretrainingCard",
    "PretrainingRecipe",
    "RetrievalCard",
    "SeedSummaryCard",
    "TrainedModelCard",
    "base_model_fields",
    "base_model_license",
    "base_model_text",
    "card_base_model",
    "card_scores",
    "default_source",
    "front_matter",
    "initialisation",
    "label_table",
    "markdown_table",
    "model_card_data",
    "ner_card_score_names",
    "ner_labels_section",
    "ner_metrics_section",
    "ner_summary",
    "ner_task_description",
    "pretraining_card",
    "render_card",
    "seed_summary_card",
    "training_summary",
    "update_card_data",
]
