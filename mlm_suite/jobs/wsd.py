"""Word sense disambiguation with sense centroids of contextual word vectors.

Trains a nearest-centroid classifier (one centroid per word sense, cosine) on sense-labelled
word instances and compares it with the most-frequent-sense baseline. The default data are
the WordNet 3.0 example sentences (see :mlm_suite.analysis.wordnet:); your own data are JSON lines
``{"tokens": [...], "target": index, "sense": "...", "lemma": "..." (optional)}``.

    mlm-suite wsd                                   # WordNet data, real MiniLM-L6
    mlm-suite wsd --standardize --layers last4_mean
    mlm-suite wsd --train_file train.jsonl --test_file test.jsonl --model_name_or_path ./my-model

See docs/analysis.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from transformers import AutoModel

from mlm_suite.analysis.embeddings import ContextualEmbedder, save_json
from mlm_suite.conversion import converted_minilm_dir
from mlm_suite.errors import UsageError
from mlm_suite.jobs.common.output_folder import OVERWRITE_HELP, claim_output_folder, paths_read
from mlm_suite.jobs.common.arguments import check_at_least, check_file, check_model_source, check_within, parse_arguments
from mlm_suite.jobs.common.model_loading import pretrained_config, pretrained_model, pretrained_tokenizer
from mlm_suite.model_files import check_vocabulary
from mlm_suite.analysis.wordnet import WSDSplit, evaluate_wsd, limit_lemmas, read_jsonl, wordnet_wsd_dataset


def parse_layers(value: str) -> str | list[int]:
    """``last``, ``last4_mean``, ``last4_sum`` or comma-separated indices into hidden_states (``0,3``)."""
    if value in ("last", "last4_mean", "last4_sum"):
        return value
    try:
        return [int(part) for part in value.split(",")]
    except ValueError:
        raise UsageError(
            f"--layers must be last, last4_mean, last4_sum or comma-separated integers, got {value!r}"
        ) from None


def check_layers(layers: str | list[int], num_hidden_layers: int, model_path: str) -> None:
    """``--layers`` against the model: indices into its ``num_hidden_layers + 1`` hidden states."""
    states = num_hidden_layers + 1
    if layers in ("last4_mean", "last4_sum") and states < 4:
        raise UsageError(f"--layers {layers} needs 4 hidden states; {model_path} has {states}")
    for index in layers if isinstance(layers, list) else ():
        if not -states <= index < states:
            raise UsageError(
                f"--layers: index {index} is out of range for {model_path}, which has {states} hidden states "
                f"(0 = embeddings, {states - 1} = last layer)"
            )


@dataclass
class WsdArguments:
    """The job's flags, checked before anything is read or written (``--layers`` against the model:
    :func:`check_layers`)."""

    train_file: str | None = field(
        default=None, metadata={"help": "JSON-lines training instances (default: WordNet example sentences)"}
    )
    test_file: str | None = field(
        default=None, metadata={"help": "JSON-lines test instances (required with --train_file)"}
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "encoder folder (default: the real all-MiniLM-L6-v2 converted to mlm_suite)"}
    )
    layers: str = field(default="last", metadata={"help": "last | last4_mean | last4_sum | i,j,..."})
    subword_pooling: Literal["mean", "first"] = "mean"
    standardize: bool = field(default=False, metadata={"help": "also score centroids of z-scored vectors"})
    pos: str = field(default="n,v", metadata={"help": "WordNet data: parts of speech, comma-separated (n, v, a, r)"})
    max_lemmas: int | None = field(
        default=None,
        metadata={"help": "keep only the first N lemmas (alphabetically) that have test instances, for quick runs"},
    )
    test_fraction: float = field(default=0.3, metadata={"help": "WordNet data: share of each sense held out"})
    seed: int = field(default=0, metadata={"help": "WordNet data: seed of the train/test split"})
    batch_size: int = 64
    output_dir: str = "outputs/wsd"
    overwrite_output_dir: bool = field(default=False, metadata={"help": OVERWRITE_HELP})

    def __post_init__(self) -> None:
        parse_layers(self.layers)
        if (self.train_file is None) != (self.test_file is None):
            raise UsageError("give both --train_file and --test_file, or neither (to use the WordNet data)")
        check_at_least("batch_size", self.batch_size, 1)
        check_at_least("max_lemmas", self.max_lemmas, 1)
        check_within("test_fraction", self.test_fraction, 0.0, 1.0, low_open=True)
        check_file("train_file", self.train_file)
        check_file("test_file", self.test_file)
        check_model_source("model_name_or_path", self.model_name_or_path)


def main(argv: list[str] | None = None) -> dict:
    # Everything that can fail on bad input happens before the output folder is created.
    (args,) = parse_arguments((WsdArguments,), argv, description=__doc__.split("\n\n")[0])
    layers = parse_layers(args.layers)
    claim_output_folder(args.output_dir, paths_read(args),
                        overwrite=args.overwrite_output_dir)
    if args.train_file:
        split = WSDSplit(train=read_jsonl(args.train_file), test=read_jsonl(args.test_file), dropped_test=0)
        data_name = f"{args.train_file} / {args.test_file}"
    else:
        pos = tuple(tag.strip() for tag in args.pos.split(","))
        split = wordnet_wsd_dataset(pos=pos, test_fraction=args.test_fraction, seed=args.seed)
        data_name = f"WordNet 3.0 example sentences (pos: {args.pos})"
    if args.max_lemmas is not None:
        split = limit_lemmas(split, args.max_lemmas)

    model_path = args.model_name_or_path or str(converted_minilm_dir())
    config = pretrained_config(model_path)
    check_layers(layers, config.num_hidden_layers, model_path)
    tokenizer = pretrained_tokenizer(model_path)
    check_vocabulary(tokenizer, config, model_path, model_path)
    model = pretrained_model(AutoModel, model_path, config=config)
    embedder = ContextualEmbedder(
        model, tokenizer, layers=layers, subword_pooling=args.subword_pooling, batch_size=args.batch_size
    )
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    standardizer_path = output_dir / "standardizer.safetensors"
    results = evaluate_wsd(
        embedder, split.train, split.test, standardize=args.standardize, standardizer_path=standardizer_path
    )
    results.update(data=data_name, model=model_path, layers=layers, subword_pooling=args.subword_pooling)

    print(f"data: {data_name}")
    print(
        f"{results['n_lemmas']} lemmas, {results['n_senses']} senses, {results['n_train']} train / "
        f"{results['n_test']} test instances ({results['dropped_test']} test instances dropped: unseen sense)"
    )
    print(f"{'method':<34}{'accuracy':>9}")
    print(f"{'most frequent sense (baseline)':<34}{results['baseline_accuracy']:>9.4f}")
    print(f"{'sense centroids':<34}{results['accuracy']:>9.4f}")
    if "standardized_accuracy" in results:
        print(f"{'sense centroids, z-scored':<34}{results['standardized_accuracy']:>9.4f}")
    save_json(results, output_dir / "results.json")
    print(f"wrote {output_dir / 'results.json'}")
    return results


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    run_job(main)
