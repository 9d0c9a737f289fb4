"""Tokenise (and pack) pretraining documents once into Arrow shards, for ``mlm-suite pretrain --prepared_data``.

    mlm-suite prepare-data --train_file corpus/*.txt --tokenizer_name outputs/pretrain --output_dir data/corpus-128 \\
        --max_seq_length 128 --packing --preprocessing_num_workers 8
    mlm-suite pretrain --prepared_data data/corpus-128 --max_steps 100000 --output_dir runs/big

The files are read as the pretraining job reads ``--train_file`` (blank-line-separated text blocks, or JSON lines
with ``--text_column_name``), written to Arrow as they are read, never held in memory whole. The held-out documents are
``--validation_file`` or a seeded ``--validation_split_percentage`` of the documents: with the same documents and
flags, the rows written are exactly the rows ``mlm-suite pretrain`` builds in memory
(``mlm_suite.data.pretraining.prepared``). The folder records its tokenizer; ``pretrain`` refuses the folder with another one. It prints the throughput.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlm_suite.data.pretraining.documents import HELD_OUT_SEED
from mlm_suite.data.pretraining.masking import check_mlm_tokenizer
from mlm_suite.data.pretraining.packing import MIN_PACKING_LENGTH, check_row_layout
from mlm_suite.data.pretraining.prepared import prepare_data
from mlm_suite.errors import UsageError
from mlm_suite.jobs.common import arguments
from mlm_suite.jobs.common.arguments import HubArguments, check_at_least, check_file, check_model_source, check_within
from mlm_suite.jobs.common.model_loading import pretrained_tokenizer
from mlm_suite.jobs.common.output_folder import OVERWRITE_HELP, claim_output_folder, paths_read

@dataclass
class PrepareDataArguments:
    train_file: list[str] = field(metadata={"help": "text or JSON-lines files (one or more; read in this order)"})
    tokenizer_name: str = field(
        metadata={"help": "the tokenizer folder (or Hub id) pretraining will use"}
    )
    output_dir: str = field(metadata={"help": "the prepared folder to write (new or empty, or see --overwrite_output_dir)"})
    validation_file: str | None = field(default=None, metadata={"help": "held-out documents, same formats"})
    validation_split_percentage: float = field(
        default=5.0, metadata={"help": "without --validation_file: share of the documents held out (seeded, as pretrain)"}
    )
    text_column_name: str = field(
        default="text", metadata={"help": "field holding the text (JSON lines)"}
    )
    max_seq_length: int = field(default=64, metadata={"help": "longest row, special tokens included"})
    packing: bool = field(default=False, metadata={"help": "pack documents into full rows; position ids restart per document"})
    preprocessing_num_workers: int = field(
        default=1, metadata={"help": "processes that read (one per file) and tokenise"}
    )
    num_shards: int | None = field(
        default=None,
        metadata={"help": "Arrow shards of the training rows (default: one per 500 MB, at least "
                          "--preprocessing_num_workers)"},
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "write only the first N training rows (pretrain --max_train_samples keeps the same)"}
    )
    overwrite_output_dir: bool = field(default=False, metadata={"help": OVERWRITE_HELP})

    def __post_init__(self) -> None:
        for path in self.train_file:
            check_file("train_file", path)
        check_file("validation_file", self.validation_file)
        check_model_source("tokenizer_name", self.tokenizer_name)
        check_within("validation_split_percentage", self.validation_split_percentage, 0.0, 100.0, low_open=True)
        for name in ("max_seq_length", "max_train_samples", "preprocessing_num_workers", "num_shards"):
            check_at_least(name, getattr(self, name), 1)


def parse_arguments(argv: list[str] | None = None) -> tuple[PrepareDataArguments, HubArguments]:
    """The job's flags: what to prepare, and where the tokenizer comes from (``--cache_dir``, ``--model_revision`` ...)."""
    return arguments.parse_arguments([PrepareDataArguments, HubArguments], argv, description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    args, hub_args = parse_arguments(argv)  # PrepareDataArguments checks its flags
    claim_output_folder(args.output_dir, paths_read(args), overwrite=args.overwrite_output_dir)
    tokenizer = pretrained_tokenizer(args.tokenizer_name, **hub_args.pretrained_kwargs())
    check_mlm_tokenizer(tokenizer, f"--tokenizer_name {args.tokenizer_name}")
    if not tokenizer.is_fast:
        raise UsageError(f"a fast tokenizer is needed (word ids, batched encoding); {type(tokenizer).__name__} is not")
    minimum = MIN_PACKING_LENGTH if args.packing else 2
    check_row_layout(tokenizer, args.max_seq_length, minimum, "--packing" if args.packing else "a row")
    metadata = prepare_data(
        args.train_file,
        tokenizer,
        args.output_dir,
        max_seq_length=args.max_seq_length,
        packing=args.packing,
        validation_file=args.validation_file,
        validation_split_percentage=args.validation_split_percentage,
        split_seed=HELD_OUT_SEED,  # the pretraining job's split: the same documents held out
        text_column=args.text_column_name,
        num_proc=args.preprocessing_num_workers,
        num_shards=args.num_shards,
        max_train_samples=args.max_train_samples,
    )
    print(
        f"wrote {metadata['train_rows']:,} training rows ({metadata['train_tokens']:,} tokens, {metadata['train_shards']} "
        f"shards) from {metadata['train_documents']:,} documents, and {metadata['validation_documents']:,} held-out "
        f"documents, to {args.output_dir} in {metadata['seconds']:.1f} s: {metadata['tokens_per_second']:,} tokens/s "
        f"with num_proc={metadata['num_proc']}"
    )
    return 0


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    raise SystemExit(run_job(main))
