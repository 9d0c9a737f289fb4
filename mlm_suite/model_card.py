"""Model cards: the ``README.md`` that ``push_to_hub`` uploads next to the weights.

Templates live in the repository's ``model_cards/`` folder (installed as ``mlm_suite.model_cards``)
and use ``string.Template`` placeholders (``$name``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from string import Template
from typing import Mapping


def markdown_table(rows: Mapping[str, object], header: tuple[str, str] = ("", "")) -> str:
    """A two-column markdown table of ``rows`` (floats shown with 4 decimals)."""
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    for key, value in rows.items():
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
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
