"""Rendering a card: its template filled by ``string.Template`` (``$name`` placeholders), and markdown tables.

A card's usage snippet must run as written where mlm_suite is not installed: it loads ``model_id`` (the Hub
repository the model is pushed to, else ``--hub_model_id``, else the output folder, as the writer decides) with
``trust_remote_code=True`` for the model *and* the tokenizer. See docs/models.md#what-the-jobs-write.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from importlib import resources
from string import Template
from typing import Any

from mlm_suite.cards.card import JobCard
from mlm_suite.cards.metadata import front_matter, update_card_data


def render_card(card: JobCard, *, model_name: str, model_id: str, **metadata_updates: Any) -> str:
    """The text of ``card``: its template with ``model_name``, ``model_id`` (as a Python string literal, for the
    snippet's ``from_pretrained(...)``), its sections and, for a card with metadata, ``$metadata`` (its front
    matter, updated by ``metadata_updates``: the arguments of ``Trainer.create_model_card``, see
    :func:`~mlm_suite.cards.metadata.update_card_data`). Every placeholder must be given (else a KeyError)."""
    data = card.card_data(model_name)
    if data is None and metadata_updates:
        raise TypeError(f"a {type(card).__name__} has no metadata to update with {sorted(metadata_updates)}")
    text = (resources.files(__package__) / "templates" / f"{card.template}.md").read_text(encoding="utf-8")
    values = {key: str(value) for key, value in card.sections().items()}
    values |= {"model_name": model_name, "model_id": json.dumps(model_id)}
    if data is not None:
        values["metadata"] = front_matter(update_card_data(data, **metadata_updates))
    return Template(text).substitute(values)


def table_cell(text: object) -> str:
    """``text`` as a markdown table cell, shown as written: a ``|`` would split the row (``VBG|NN``), and a Hub card
    renders HTML, where ``<mask>`` or ``<s>`` would vanish as an unknown tag."""
    return html.escape(str(text), quote=False).replace("|", "\\|")


def markdown_table(rows: Mapping[str, object], header: tuple[str, str] = ("", "")) -> str:
    """A two-column markdown table of ``rows`` (floats shown with 4 decimals, smaller ones such as a
    learning rate of 5e-05 with 4 significant digits)."""
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    for key, value in rows.items():
        if isinstance(value, float):
            shown = f"{value:.4f}" if value == 0 or abs(value) >= 1e-3 else f"{value:.4g}"
        else:
            shown = str(value)
        lines.append(f"| {key} | {shown} |")
    return "\n".join(lines)


def label_table(id2label: Mapping[int, str]) -> str:
    return markdown_table({str(i): id2label[i] for i in sorted(id2label)}, ("id", "label"))
