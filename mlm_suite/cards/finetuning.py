"""What the fine-tuning jobs' cards say of a run: the starting weights and the hyper-parameter table.

The jobs hand these, with their own sections, to :class:`~mlm_suite.cards.card.FinetunedCard` or
:class:`~mlm_suite.cards.card.RetrievalCard`. See docs/models.md#what-the-jobs-write.
"""

from __future__ import annotations

from pathlib import Path

from mlm_suite.cards.rendering import markdown_table


def initialisation(model_path: str, init: str) -> dict[str, str]:
    """The hyper-parameter row of the starting weights (none for the usual ``init`` ``pretrained``)."""
    if init == "pretrained":
        return {}
    return {"initialisation": f"random (the architecture and tokenizer of `{Path(model_path).name}`, not its weights)"}


def card_base_model(model_path: str, init: str) -> str | None:
    """The checkpoint a card names as its base model: none for a random initialisation."""
    return model_path if init == "pretrained" else None


def training_summary(
    *,
    num_train_epochs: float,
    max_steps: int,
    learning_rate: float,
    lr_scheduler_type: object,
    warmup_steps: float,
    optimizer: object,
    weight_decay: float,
    batch_size: int,
    seed: int,
    **extra: object,
) -> str:
    """Markdown table of the hyper-parameters that decide a fine-tuning run, then the job's ``extra`` rows;
    ``max_steps`` > 0 replaces the epochs, as it does in training."""
    rows: dict[str, object] = {
        "epochs": num_train_epochs if max_steps <= 0 else f"max_steps={max_steps}",
        "learning rate": learning_rate,
        "schedule": f"{_plain(lr_scheduler_type)}, warmup {warmup_steps}",
        "optimizer": _plain(optimizer),
        "weight decay": weight_decay,
        "batch size (per device)": batch_size,
        "seed": seed,
    }
    rows.update(extra)
    return markdown_table(rows, ("hyper-parameter", "value"))


def _plain(value: object) -> str:
    """An enum's value (``SchedulerType.LINEAR`` → ``linear``), anything else as text."""
    return str(getattr(value, "value", value))
