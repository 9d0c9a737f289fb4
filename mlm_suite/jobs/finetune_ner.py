"""Fine-tune a token-classification model (NER, chunking, POS) with the HF Trainer, as transformers' ``run_ner.py``.

Data: CoNLL column files or JSON lines; without data flags, a built-in corpus (``--builtin_dataset wnut16``, the
default, or ``oanc_pos``) and, in the same run, HF's ``BertForTokenClassification`` from the same weights for
comparison (``--compare_hf``). Entity schemes get entity F1 (conlleval or strict), tag sets without entities token
accuracy and per-tag scores, all at the word level and over whole sentences, however many windows of
``--max_seq_length`` a long one takes. See docs/finetuning.md::

    mlm-suite finetune-ner --output_dir outputs/ner
    mlm-suite finetune-ner --builtin_dataset oanc_pos --output_dir outputs/pos
    python examples/finetune_ner.py --train_file train.conll --validation_file dev.conll --use_crf
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mlm_suite.data.inputs import downloads
from mlm_suite.data.finetuning.alignment import tokenize_and_align, window_stride
from mlm_suite.data.inputs.builtin import BUILTIN_DATASETS
from mlm_suite.data.finetuning.labels import has_placeholder_labels, hub_tag_sequences, label_maps, resolve_label_list
from mlm_suite.data.mapping import map_options
from mlm_suite.data.inputs.readers import (
    SPLITS,
    Sentence,
    TaggedSentences,
    first_n,
    load_hub_splits,
    read_ner_file,
    split_80_10_10,
    split_description,
)
from mlm_suite.errors import UsageError
from mlm_suite.jobs.common.arguments import (
    check_at_least,
    check_file,
    parse_arguments,
    preprocessing_num_workers_field,
    test_split_name_field,
    validation_split_name_field,
)
from mlm_suite.jobs.common.checkpoints import resume_checkpoint, stage_checkpoint
from mlm_suite.jobs.common.finetune_training import (
    FinetuneTrainingArguments,
    card_training_summary,
    early_stopping,
    replace_output_dir,
    run_trainer,
    save_everything,
    save_metrics,
    trains_flattened,
)
from mlm_suite.jobs.common.model_loading import (
    ModelArguments,
    apply_freezing,
    check_max_seq_length,
    load_config,
    load_model,
    load_tokenizer,
    mlm_suite_checkpoint,
    resolve_model_path,
)
from mlm_suite.jobs.common.output_folder import claim_output_folder, paths_read
from mlm_suite.data.finetuning.tagging import NO_SCHEME, check_tags_in, scheme_labels, settle_scheme
from mlm_suite.evaluation.baseline import compare_with_hf_baseline
from mlm_suite.evaluation.plots import figures_section
from mlm_suite.evaluation.tagging_metrics import (
    WINDOW_COLUMNS, PredictionMemory, SentenceScoring, check_best_model_metric, main_metric, make_preprocess_logits,
    ner_compute_metrics, plot_scores_per_split,
)
from mlm_suite.cards import (
    CardDataset, FinetunedCard, card_base_model, card_scores, markdown_table, ner_card_score_names, ner_labels_section,
    ner_metrics_section, ner_summary, ner_task_description,
)
from mlm_suite.training.trainer import JobTrainer, standard_features

#: The built-in corpus read when no data flag names the data (``--builtin_dataset`` picks another).
DEFAULT_CORPUS = "wnut16"


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
    max_seq_length: int = field(
        default=128, metadata={"help": "Sub-tokens per window; a longer sentence is read in windows and scored whole."}
    )
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

    def __post_init__(self) -> None:
        for flag in ("max_seq_length", "max_train_samples", "max_eval_samples", "max_predict_samples",
                     "preprocessing_num_workers"):
            check_at_least(flag, getattr(self, flag), 1)
        for flag in ("train_file", "validation_file", "test_file"):
            check_file(flag, getattr(self, flag))
        if self.builtin_dataset and (self.train_file or self.dataset_name):
            raise UsageError("--builtin_dataset is for runs without --train_file/--dataset_name; give one or the other")


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
def load_sources(
    args: NerDataArguments, load_kwargs: Mapping[str, Any] | None = None
) -> tuple[dict[str, TaggedSentences], str]:
    """The data as read, before any split: ``{role: TaggedSentences}`` and a description.

    Roles are ``train``/``validation``/``test``, or ``all`` for data still to be split 80/10/10. A Hub dataset's
    validation and test roles are its splits ``--validation_split_name``/``--test_split_name``; ``load_kwargs`` go
    to ``load_dataset``. Its sentences become Python lists: tags are validated, their scheme detected and
    converted across every split (as for files) before anything is tokenised.
    """
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
            sources[split] = TaggedSentences(name, sentences)
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
    corpus = BUILTIN_DATASETS[args.builtin_dataset or DEFAULT_CORPUS]
    return {"all": TaggedSentences(corpus.title, corpus.read())}, corpus.description


def split_sources(sources: dict[str, TaggedSentences], seed: int) -> dict[str, list[Sentence]]:
    if "all" in sources:
        return dict(zip(SPLITS, split_80_10_10(sources["all"].sentences, seed)))
    return {role: source.sentences for role, source in sources.items()}


def encode(
    sentences: Sequence[Sentence], tokenizer: Any, label2id: Mapping[str, int], strategy: str, max_length: int,
    num_proc: int | None = None, scored: bool = False,
):
    """A ``datasets.Dataset`` of model inputs and aligned labels, one row per window, tokenised on ``num_proc``
    processes (``--preprocessing_num_workers``; every sentence is tokenised alone, so the rows are the same).

    A sentence longer than ``max_length`` sub-tokens is split into windows. Training windows follow one another;
    the windows of a ``scored`` split (validation, test) overlap by a quarter (:func:`window_stride`), so that each
    word is scored from a window where it has context on both sides, and keep the :data:`WINDOW_COLUMNS` that
    place them in their sentence: the job scores whole sentences (:class:`SentenceScoring`).
    """
    from datasets import Dataset

    raw = Dataset.from_dict({"tokens": [list(t) for t, _ in sentences], "ner_tags": [list(t) for _, t in sentences]})
    stride = window_stride(tokenizer, max_length) if scored else 0
    encoded = raw.map(
        lambda batch, indices: tokenize_and_align(
            batch, tokenizer, label2id, strategy=strategy, max_length=max_length, stride=stride, example_ids=indices
        ),
        batched=True,
        with_indices=True,
        remove_columns=raw.column_names,
        **map_options(raw, num_proc),
    )
    # Bookkeeping columns the collator cannot pad (word_ids holds None); the window columns a scored split keeps
    # are read, and taken off before the collator, by SentenceScoring.
    kept = WINDOW_COLUMNS if scored else ()
    return encoded.remove_columns([name for name in ("word_ids", "example_id", "num_words") if name not in kept])


def encode_splits(sentences: Mapping[str, Sequence[Sentence]], tokenizer: Any, label2id: Mapping[str, int],
                  args: NerDataArguments) -> dict[str, Any]:
    """Every split :func:`encode`d: training labels aligned with ``--label_strategy``, evaluation data with
    ``first`` (one label per word, so scores are word-level whatever the training strategy) in overlapping
    windows scored as whole sentences."""
    return {
        split: encode(data, tokenizer, label2id, args.label_strategy if split == "train" else "first",
                      args.max_seq_length, args.preprocessing_num_workers, scored=split != "train")
        for split, data in sentences.items()
    }


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------
def build_trainer(model, args, tokenizer, datasets: Mapping[str, Any], scheme: str, mode: str):
    """A :class:`JobTrainer` for token classification that scores whole sentences (:class:`SentenceScoring`) with
    :func:`ner_compute_metrics` (entities in ``mode``); early stopping (if asked for) watches the validation score of
    the ``scheme`` (:func:`main_metric`).

    Its ``prediction_memory`` (:class:`PredictionMemory`) keeps the predicted tags of the final evaluations.
    """
    from mlm_suite.data.padding import DataCollatorForTokenLabels

    id2label = {int(i): label for i, label in model.config.id2label.items()}
    memory = PredictionMemory()
    scoring = SentenceScoring(ner_compute_metrics(id2label, scheme, mode, memory))
    args, callbacks = early_stopping(args, main_metric(scheme))
    trainer = JobTrainer(
        model=model,
        args=args,
        train_dataset=datasets.get("train"),
        eval_dataset=datasets.get("validation"),
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenLabels(tokenizer, flatten=trains_flattened(model, args)),
        eval_data_collator=DataCollatorForTokenLabels(tokenizer),  # DataCollatorForTokenClassification's batches, faster
        compute_metrics=scoring.compute_metrics,
        preprocess_logits_for_metrics=make_preprocess_logits(model),
        callbacks=callbacks + [memory],
        features=(*standard_features(), scoring),
    )
    trainer.prediction_memory = memory
    return trainer


def main(argv: Sequence[str] | None = None) -> int:
    from transformers import AutoConfig, set_seed

    from mlm_suite import MlmSuiteForTokenClassification

    model_args, data_args, training_args = parse_arguments((NerModelArguments, NerDataArguments, NerTrainingArguments), argv)
    if model_args.use_crf and training_args.flatten_batches and "flatten_batches" in training_args.flags_given:
        raise UsageError("--flatten_batches cannot be combined with --use_crf: the CRF scores each sequence as a whole")
    # Everything that can fail on bad input happens before the Trainer creates the output folder.
    # Detecting last checkpoint: --resume_from_checkpoint, or the last one of a stopped run in --output_dir (checked
    # against this run before the folder rule removes the earlier results)
    checkpoint = claim_output_folder(training_args.output_dir, {**model_args.sources(), **paths_read(data_args)},
                                     overwrite=training_args.overwrite_output_dir,
                                     resume=lambda: resume_checkpoint(training_args, trains=training_args.do_train))
    embedded = not (data_args.train_file or data_args.dataset_name)
    compare_hf = embedded if model_args.compare_hf is None else model_args.compare_hf

    # Data: read, settle the tag scheme, list the labels, split
    sources, data_description = load_sources(data_args, model_args.dataset_kwargs())
    read_scheme, scheme = settle_scheme(sources, data_args.tagging_scheme, data_args.convert_to)
    if scheme == NO_SCHEME:
        check_best_model_metric(training_args.metric_for_best_model)
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

    # Model: the folder as an mlm_suite folder (a native one converted, with its head), its labels and configuration
    # (a fine-tuned checkpoint keeps its label order and must share the scheme)
    source = resolve_model_path(model_args.model_name_or_path, training_args)
    model_path = mlm_suite_checkpoint(source, **model_args.pretrained_kwargs())
    config = load_config(model_path, model_args)
    label_list = resolve_label_list(config, data_labels, source, model_args.ignore_mismatched_sizes)
    checkpoint_scheme = getattr(config, "tagging_scheme", None)
    reuses_head = not has_placeholder_labels(config) and label_list == [config.id2label[i] for i in sorted(config.id2label)]
    if reuses_head and scheme != NO_SCHEME and checkpoint_scheme not in (None, scheme):
        raise ValueError(
            f"{source} was fine-tuned on {checkpoint_scheme} tags but the data are {scheme}: "
            f"pass --convert_to {checkpoint_scheme}"
        )
    id2label, label2id = label_maps(label_list)
    # Scheme none is stored as no scheme: a CRF over such tags is unconstrained.
    config_updates = dict(num_labels=len(label_list), id2label=id2label, label2id=label2id,
                          tagging_scheme=None if scheme == NO_SCHEME else scheme)
    if model_args.use_crf:
        config_updates["use_crf"] = True
    config.update(config_updates)

    # Label alignment (with the source's tokenizer), model
    tokenizer = load_tokenizer(source, model_args, config)
    check_max_seq_length(data_args.max_seq_length, config, source, tokenizer)
    if compare_hf:
        check_max_seq_length(data_args.max_seq_length, AutoConfig.from_pretrained(downloads.minilm_dir()),
                             "HF BERT of --compare_hf")
    datasets = encode_splits(sentences, tokenizer, label2id, data_args)
    set_seed(training_args.seed)
    model = load_model(MlmSuiteForTokenClassification, model_path, config, model_args)
    trainable = apply_freezing(model, model_args.train_last_k_layers)

    # Training, evaluation on the validation split, prediction on the test split
    trainer = build_trainer(model, training_args, tokenizer, datasets, scheme, data_args.metric_mode)
    metrics = run_trainer(trainer, datasets, training_args, checkpoint=checkpoint)
    # Saved before the baseline trains, so the model and its scores exist even if that run is cut short.
    save_everything(trainer, metrics)

    # The HF baseline: BertForTokenClassification from the same weights and recipe, and a paired bootstrap
    if compare_hf:

        def fit(baseline_model: Any, baseline_tokenizer: Any):  # this job's recipe, in <output_dir>/hf_baseline
            args = replace_output_dir(training_args, os.path.join(training_args.output_dir, "hf_baseline"))
            baseline_checkpoint = stage_checkpoint(args)
            data = encode_splits(sentences, baseline_tokenizer, label2id, data_args)
            baseline_trainer = build_trainer(baseline_model, args, baseline_tokenizer, data, scheme, data_args.metric_mode)
            scores = run_trainer(baseline_trainer, data, args, prefix="hf_", checkpoint=baseline_checkpoint)
            return scores, baseline_trainer, data

        baseline = compare_with_hf_baseline(trainer, datasets, label_list, scheme, data_args.metric_mode,
                                            training_args.seed, fit)
        save_metrics(trainer, baseline)
        metrics.update(baseline)

    # Figures, model card, summary
    flat = {key: value for values in metrics.values() for key, value in values.items()}
    figures = plot_scores_per_split(trainer, datasets, metrics, scheme, data_args.metric_mode)
    trainer.publish(FinetunedCard(
        pipeline_tag="token-classification",
        task_description=ner_task_description(scheme, len(label_list)),
        base_model=card_base_model(source, model_args.init),
        auto_class="AutoModelForTokenClassification",
        labels=ner_labels_section(scheme, read_scheme, model_args.use_crf, id2label),
        data=data_description + "\n\n" + markdown_table({split: len(data) for split, data in sentences.items()},
                                                         ("split", "sentences")),
        training=card_training_summary(
            training_args, source, model_args,
            {"label strategy": data_args.label_strategy, "max_seq_length": data_args.max_seq_length,
             "trained layers": trainable},
        ),
        metrics=ner_metrics_section(flat, data_args.metric_mode, compare_hf, scheme) + figures_section(figures),
        dataset=card_dataset(data_args),
        scores=card_scores(flat, ner_card_score_names(scheme, data_args.metric_mode)),
    ))
    if trainer.is_world_process_zero():
        print(ner_summary(flat, compare_hf, scheme))
        print(f"trained on {training_args.world_size} process(es); saved the model, tokenizer, model card "
              f"and all_results.json to {training_args.output_dir}")
    return 0


def card_dataset(args: NerDataArguments) -> CardDataset | None:
    """The data as the card's metadata names them: the Hub dataset, the files, or the built-in corpus."""
    corpus = BUILTIN_DATASETS[args.builtin_dataset or DEFAULT_CORPUS]
    embedded = CardDataset.embedded(corpus.name, corpus.card_name)
    return CardDataset.read_by_job(args.dataset_name, args.dataset_config_name,
                                   (args.train_file, args.validation_file, args.test_file), embedded,
                                   {"validation": args.validation_split_name, "test": args.test_split_name})


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    raise SystemExit(run_job(main))
