"""The card a job hands to ``JobTrainer.publish``: which card it is and everything that fills it.

One dataclass per template of ``templates/``; the job says what kind of card it writes by the class it builds.
Each field is a placeholder of the template (markdown made by the section functions of this package) or, for the
card of a trained model, what its front matter is built from (:func:`~mlm_suite.cards.metadata.model_card_data`).
Only :class:`~mlm_suite.training.trainer.JobTrainer` renders and writes a card. See docs/models.md#what-the-jobs-write.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from huggingface_hub import ModelCardData

from mlm_suite.cards.metadata import CardDataset, CardScore, base_model_text, model_card_data


@dataclass(kw_only=True)
class JobCard:
    """A ``README.md``: the template ``templates/<template>.md`` filled with the fields of a subclass."""

    template: ClassVar[str]

    def sections(self) -> dict[str, object]:
        """The template's placeholders (besides ``model_name`` and ``model_id``, which the writer knows)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def card_data(self, model_name: str) -> ModelCardData | None:
        """The front matter; None for a card without one."""
        return None


@dataclass(kw_only=True)
class TrainedModelCard(JobCard):
    """The card of a model a job trained: the metadata fields below are its front matter, not placeholders.

    ``base_model``: the checkpoint trained from, a folder or a Hub id (None: from scratch or a random
    initialisation); ``dataset``: the data trained on and scored; ``scores``: the headline results;
    ``throughput``: what the run delivered (markdown, set by the trainer: :meth:`with_throughput`), shown after the
    training section.
    """

    pipeline_tag: str | None = None
    base_model: str | os.PathLike | None = None
    dataset: CardDataset | None = None
    scores: Sequence[CardScore] = ()
    throughput: str = ""

    def sections(self) -> dict[str, object]:
        metadata = {field.name for field in dataclasses.fields(TrainedModelCard)}
        sections = {name: value for name, value in super().sections().items() if name not in metadata}
        if self.throughput:
            sections["training"] = f"{sections['training']}\n\n{self.throughput}"
        return sections

    def with_throughput(self, throughput: str) -> TrainedModelCard:
        """This card with ``throughput`` (markdown) after its training section."""
        return dataclasses.replace(self, throughput=throughput)

    def card_data(self, model_name: str) -> ModelCardData:
        return model_card_data(self.template, model_name=model_name, pipeline_tag=self.pipeline_tag,
                               base_model=self.base_model, dataset=self.dataset, scores=self.scores)


@dataclass(kw_only=True)
class PretrainingCard(TrainedModelCard):
    """``mlm-suite pretrain``'s card (built by :func:`~mlm_suite.cards.pretraining.pretraining_card`);
    ``fill_mask_example``: the snippet's sentence, a Python string literal with the tokenizer's own mask token."""

    template: ClassVar[str] = "pretraining"
    architecture: str
    origin: str
    objective: str
    architecture_table: str
    data: str
    training: str
    metrics: str
    fill_mask_example: str


@dataclass(kw_only=True)
class _FinetunedModelCard(TrainedModelCard):
    """What the cards of the fine-tuning jobs share; the text names the starting weights (``base_model``)."""

    task_description: str
    data: str
    training: str
    metrics: str

    def sections(self) -> dict[str, object]:
        return {**super().sections(), "base_model_text": base_model_text(self.base_model)}


@dataclass(kw_only=True)
class FinetunedCard(_FinetunedModelCard):
    """The card of a token, text or pair classifier (or regressor); ``auto_class`` loads it in the usage snippet."""

    template: ClassVar[str] = "finetuned"
    auto_class: str
    labels: str


@dataclass(kw_only=True)
class RetrievalCard(_FinetunedModelCard):
    """``finetune-retrieval``'s card: ``embeddings`` describes them, ``pooling_code`` pools them in the snippet."""

    template: ClassVar[str] = "retrieval"
    embeddings: str
    pooling_code: str


@dataclass(kw_only=True)
class SeedSummaryCard(JobCard):
    """``mlm-suite seeds``' summary of its runs (built by :func:`~mlm_suite.cards.seeds.seed_summary_card`)."""

    template: ClassVar[str] = "seeds"
    title: str
    command: str
    scores_table: str
    figures: str
