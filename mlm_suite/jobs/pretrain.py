"""MLM (+NSP) pretraining of an mlm_suite encoder with the Hugging Face ``Trainer``.

    mlm-suite pretrain --output_dir outputs/pretrain          # embedded default data, about 8 minutes on 2 CPU cores
    mlm-suite pretrain --train_file corpus.txt --objective mlm_nsp --max_steps -1 --num_train_epochs 3
    mlm-suite pretrain --model_name_or_path bert-folder --head_warmup_steps 50 --output_dir dapt

It reads documents (``--train_file``, ``--dataset_name``, the embedded reviews; larger than memory:
``--prepared_data`` or ``--streaming``), trains a tokenizer or takes one, builds or continues a model, trains it with
seeded masks and evaluates it on fixed held-out masks; the output folder is a complete checkpoint with its card.
docs/pretraining.md describes every flag, the data, the controls and the outputs.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from datasets import Dataset
from transformers import PreTrainedTokenizerBase, set_seed

from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM, MlmSuiteForPreTraining
from mlm_suite.cards import pretraining_card
from mlm_suite.data.inputs import downloads
from mlm_suite.data.inputs.builtin import BUILTIN_DATASETS
from mlm_suite.data.inputs.readers import first_n
from mlm_suite.data.pretraining.corpora import (
    InMemoryCorpus, MultilingualCorpus, MultilingualStream, PreparedCorpus, PretrainingCorpus, StreamedCorpus,
)  # fmt: skip
from mlm_suite.data.pretraining.documents import (
    DocumentOrigin, Texts, load_pretraining_documents, read_documents, stream_pretraining_documents,
)  # fmt: skip
from mlm_suite.data.pretraining.extension import VocabularyExtension, extend_tokenizer, grow_embeddings, resumed_extension
from mlm_suite.data.pretraining.masking import MaskingEpochCallback, check_mlm_tokenizer
from mlm_suite.data.pretraining.rows import RowFormat
from mlm_suite.data.pretraining.streaming import split_for_processes
from mlm_suite.data.pretraining.vocabulary import train_tokenizer
from mlm_suite.errors import UsageError
from mlm_suite.evaluation.masked_lm import (
    make_mlm_compute_metrics, preprocess_logits_for_mlm_metrics, probe_sentences, readable_token,
)  # fmt: skip
from mlm_suite.evaluation.plots import figures_section, plot_pretraining_curves
from mlm_suite.training.controls import early_stopping_callback, rows_per_step, time_budget_callback
from mlm_suite.training.language_shares import LanguageShares
from mlm_suite.training.pretraining import (
    HeadWarmup, describe_evaluation, evaluate_languages, evaluate_pretraining, evaluation_collator, training_collator,
)  # fmt: skip
from mlm_suite.training.schedules import ScheduledRows, row_schedule
from mlm_suite.training.stream_position import StreamPosition
from mlm_suite.training.trainer import JobTrainer, standard_features
from mlm_suite.jobs.common import arguments
from mlm_suite.jobs.common.output_folder import claim_output_folder, paths_read
from mlm_suite.jobs.common.model_loading import describe_new_weights, pretrained_tokenizer
from mlm_suite.model_files import check_vocabulary
from mlm_suite.jobs.common.pretraining_arguments import (
    CONTINUED_DEFAULTS, DEFAULT_TRAINED_VOCAB_SIZE, PretrainTrainingArguments, PretrainingArguments,
)  # fmt: skip
from mlm_suite.jobs.common.pretraining_plan import PretrainingPlan, model_config

CURVES_PNG = "training_curves.png"
CURVES_CAPTION = "Pretraining: train and held-out loss, and held-out [MASK] accuracy against the most-frequent-token baseline"


# ------------------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------------------
def parse_arguments(argv: list[str] | None) -> tuple[PretrainingArguments, PretrainTrainingArguments]:
    return arguments.parse_arguments(
        (PretrainingArguments, PretrainTrainingArguments), argv, description=__doc__.split("\n\n")[0]
    )


def plan_run(argv: list[str] | None) -> PretrainingPlan:
    """The plan of the run ``argv`` asks for: the flags parsed, checked and resolved (CONTINUED_DEFAULTS when
    continuing a checkpoint, flags given win), before anything is read from or written to the output folder."""
    return PretrainingPlan.resolve(*parse_arguments(argv), continued_defaults=CONTINUED_DEFAULTS)


# ------------------------------------------------------------------------------------------------
# Data, tokenizer and model
# ------------------------------------------------------------------------------------------------
def open_corpus(plan: PretrainingPlan) -> PretrainingCorpus:
    """The run's corpus: documents in memory, the ``--prepared_data`` folder or a ``--streaming`` one, each process
    reading its own part of a stream (one-line errors, before anything is written)."""
    args, training_args = plan.args, plan.training_args
    row_format = RowFormat(
        max_seq_length=args.max_seq_length, packing=args.packing, objective=args.objective,
        nsp_probability=args.nsp_probability, num_proc=args.preprocessing_num_workers,
        overwrite_cache=args.overwrite_cache,
    )  # fmt: skip
    if plan.prepared is not None:
        validation = None  # the held-out documents prepared with the rows, unless a file replaces them
        if args.validation_file:
            validation = Dataset.from_dict({"text": read_documents(_only(args.validation_file), args.text_column_name)})
        return PreparedCorpus(plan.prepared, row_format, plan.tokenizer_flag, validation)
    if plan.language_mix is not None:
        return _multilingual_corpus(plan, row_format)
    origin = DocumentOrigin(
        train_file=_only(args.train_file), validation_file=_only(args.validation_file), dataset_name=args.dataset_name,
        dataset_config_name=args.dataset_config_name, validation_split_name=args.validation_split_name,
        text_column=args.text_column_name, embedded=BUILTIN_DATASETS[args.builtin_dataset or "pang_lee_reviews"],
    )  # fmt: skip
    if args.streaming:
        documents, validation, description, held_out_split = stream_pretraining_documents(
            origin, args.held_out_documents, **args.dataset_kwargs()
        )
        part = split_for_processes(documents, training_args.process_index, training_args.world_size)
        world, shards = training_args.world_size, documents.num_shards
        shards_per_process = shards // world if shards >= world else shards
        if training_args.dataloader_num_workers > shards_per_process:
            # datasets gives each worker whole shards and stops the others; a stopped worker would also make
            # the restored position of a resumed run depend on timing.
            raise UsageError(
                f"--dataloader_num_workers {training_args.dataloader_num_workers} exceeds the {shards_per_process} "
                f"shard(s) each process reads: use at most {shards_per_process} (0 reads in the main process)"
            )
        return StreamedCorpus(documents, part, validation, description, row_format, held_out_split)
    documents, description, held_out_split = load_pretraining_documents(
        origin, args.validation_split_percentage, args.preprocessing_num_workers, args.overwrite_cache,
        **args.dataset_kwargs(),
    )
    return InMemoryCorpus(documents, description, row_format, held_out_split, origin.training_flag())


def _only(files: list[str] | None) -> str | None:
    """The one file of a flag that takes one per language, in a run of one corpus."""
    return files[0] if files else None


def _multilingual_corpus(plan: PretrainingPlan, row_format: RowFormat) -> MultilingualCorpus:
    """The documents of each language (a file each, or the built-in multilingual corpus), each language's held out on
    its own, drawn as the plan's language mix says; with ``--streaming``, a stream per file."""
    args, training_args, mix = plan.args, plan.training_args, plan.language_mix
    if args.train_file:
        held_out = args.validation_file or [None] * len(args.train_file)
        origins = {
            language: DocumentOrigin(train_file=file, validation_file=validation, text_column=args.text_column_name)
            for language, file, validation in zip(mix.languages, args.train_file, held_out)
        }  # fmt: skip
        description = ", ".join(f"`{Path(file).name}` ({language})" for language, file in zip(mix.languages, args.train_file))
    else:
        texts = BUILTIN_DATASETS["debian_reference"].read(mix.languages)
        origins = {language: DocumentOrigin(embedded=Texts(texts[language], f"the Debian Reference ({language})"))
                   for language in mix.languages}
        description = BUILTIN_DATASETS["debian_reference"].description
    sources = {language: origin.training_flag() if origin.train_file else f"the Debian Reference ({language})"
               for language, origin in origins.items()}
    if args.streaming:  # one stream per language, each process its own part of each
        streams = {language: stream_pretraining_documents(origin, args.held_out_documents) for language, origin in origins.items()}
        return MultilingualStream(
            {language: stream[0] for language, stream in streams.items()},
            {language: stream[1] for language, stream in streams.items()},
            {language: Path(origin.train_file).stat().st_size for language, origin in origins.items()},
            mix, description + " (streamed)", row_format, sources, training_args.process_index, training_args.world_size,
        )  # fmt: skip
    documents = {
        language: load_pretraining_documents(origin, args.validation_split_percentage, args.preprocessing_num_workers,
                                             args.overwrite_cache)[0]
        for language, origin in origins.items()
    }  # fmt: skip
    rows_before = plan.batch_size_warmup.rows_before if plan.batch_size_warmup else (
        lambda step: step * rows_per_step(training_args))
    return MultilingualCorpus(documents, mix, description, row_format, sources, rows_before, training_args.max_steps)


def pretraining_tokenizer(plan: PretrainingPlan, corpus: PretrainingCorpus) -> PreTrainedTokenizerBase:
    """The plan's tokenizer (a fixed one, or a vocabulary trained on ``corpus``' documents, or MiniLM's),
    checked against ``corpus`` (:meth:`~mlm_suite.data.pretraining.corpora.PretrainingCorpus.check_tokenizer`), then for what
    masking needs.

    A run that trains its vocabulary and resumes from a checkpoint takes the vocabulary saved there, the one its
    weights were trained with.
    """
    args, resumed = plan.args, plan.resume_from_checkpoint
    vocab_size = args.vocab_size or DEFAULT_TRAINED_VOCAB_SIZE
    if plan.trains_tokenizer and resumed:
        source = f"checkpoint {resumed}"
        tokenizer = _resumed_tokenizer(resumed, vocab_size)
    elif plan.trains_tokenizer:
        source = None  # a vocabulary trained on the corpus has words when the corpus has: the corpus check names it
        tokenizer = train_tokenizer(args.tokenizer_type, corpus.tokenizer_texts(), vocab_size,
                                    several_languages=plan.language_mix is not None)
    else:
        source = plan.tokenizer_flag or "MiniLM's vocabulary (--train_tokenizer false)"
        name = args.tokenizer_name or args.model_name_or_path or str(downloads.minilm_dir())
        tokenizer = pretrained_tokenizer(name, **args.pretrained_kwargs())
    if not tokenizer.is_fast:
        raise ValueError(f"a fast tokenizer is needed (word ids, batched encoding); {type(tokenizer).__name__} is not")
    corpus.check_tokenizer(tokenizer)  # first: documents without a word train a vocabulary of special tokens only
    check_mlm_tokenizer(tokenizer, source)
    return tokenizer


def _resumed_tokenizer(checkpoint: str, vocab_size: int) -> PreTrainedTokenizerBase:
    if not (Path(checkpoint) / "tokenizer.json").is_file():
        raise UsageError(
            f"checkpoint {checkpoint} has no tokenizer.json: this run trains its own vocabulary and resumes with the "
            "one saved in the checkpoint; resume from a complete checkpoint, or give its run's tokenizer with --tokenizer_name"
        )
    tokenizer = pretrained_tokenizer(checkpoint)
    if len(tokenizer) > vocab_size:
        raise UsageError(
            f"checkpoint {checkpoint} has a vocabulary of {len(tokenizer)} tokens, more than the {vocab_size} this run "
            "trains (--vocab_size): resume from a checkpoint of this run"
        )
    return tokenizer


def vocabulary_extension(
    plan: PretrainingPlan, corpus: PretrainingCorpus, tokenizer: PreTrainedTokenizerBase
) -> VocabularyExtension:
    """``--extend_vocabulary N``: ``tokenizer`` (the continued checkpoint's) with N pieces learnt from the corpus'
    training documents; a resumed run takes the extended tokenizer its checkpoint saved."""
    args, resumed = plan.args, plan.resume_from_checkpoint
    source = f"--model_name_or_path {args.model_name_or_path}"
    if resumed:
        return resumed_extension(tokenizer, pretrained_tokenizer(resumed), corpus.tokenizer_texts())
    return extend_tokenizer(tokenizer, corpus.tokenizer_texts(), args.extend_vocabulary, source)


def build_config(
    plan: PretrainingPlan, tokenizer: PreTrainedTokenizerBase
) -> tuple[MlmSuiteConfig, PreTrainedTokenizerBase]:
    """The model's configuration (:func:`~mlm_suite.jobs.common.pretraining_plan.model_config`, a preset sized to
    ``tokenizer``) with the plan's position changes (``--rope_theta``, a context extension), and the tokenizer, a copy
    whose ``model_max_length`` follows the longer rows of a context extension; neither argument is changed."""
    args = plan.args
    config = model_config(args, plan.config_source, tokenizer)
    if plan.position_changes:
        config = MlmSuiteConfig.from_dict({**config.to_dict(), **plan.position_changes})
    if plan.position_changes.get("max_position_embeddings", 0) > tokenizer.model_max_length:
        tokenizer = copy.copy(tokenizer)  # a shallow copy: the same vocabulary, its own length limit
        tokenizer.model_max_length = plan.position_changes["max_position_embeddings"]
    config.check_sizes()
    # A preset is sized to the tokenizer: only --config_overrides can make it smaller.
    model_source = args.config_name or args.model_name_or_path or plan.config_source or f"--config_overrides {args.config_overrides}"
    check_vocabulary(tokenizer, config, tokenizer.name_or_path or "trained on the corpus", model_source)
    if config.position_embedding_type == "absolute" and args.max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"--max_seq_length {args.max_seq_length} exceeds the model's max_position_embeddings "
            f"({config.max_position_embeddings})"
        )
    if args.max_seq_length > tokenizer.model_max_length:
        raise ValueError(
            f"--max_seq_length {args.max_seq_length} exceeds the tokenizer's model_max_length "
            f"({tokenizer.model_max_length})"
        )
    if args.objective == "mlm_nsp" and config.type_vocab_size < 2:
        raise ValueError(f"mlm_nsp needs type_vocab_size >= 2 for the two segments, got {config.type_vocab_size}")
    return config, tokenizer


def build_model(
    plan: PretrainingPlan, config: MlmSuiteConfig
) -> tuple[MlmSuiteForMaskedLM | MlmSuiteForPreTraining, list[str]]:
    """The model to pretrain and the names of its weights that the checkpoint it continues (``plan.model_source``)
    lacked (newly initialised).

    A head the checkpoint lacks (the MLM head of an encoder-only or fine-tuned checkpoint, the NSP head for
    ``mlm_nsp``) is initialised as BERT initialises it; the MLM decoder is tied to the word embeddings, so
    only its transform and bias are new.
    """
    model_class = MlmSuiteForPreTraining if plan.args.objective == "mlm_nsp" else MlmSuiteForMaskedLM
    if not plan.model_source:
        return model_class(config), []
    model, loading = model_class.from_pretrained(
        plan.model_source, config=config, output_loading_info=True, **plan.args.pretrained_kwargs()
    )
    return model, sorted(loading["missing_keys"])


# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None, *, clock: Callable[[], float] = time.perf_counter) -> int:
    """Run the job on ``argv``; ``clock`` (seconds) times ``--max_train_minutes`` (benchmarks pass a CPU clock)."""
    started = time.time()
    # Everything that can fail on bad input happens before the output folder is touched.
    plan = plan_run(argv)  # the flags parsed, checked and resolved once; the checkpoint training continues from
    args, training_args = plan.args, plan.training_args
    claim_output_folder(training_args.output_dir, {**args.sources(), **paths_read(args)}, overwrite=training_args.overwrite_output_dir)

    # Data: documents in memory, a prepared folder or a stream; the tokenizer their rows are made with.
    corpus = open_corpus(plan)
    tokenizer = pretraining_tokenizer(plan, corpus)
    config, tokenizer = build_config(plan, tokenizer)
    extension = None
    if args.extend_vocabulary:  # a new language's pieces, learnt from the training text (or the resumed run's)
        extension = vocabulary_extension(plan, corpus, tokenizer)
        tokenizer = extension.tokenizer
    # Rows (tokenised or packed documents, or NSP pairs), each with the example_index its masks are keyed by.
    train_dataset = first_n(corpus.train_rows(tokenizer, training_args.seed), args.max_train_samples)
    eval_dataset = corpus.eval_rows(tokenizer, args.max_eval_samples)
    baseline_token_id = corpus.baseline_token_id(tokenizer, train_dataset)

    # Model: a new one (preset or --config_name) or the continued checkpoint, with any head it lacks.
    set_seed(training_args.seed)  # the initial weights follow --seed
    model, new_weights = build_model(plan, config)
    if extension is not None:
        grow_embeddings(model, extension)
    if plan.model_source and training_args.process_index == 0:
        print(describe_new_weights(args.model_name_or_path, model, new_weights), file=sys.stderr)

    # Training: seeded training masks, fixed evaluation masks; early stopping, a time budget, scheduled rows.
    train_collator = training_collator(
        tokenizer, args.mlm_probability, seed=training_args.seed, masking=args.masking,
        mask_replace_prob=args.mask_replace_prob, random_replace_prob=args.random_replace_prob,
        seed_per_rank=args.masking_seed_per_rank, flatten=args.flatten_batches,
        max_tokens_per_batch=args.max_tokens_per_batch, max_seq_length=args.max_seq_length,
    )  # fmt: skip
    callbacks = [MaskingEpochCallback(train_collator)]
    callbacks += early_stopping_callback(training_args, args.early_stopping_patience, args.early_stopping_threshold)
    budget = None
    if args.max_train_minutes is not None:
        budget = time_budget_callback(
            60.0 * args.max_train_minutes, training_args.lr_scheduler_type, training_args.lr_scheduler_kwargs,
            decay=args.lr_decay_steps, clock=clock,
        )  # fmt: skip
        callbacks.append(budget)
    probes = probe_sentences(corpus.validation["text"], tokenizer, args.fill_mask_probes, max_length=args.max_seq_length)
    if training_args.process_index == 0:  # after every check of the input, whose errors stay one line
        print(plan.describe(), file=sys.stderr)
    # What the training adds to the stock Trainer's, in the order it runs: the losses and the throughput (with the
    # MFU), a stream's or a schedule's own loader, the heads trained alone first.
    features = [*standard_features(mfu=True)]
    if args.streaming:
        features.append(StreamPosition())
    mix = plan.language_mix
    if mix is not None:
        features.append(LanguageShares(mix.languages))
    schedule = row_schedule(
        plan.mask_schedule, plan.batch_size_warmup, budget, training_args.max_steps, args.max_tokens_per_batch,
        in_order=mix is not None and mix.phased,
    )  # fmt: skip
    if schedule is not None:
        features.append(ScheduledRows(schedule))
    if args.head_warmup_steps:
        features.append(HeadWarmup(args.head_warmup_steps))
    trainer = JobTrainer(
        model=model,
        args=training_args,
        data_collator=train_collator,
        eval_data_collator=evaluation_collator(tokenizer, args.eval_mlm_probability, args.masking),
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        compute_metrics=make_mlm_compute_metrics(tokenizer.mask_token_id, baseline_token_id),
        preprocess_logits_for_metrics=preprocess_logits_for_mlm_metrics,
        callbacks=callbacks,
        features=features,
    )
    train_result = trainer.train(resume_from_checkpoint=plan.resume_from_checkpoint)
    rows_read = trainer.state.global_step * rows_per_step(training_args)
    train_metrics = {
        **train_result.metrics,
        "train_samples": corpus.rows_trained(train_dataset, rows_read),
        "train_steps": trainer.state.global_step,
    }

    # Evaluation: the model that is saved (the best one after early stopping), and its fill-mask probe; per language.
    eval_metrics, probe = evaluate_pretraining(trainer, tokenizer, probes, len(eval_dataset))
    if extension is not None:
        train_metrics.update(pieces_per_word_before_extension=extension.pieces_per_word_before,
                             pieces_per_word_after_extension=extension.pieces_per_word_after)
    languages = None
    if mix is not None:
        train_metrics.update(trainer.feature(LanguageShares).shares())
        languages = evaluate_languages(trainer, corpus, tokenizer, eval_dataset)
        eval_metrics.update(languages.eval_metrics())
        train_metrics.update(languages.tokenizer_metrics())

    # Save: the checkpoint, metrics, curves, fill-mask probe and model card.
    trainer.save_model()
    trainer.save_metrics("train", train_metrics)
    trainer.save_metrics("eval", eval_metrics)
    trainer.save_state()
    output_dir = Path(training_args.output_dir)
    if trainer.is_world_process_zero():
        plot_pretraining_curves(trainer.state.log_history, output_dir / CURVES_PNG, CURVES_CAPTION)
        (output_dir / "fill_mask_probe.json").write_text(json.dumps(probe, indent=2) + "\n", encoding="utf-8")
    training = corpus.card(train_dataset, rows_read)
    baseline_token = readable_token(tokenizer, baseline_token_id)  # "the", not byte-level BPE's "Ġthe"
    data = {
        "source": corpus.description,
        "training documents": training["documents"],
        "validation documents": len(corpus.validation),
        "training rows": training["rows"],
        "validation rows": len(eval_dataset),
        **({"vocabulary extension": extension.describe()} if extension is not None else {}),
    }
    card = pretraining_card(
        model=trainer.model, tokenizer=tokenizer, recipe=plan.recipe(), held_out_split=corpus.held_out_split,
        data=data, train_metrics=train_metrics, eval_metrics=eval_metrics, probe=probe,
        baseline_token=baseline_token, figures=figures_section([(CURVES_CAPTION, CURVES_PNG)]),
        languages=languages.table(train_metrics) if languages else "",
    )
    trainer.publish(card)  # the card, then with --push_to_hub the upload of the complete folder

    if trainer.is_world_process_zero():
        print("\n" + describe_evaluation(eval_metrics, probe, baseline_token))
        if languages:
            print(languages.describe(train_metrics))
        print(f"{trainer.state.global_step} steps; saved to {output_dir} in {time.time() - started:.0f} s")
    return 0


__all__ = [
    "CONTINUED_DEFAULTS",
    "DEFAULT_TRAINED_VOCAB_SIZE",
    "PretrainTrainingArguments",
    "PretrainingArguments",
    "build_config",
    "build_model",
    "main",
    "open_corpus",
    "parse_arguments",
    "plan_run",
    "pretraining_tokenizer",
    "vocabulary_extension",
]


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    raise SystemExit(run_job(main))
