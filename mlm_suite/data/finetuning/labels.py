"""Labels of the fine-tuning jobs: which rows have one, what a Hub column's class ids are called, the label list.

* whether a split has labels (:func:`split_is_labelled`, :func:`is_missing_label`): a split is labelled on every
  row or on none (then predicted, not scored), a split other than train all -1 is unlabelled
  (:func:`hidden_label_splits`), and a label is never NaN or infinite (:func:`check_label`);
* Hub datasets: the names of a ``ClassLabel`` column (:func:`class_label_names`), the labels of each split
  (:func:`hub_split_labels`; -1, :data:`HIDDEN_LABEL`, is a hidden label) and tag sequences (:func:`hub_tag_sequences`);
* the label list of the model: classes found in the data (:func:`class_names`), checked against ``--label_list``
  (:func:`check_labels_listed`) and a fine-tuned checkpoint's (:func:`resolve_label_list`), ``id2label``/``label2id``
  for the config (:func:`label_maps`), classification or regression decided from the whole label set
  (:func:`infer_task_type`, :func:`labels_as`), and a class set that training can learn (:func:`check_class_set`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from transformers import PretrainedConfig

from mlm_suite.errors import UsageError
from mlm_suite.model.modeling_mlm_suite import has_placeholder_labels


# --------------------------------------------------------------------------------------------
# Which rows have labels; Hub label columns
# --------------------------------------------------------------------------------------------
def class_label_names(dataset: Any, column_name: str) -> list[str] | None:
    """Names of a Hub dataset's ``ClassLabel`` column (or of a sequence of them), else None."""
    feature = dataset.features[column_name]
    feature = getattr(feature, "feature", feature)  # Sequence(ClassLabel) for token tags
    return list(feature.names) if hasattr(feature, "names") else None


#: The value ``datasets`` stores for a hidden label in a ``ClassLabel`` column (GLUE's test splits).
HIDDEN_LABEL = -1


def is_missing_label(value: Any) -> bool:
    """Whether a label read from a file is absent: null/None, or an empty (blank) string such as a CSV's empty cell."""
    return value is None or (isinstance(value, str) and not value.strip())


def split_is_labelled(
    labels: Sequence[Any], source: str, missing: Any = is_missing_label, where: Callable[[int], str] | None = None
) -> bool:
    """True when every row of a split has a label, False when none has (an unlabelled split, to predict only).

    ``missing(label)`` says whether a row's label is absent (default :func:`is_missing_label`); ``where(row)`` names
    a row in the message (default ``row <n>``). An empty split counts as labelled.

    Raises:
        UsageError: some rows have labels and others not, naming ``source`` (the split), the count, the first row
            without one and its value.
    """
    absent = [row for row, label in enumerate(labels) if missing(label)]
    if not absent:
        return True
    if len(absent) == len(labels):
        return False
    first = absent[0]
    place = where(first) if where is not None else f"row {first}"
    raise UsageError(
        f"{source}: {len(absent)} of {len(labels)} rows have no label (label {labels[first]!r}), the first on {place}, "
        "and the others have labels; label every row of a split, or none (an unlabelled split is predicted, not scored)"
    )


def label_number(label: Any) -> float | None:
    """The number a label holds (a JSON number, or a text such as ``"2"``, ``"1.0"``, ``"nan"``), else None."""
    if isinstance(label, bool):
        return None
    if isinstance(label, (int, float)):
        return float(label)
    if isinstance(label, str):
        try:
            return float(label)
        except ValueError:
            return None
    return None


def check_label(label: Any, where: str) -> None:
    """Refuse a label that is NaN or infinite (``where`` names the file and line, or the split and row): it is
    neither a class nor a score to learn."""
    number = label_number(label)
    if number is not None and not math.isfinite(number):
        raise UsageError(
            f"{where}: label {label!r} is {'NaN' if math.isnan(number) else 'infinite'}; a label is a class name or a "
            "finite number (leave every label of a split empty to predict it without scoring)"
        )


def is_hidden_label(label: Any) -> bool:
    """Whether a label is -1 (:data:`HIDDEN_LABEL`), as a number or a text such as ``"-1"``."""
    return label_number(label) == HIDDEN_LABEL


def hidden_label_splits(labels: Mapping[str, Sequence[Any] | None]) -> set[str]:
    """The splits other than ``train`` whose labels are all -1 while ``train`` has no -1: hidden labels, as in
    GLUE's test splits (to predict, not score). -1 among other values, or in ``train`` too, is a real label."""
    if any(is_hidden_label(label) for label in labels.get("train") or ()):
        return set()
    return {split for split, values in labels.items()
            if split != "train" and values and all(is_hidden_label(label) for label in values)}


def hub_split_labels(raw: Mapping[str, Any], column_name: str, dataset_name: str) -> dict[str, list[Any] | None]:
    """The labels of each split of a Hub dataset, or None for a split without labels (to predict, not score).

    A ``ClassLabel`` column gives class names; -1 (:data:`HIDDEN_LABEL`, how ``datasets`` stores a hidden
    label) or None is no label and is never mapped to a name. Another column gives its values, None being no
    label; a split whose values are all -1 is unlabelled as :func:`hidden_label_splits` says (GLUE's STS-B test
    split, a float column).

    Raises:
        UsageError: a split with labels on some rows only (:func:`split_is_labelled`), a class id out of range, a
            NaN or infinite value (:func:`check_label`).
    """
    found: dict[str, list[Any] | None] = {}
    plain = {split: list(dataset[column_name]) for split, dataset in raw.items()
             if class_label_names(dataset, column_name) is None}
    hidden = hidden_label_splits(plain)
    for split, dataset in raw.items():
        source = f"{dataset_name}[{split}] (column {column_name!r})"
        names = class_label_names(dataset, column_name)
        if names is None:
            values = plain[split]
            if not split_is_labelled(values, source) or split in hidden:
                found[split] = None
                continue
            for row, value in enumerate(values):
                check_label(value, f"{source}, row {row}")
            found[split] = values
            continue
        values = list(dataset[column_name])
        if not split_is_labelled(values, source, lambda value: value is None or value == HIDDEN_LABEL):
            found[split] = None
            continue
        for row, value in enumerate(values):
            if not 0 <= value < len(names):
                raise UsageError(f"{source}, row {row}: class id {value} outside the {len(names)} classes {names}")
        found[split] = [names[value] for value in values]
    return found


def hub_tag_sequences(dataset: Any, column_name: str, source: str) -> list[list[Any]]:
    """The tag sequences of a Hub split: names for a ``Sequence(ClassLabel)`` column, else the values.

    Raises:
        UsageError: a hidden tag (-1 or None: the token-classification jobs cannot predict an unlabelled
            split; leave it out) or a class id out of range. No tag is ever mapped from -1.
    """
    names = class_label_names(dataset, column_name)
    sequences = []
    hidden = 0
    for tags in dataset[column_name]:
        hidden += sum(tag is None or (names is not None and tag == HIDDEN_LABEL) for tag in tags)
        sequences.append(list(tags))
    if hidden:
        raise UsageError(
            f"{source}: {hidden} tags are hidden (-1 or None) in column {column_name!r}; token-classification "
            "splits must be tagged throughout (leave an unlabelled split out)"
        )
    if names is None:
        return sequences
    for row, tags in enumerate(sequences):
        for tag in tags:
            if not 0 <= tag < len(names):
                raise UsageError(f"{source}, row {row}: tag id {tag} outside the {len(names)} tags {names}")
    return [[names[tag] for tag in tags] for tags in sequences]


# --------------------------------------------------------------------------------------------
# The label list of the model
# --------------------------------------------------------------------------------------------
def resolve_label_list(
    checkpoint_config: PretrainedConfig,
    data_labels: Sequence[str],
    model_path: str,
    ignore_mismatched_sizes: bool,
) -> list[str]:
    """The label order of the model to train.

    A checkpoint that was fine-tuned already (its config names real labels) keeps its label
    order when it knows every label of the data, so its classification head is reused. If the
    data has labels it lacks, that is an error unless ``ignore_mismatched_sizes`` asks for a
    new head over the data's labels.
    """
    if has_placeholder_labels(checkpoint_config):
        return list(data_labels)
    model_labels = [checkpoint_config.id2label[i] for i in sorted(checkpoint_config.id2label, key=int)]
    missing = sorted(set(data_labels) - set(model_labels))
    if not missing:
        return model_labels
    if ignore_mismatched_sizes:
        return list(data_labels)
    raise ValueError(
        f"{model_path} was fine-tuned with the labels {model_labels}, which lack {missing} found in the data. "
        "Pass --ignore_mismatched_sizes to replace its classification head with one for the data's labels "
        f"{list(data_labels)}."
    )


def label_maps(labels: Sequence[str]) -> tuple[dict[int, str], dict[str, int]]:
    """``id2label`` and ``label2id`` for a label list (ids in list order)."""
    return dict(enumerate(labels)), {label: index for index, label in enumerate(labels)}


def are_whole_numbers(labels: Sequence[Any]) -> bool:
    """Whether every label is a whole number, however written (``1``, ``1.0``, ``"1"``, ``"1.0"``)."""
    numbers = [label_number(label) for label in labels]
    return all(number is not None and number.is_integer() for number in numbers)


def infer_task_type(labels: Sequence[Any], requested: str) -> str:
    """``classification`` or ``regression``: as requested, else inferred from the whole label set at once.

    Numbers (JSON numbers, CSV cells like ``"2.5"``) mean regression unless every one is a whole number
    (``1``, ``"1.0"``): those are classes, as are labels among which any is not a number.
    """
    if requested != "auto":
        return requested
    if are_whole_numbers(labels) or any(label_number(label) is None for label in labels):
        return "classification"
    return "regression"


def labels_as(labels: Sequence[Any], task_type: str, source: str, whole_numbers: bool) -> list[Any]:
    """The labels of ``source`` (a split) as the task reads them: scores (floats) for a regression, else class names,
    each written as one integer (``1``, ``"1.0"`` → ``"1"``) when ``whole_numbers`` (:func:`are_whole_numbers` of
    the whole label set), else as in the file.

    Raises:
        UsageError: a regression label that is not a number, naming ``source``, the row and the value.
    """
    if task_type == "regression":
        scores = [label_number(label) for label in labels]
        for row, (label, score) in enumerate(zip(labels, scores)):
            if score is None:
                raise UsageError(f"{source}, row {row}: label {label!r} is not a number; a regression needs numeric "
                                 "scores (or pass --task_type classification)")
        return scores
    if whole_numbers:
        return [str(int(label_number(label))) for label in labels]
    return [str(label) for label in labels]


def check_class_set(labels: Mapping[str, Sequence[str]]) -> None:
    """The classes of the training split (``labels["train"]``) are at least two, and every other split's classes are
    among them: a class the model never saw in training cannot be predicted, and would be scored as an error.

    Raises:
        UsageError: one class in training, or a class of another split that training lacks (naming it and the split).
    """
    trained = set(labels["train"])
    if len(trained) < 2:
        raise UsageError(f"the train split has one class only ({next(iter(trained), None)!r}) in {len(labels['train'])} "
                         "rows: a classifier needs examples of at least two classes")
    for split, values in labels.items():
        unseen = sorted(set(values) - trained)
        if unseen:
            raise UsageError(f"the {split} split has the label(s) {unseen} that the train split never has: a class the "
                             f"model would never train on (classes in training: {class_names(trained)})")


def check_labels_listed(labels: Sequence[Any], label_list: Sequence[str], source: str) -> None:
    """Raise a ValueError naming ``source`` when one of its labels is not in ``label_list``."""
    unknown = sorted({str(label) for label in labels} - set(label_list))
    if unknown:
        raise ValueError(f"labels {unknown} of {source} are not in the label list {list(label_list)}")


def class_names(labels: Sequence[Any]) -> list[str]:
    """Distinct labels as strings, in numeric order when they are all integers, else alphabetical."""
    names = {str(label) for label in labels}
    try:
        return sorted(names, key=int)
    except ValueError:
        return sorted(names)


__all__ = [
    "HIDDEN_LABEL",
    "are_whole_numbers",
    "check_class_set",
    "check_label",
    "check_labels_listed",
    "class_label_names",
    "class_names",
    "has_placeholder_labels",
    "hidden_label_splits",
    "hub_split_labels",
    "hub_tag_sequences",
    "infer_task_type",
    "is_hidden_label",
    "is_missing_label",
    "label_maps",
    "label_number",
    "labels_as",
    "resolve_label_list",
    "split_is_labelled",
]
