"""Fine-tune a token-classification model (NER, chunking, POS) with the HF Trainer.

Flags follow Hugging Face's ``run_ner.py`` (``--model_name_or_path --train_file --validation_file
--test_file --text_column_name --label_column_name --max_seq_length --output_dir
--num_train_epochs --per_device_train_batch_size --learning_rate --seed`` and every other
``TrainingArguments`` flag). Data files are CoNLL column files (token first, tag last, blank
line between sentences, ``-DOCSTART-`` ignored) or JSON lines (``.json``/``.jsonl``) with a
list of tokens and a list of tag strings per line.

Without data flags it fine-tunes the real all-MiniLM-L6-v2 weights (converted to mlm_suite) on
the WNUT-16 tweets split 80/10/10 with a fixed seed and, in the same run, Hugging Face's
``BertForTokenClassification`` from the same weights with the same recipe (``--compare_hf``),
reporting both models' entity F1 side by side::

    mlm-suite finetune-ner --output_dir outputs/ner
    python examples/finetune_ner.py --train_file train.conll --validation_file dev.conll --use_crf
    accelerate launch examples/finetune_ner.py --train_file train.jsonl --metric_mode strict

Scores are word-level: evaluation data are always aligned with the ``first`` strategy (one
label per word) whatever ``--label_strategy`` training uses, and scored with
:func:`mlm_suite.metrics.make_compute_metrics` in ``--metric_mode`` (``conlleval`` or ``strict``;
F1 in both modes is reported as ``eval_conlleval_f1`` / ``eval_strict_f1``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from mlm_suite import resources
from mlm_suite.alignment import tokenize_and_align
from mlm_suite.jobs.finetuning import (
    FinetuneTrainingArguments,
    ModelArguments,
    apply_freezing,
    class_label_names,
    early_stopping,
    first_n,
    has_placeholder_labels,
    label_maps,
    label_table,
    load_hub_splits,
    parse_arguments,
    read_conll,
    read_records,
    replace_output_dir,
    resolve_label_list,
    resolve_model_path,
    run_trainer,
    save_everything,
    save_metrics,
    split_80_10_10,
    training_summary,
    write_card,
)
from mlm_suite.metrics import MODES, entity_counts, make_compute_metrics, paired_bootstrap, tag_sequences
from mlm_suite.model_card import markdown_table
from mlm_suite.tagging import (
    ALLOWED_PREFIXES,
    convert_tags,
    detect_scheme,
    normalize_scheme,
    parse_tag,
    validate_tags,
)

Sentence = tuple[list[str], list[str]]
SPLITS = ("train", "validation", "test")


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
    tagging_scheme: str | None = field(
        default=None, metadata={"help": "Scheme of the data's tags (IO, BIO, IOB1, BIOES). Default: detected."}
    )
    convert_to: str | None = field(default=None, metadata={"help": "Convert the tags to this scheme first."})
    label_list: list[str] | None = field(
        default=None, metadata={"help": "The label set, in id order; tags outside it are an error."}
    )
    metric_mode: Literal["conlleval", "strict"] = field(
        default="conlleval", metadata={"help": "Entity counting of eval_f1: conlleval (lenient) or strict."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training sentences."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N validation sentences."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only the first N test sentences."})


@dataclass
class NerModelArguments(ModelArguments):
    use_crf: bool = field(default=False, metadata={"help": "Decode with a CRF constrained by the tagging scheme."})
    compare_hf: bool | None = field(
        default=None,
        metadata={
            # A bare --compare_hf means true; the parser's optional bools would demand a value.
            "nargs": "?",
            "const": True,
            "help": "Also fine-tune HF BertForTokenClassification from the MiniLM weights with the same recipe and "
            "report its scores (hf_eval_*). Default: on for the embedded WNUT-16 data, off otherwise."
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
def read_ner_file(path: str, text_column: str, label_column: str) -> list[Sentence]:
    """A CoNLL column file, or JSON lines (``.json``/``.jsonl``) with token and tag lists."""
    if not path.endswith((".json", ".jsonl")):
        return read_conll(path)
    sentences = []
    for line, record in enumerate(read_records(path), start=1):
        for name in (text_column, label_column):
            if name not in record:
                raise ValueError(f"{path}, line {line}: no {name!r} field (fields: {sorted(record)})")
        tokens, tags = list(record[text_column]), list(record[label_column])
        if len(tokens) != len(tags):
            raise ValueError(f"{path}, line {line}: {len(tokens)} tokens but {len(tags)} tags")
        if not all(isinstance(tag, str) for tag in tags):
            raise ValueError(f"{path}, line {line}: tags must be strings such as 'B-PER', got {tags}")
        sentences.append((tokens, tags))
    return sentences


def load_sources(args: NerDataArguments) -> tuple[dict[str, tuple[str, list[Sentence]]], str]:
    """The data as read, before any split: ``{role: (source name, sentences)}`` and a description.

    Roles are ``train``/``validation``/``test``, or ``all`` for data still to be split 80/10/10.
    """
    if args.dataset_name:
        raw = load_hub_splits(args.dataset_name, args.dataset_config_name)
        sources = {}
        for split, dataset in raw.items():
            names = class_label_names(dataset, args.label_column_name)
            sentences = []
            for tokens, tags in zip(dataset[args.text_column_name], dataset[args.label_column_name]):
                sentences.append((list(tokens), [names[t] if names else t for t in tags]))
            sources[split] = (f"{args.dataset_name}[{split}]", sentences)
        return sources, f"Hub dataset `{args.dataset_name}`" + (f" (`{args.dataset_config_name}`)" if args.dataset_config_name else "")
    if args.train_file:
        files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
        sources = {
            role: (path, read_ner_file(path, args.text_column_name, args.label_column_name))
            for role, path in files.items()
            if path
        }
        if len(sources) == 1:
            sources = {"all": sources["train"]}
            return sources, f"`{args.train_file}`, split 80/10/10 with a fixed seed"
        return sources, ", ".join(f"{role}: `{path}`" for role, path in files.items() if path)
    if args.validation_file or args.test_file:
        raise ValueError("--validation_file/--test_file need a --train_file")
    return {"all": ("WNUT-16", resources.read_wnut16())}, (
        "WNUT-16 (emerging and rare entities in tweets), 2,394 annotated tweets split 80/10/10 with a fixed seed"
    )


def settle_scheme(sources: dict[str, tuple[str, list[Sentence]]], given: str | None, convert_to: str | None) -> tuple[str, str]:
    """Validate (or detect) the scheme of every sequence and convert if asked; return ``(read, final)`` schemes.

    Sentences are numbered from 0 within each file, as read, in error messages.
    """
    if given is not None:
        scheme = normalize_scheme(given)
        for source, sentences in sources.values():
            for index, (_, tags) in enumerate(sentences):
                try:
                    validate_tags(tags, scheme, sentence_index=index)
                except ValueError as error:
                    raise type(error)(f"{source}: {error} (--tagging_scheme {scheme})") from None
    else:
        try:
            scheme = detect_scheme(tags for _, sentences in sources.values() for _, tags in sentences)
        except ValueError as error:
            names = ", ".join(source for source, _ in sources.values())
            raise type(error)(
                f"could not detect the tagging scheme of {names} (sentences numbered across them, in that "
                f"order): {error}. Check the data or give --tagging_scheme"
            ) from None
    target = normalize_scheme(convert_to) if convert_to else scheme
    if target != scheme:
        for role, (source, sentences) in sources.items():
            sources[role] = (source, [(tokens, convert_tags(tags, scheme, target)) for tokens, tags in sentences])
    return scheme, target


def scheme_labels(sentences: Sequence[Sentence], scheme: str) -> list[str]:
    """``O`` and, for every entity type in the data, every tag the scheme has for it (B before I, E, S).

    Listing the complete tag set (not only the tags seen) keeps the CRF constraints and the
    ``all_b_to_i`` strategy well defined, e.g. when a type only ever occurs as a one-word entity.
    """
    types = sorted({parse_tag(tag)[1] for _, tags in sentences for tag in tags if tag != "O"})
    prefixes = [prefix for prefix in "BIES" if prefix in ALLOWED_PREFIXES[scheme]]
    return ["O"] + [f"{prefix}-{type_}" for type_ in types for prefix in prefixes]


def check_tags_in(labels: Sequence[str], sources: Mapping[str, tuple[str, list[Sentence]]]) -> None:
    """Every tag of the data must be a label; the error names file, sentence and position."""
    known = set(labels)
    for source, sentences in sources.values():
        for index, (_, tags) in enumerate(sentences):
            for position, tag in enumerate(tags):
                if tag not in known:
                    raise ValueError(
                        f"{source}: sentence {index}, position {position}: tag {tag!r} is not in the label list {list(labels)}"
                    )


def split_sources(sources: dict[str, tuple[str, list[Sentence]]], seed: int) -> dict[str, list[Sentence]]:
    if "all" in sources:
        return dict(zip(SPLITS, split_80_10_10(sources["all"][1], seed)))
    return {role: sentences for role, (_, sentences) in sources.items()}


def encode(sentences: Sequence[Sentence], tokenizer: Any, label2id: Mapping[str, int], strategy: str, max_length: int):
    """A ``datasets.Dataset`` of model inputs and aligned labels, one row per window."""
    from datasets import Dataset

    raw = Dataset.from_dict({"tokens": [list(t) for t, _ in sentences], "ner_tags": [list(t) for _, t in sentences]})
    encoded = raw.map(
        lambda batch, indices: tokenize_and_align(
            batch, tokenizer, label2id, strategy=strategy, max_length=max_length, example_ids=indices
        ),
        batched=True,
        with_indices=True,
        remove_columns=raw.column_names,
    )
    # Bookkeeping columns the collator cannot pad (word_ids holds None).
    return encoded.remove_columns(["word_ids", "example_id", "num_words"])


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
def ner_compute_metrics(id2label: Mapping[int, str], scheme: str, mode: str):
    """``make_compute_metrics`` in ``mode`` plus F1 in both modes and what was scored.

    ``n_sentences`` (rows with at least one labelled word) and ``gold_entities`` make it
    checkable that every evaluation example was scored exactly once (e.g. under ``accelerate
    launch``, where the Trainer gathers predictions across processes).
    """
    scorers = {m: make_compute_metrics(id2label, scheme=scheme, mode=m) for m in MODES}

    def compute_metrics(eval_pred: Any) -> dict[str, float]:
        results = scorers[mode](eval_pred)
        for other in MODES:
            results[f"{other}_f1"] = results["f1"] if other == mode else scorers[other](eval_pred)["f1"]
        gold = [tags for tags in tag_sequences(eval_pred, id2label)[0] if tags]
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
def build_trainer(model, args, tokenizer, datasets: Mapping[str, Any], compute_metrics):
    from transformers import DataCollatorForTokenClassification, Trainer

    return Trainer(
        model=model,
        args=args,
        train_dataset=datasets.get("train"),
        eval_dataset=datasets.get("validation"),
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=make_preprocess_logits(model),
        callbacks=early_stopping(args, "f1"),
    )


def train_hf_baseline(training_args, sentences, label_list, scheme, mode, strategy, max_length):
    """HF ``BertForTokenClassification`` from the MiniLM weights, trained with run_ner's recipe."""
    from transformers import AutoTokenizer, BertForTokenClassification, set_seed

    id2label, label2id = label_maps(label_list)
    tokenizer = AutoTokenizer.from_pretrained(resources.minilm_dir())
    datasets = {
        split: encode(data, tokenizer, label2id, strategy if split == "train" else "first", max_length)
        for split, data in sentences.items()
    }
    set_seed(training_args.seed)
    model = BertForTokenClassification.from_pretrained(
        resources.minilm_dir(), num_labels=len(label_list), id2label=id2label, label2id=label2id
    )
    args = replace_output_dir(training_args, os.path.join(training_args.output_dir, "hf_baseline"))
    trainer = build_trainer(model, args, tokenizer, datasets, ner_compute_metrics(id2label, scheme, mode))
    return run_trainer(trainer, datasets, args, prefix="hf_"), trainer, datasets


def bootstrap_against_baseline(
    ours: Any, our_data: Mapping[str, Any], baseline: Any, baseline_data: Mapping[str, Any], scheme: str, mode: str, seed: int
) -> dict[str, float]:
    """Paired bootstrap (Berg-Kirkpatrick et al., 2012) of the entity-F1 difference, per evaluated split.

    ``delta`` is mlm_suite's F1 minus the baseline's; the p-value is one-sided in the direction
    observed (how often resampled test sets show a difference at least twice as large), so a
    small value means the better model really is better on this data.
    """
    results = {}
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if split not in our_data:
            continue
        gold, our_tags = tag_sequences(ours.predict(our_data[split]), ours.model.config.id2label)
        baseline_gold, baseline_tags = tag_sequences(baseline.predict(baseline_data[split]), baseline.model.config.id2label)
        if gold != baseline_gold:
            raise RuntimeError(f"the two models were scored on different {split} labels")
        forward = paired_bootstrap(gold, our_tags, baseline_tags, seed=seed, scheme=scheme, mode=mode)
        better_first = forward if forward["delta"] >= 0 else paired_bootstrap(
            gold, baseline_tags, our_tags, seed=seed, scheme=scheme, mode=mode
        )
        results[f"{prefix}_f1_delta_vs_hf"] = forward["delta"]
        results[f"{prefix}_bootstrap_p_value"] = better_first["p_value"]
    return results


def main(argv: Sequence[str] | None = None) -> int:
    from transformers import (
        AutoConfig,
        AutoModelForTokenClassification,
        AutoTokenizer,
        set_seed,
    )

    model_args, data_args, training_args = parse_arguments(
        (NerModelArguments, NerDataArguments, NerTrainingArguments), argv
    )
    embedded = not (data_args.train_file or data_args.dataset_name)
    compare_hf = embedded if model_args.compare_hf is None else model_args.compare_hf

    sources, data_description = load_sources(data_args)
    read_scheme, scheme = settle_scheme(sources, data_args.tagging_scheme, data_args.convert_to)
    all_sentences = [sentence for _, sentences in sources.values() for sentence in sentences]
    data_labels = list(data_args.label_list) if data_args.label_list else scheme_labels(all_sentences, scheme)
    check_tags_in(data_labels, sources)
    sentences = split_sources(sources, training_args.seed)
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_predict_samples}
    sentences = {split: first_n(data, limits[split]) for split, data in sentences.items() if data}

    model_path = resolve_model_path(model_args.model_name_or_path, training_args)
    config = AutoConfig.from_pretrained(model_path)
    label_list = resolve_label_list(config, data_labels, model_path, model_args.ignore_mismatched_sizes)
    checkpoint_scheme = getattr(config, "tagging_scheme", None)
    reuses_head = not has_placeholder_labels(config) and label_list == [config.id2label[i] for i in sorted(config.id2label)]
    if reuses_head and checkpoint_scheme not in (None, scheme):
        raise ValueError(
            f"{model_path} was fine-tuned on {checkpoint_scheme} tags but the data are {scheme}: "
            f"pass --convert_to {checkpoint_scheme}"
        )
    id2label, label2id = label_maps(label_list)
    config_updates = dict(num_labels=len(label_list), id2label=id2label, label2id=label2id, tagging_scheme=scheme)
    if model_args.use_crf:
        if config.model_type != "mlm_suite":
            raise ValueError(f"--use_crf needs an mlm_suite model; {model_path} is a {config.model_type!r} model")
        config_updates["use_crf"] = True
    config.update(config_updates)

    tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_path)
    datasets = {
        split: encode(data, tokenizer, label2id, data_args.label_strategy if split == "train" else "first",
                      data_args.max_seq_length)
        for split, data in sentences.items()
    }
    set_seed(training_args.seed)
    model = AutoModelForTokenClassification.from_pretrained(
        model_path, config=config, ignore_mismatched_sizes=model_args.ignore_mismatched_sizes
    )
    trainable = apply_freezing(model, model_args.train_last_k_layers)
    trainer = build_trainer(model, training_args, tokenizer, datasets,
                            ner_compute_metrics(id2label, scheme, data_args.metric_mode))
    metrics = run_trainer(trainer, datasets, training_args)
    # Saved before the baseline trains, so the model and its scores exist even if that run is cut short.
    save_everything(trainer, metrics)
    if compare_hf:
        baseline, baseline_trainer, baseline_data = train_hf_baseline(
            training_args, sentences, label_list, scheme, data_args.metric_mode, data_args.label_strategy,
            data_args.max_seq_length,
        )
        baseline["comparison"] = bootstrap_against_baseline(
            trainer, datasets, baseline_trainer, baseline_data, scheme, data_args.metric_mode, training_args.seed
        )
        save_metrics(trainer, baseline)
        metrics.update(baseline)

    flat = {key: value for values in metrics.values() for key, value in values.items()}
    write_card(
        trainer,
        pipeline_tag="token-classification",
        task_description=f"A token-classification (named-entity) model over {scheme} tags",
        base_model=model_path,
        auto_class="AutoModelForTokenClassification",
        labels=f"Tagging scheme: **{scheme}**"
        + (f" (converted from {read_scheme})" if read_scheme != scheme else "")
        + f". CRF decoding: {'yes' if model_args.use_crf else 'no'}.\n\n" + label_table(id2label),
        data=data_description + "\n\n" + markdown_table({split: len(data) for split, data in sentences.items()},
                                                         ("split", "sentences")),
        training=training_summary(
            training_args,
            **{"label strategy": data_args.label_strategy, "max_seq_length": data_args.max_seq_length,
               "trained layers": trainable},
        ),
        metrics=ner_metrics_section(flat, data_args.metric_mode, compare_hf),
    )
    if trainer.is_world_process_zero():
        print(ner_summary(flat, compare_hf))
        print(f"trained on {training_args.world_size} process(es); saved the model, tokenizer, model card "
              f"and all_results.json to {training_args.output_dir}")
    return 0


def _comparison_rows(metrics: Mapping[str, float], compare_hf: bool) -> list[tuple[str, float, float | None]]:
    rows = []
    for split in ("eval", "test"):
        for mode in MODES:
            key = f"{split}_{mode}_f1"
            if key in metrics:
                rows.append((f"{split} F1 ({mode})", metrics[key], metrics.get(f"hf_{key}") if compare_hf else None))
    return rows


def ner_metrics_section(metrics: Mapping[str, float], mode: str, compare_hf: bool) -> str:
    """Model-card evaluation section: scores (metric mode stated) and, if run, the HF comparison."""
    scored = {
        key: value
        for key, value in metrics.items()
        if key.startswith(("eval_", "test_")) and not key.endswith(("runtime", "per_second"))
    }
    text = (
        f"Entity-level micro scores at word level; `f1`/`precision`/`recall` count entities in **{mode}** mode "
        "(`conlleval`: as conlleval.pl, lenient; `strict`: only well-formed entities).\n\n"
        + markdown_table(scored, ("metric", "value"))
    )
    if compare_hf:
        rows = _comparison_rows(metrics, compare_hf)
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


def ner_summary(metrics: Mapping[str, float], compare_hf: bool) -> str:
    lines = [f"{'':<24}{'mlm_suite':>10}" + (f"{'HF BERT':>10}" if compare_hf else "")]
    for name, ours, theirs in _comparison_rows(metrics, compare_hf):
        lines.append(f"{name:<24}{ours:>10.4f}" + (f"{theirs:>10.4f}" if theirs is not None else ""))
    return "\n".join(lines + _bootstrap_lines(metrics))


def _bootstrap_lines(metrics: Mapping[str, float]) -> list[str]:
    return [
        f"{split} F1 mlm_suite - HF = {metrics[f'{split}_f1_delta_vs_hf']:+.4f} "
        f"(paired bootstrap, one-sided p = {metrics[f'{split}_bootstrap_p_value']:.3f})"
        for split in ("eval", "test")
        if f"{split}_bootstrap_p_value" in metrics
    ]


if __name__ == "__main__":
    from mlm_suite.jobs.distributed import run_job

    raise SystemExit(run_job(main))
