"""Anisotropy of contextual word vectors, layer by layer, before and after z-scoring.

Embeds a random sample of real movie-review sentences (Pang & Lee) with an encoder, takes
every word instance's vector at each entry of ``hidden_states`` (0 = embedding layer), and
measures the expected cosine between random pairs of distinct instances (Ethayarajh, 2019)
on the raw vectors and on per-dimension z-scored vectors (Timkey & van Schijndel, 2021).
Writes ``anisotropy.json`` and ``anisotropy.png`` (x = layer, raw vs z-scored).

    mlm-suite anisotropy
    mlm-suite anisotropy --num_sentences 1000 --model_name_or_path ./my-model

See docs/analysis.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoModel

from mlm_suite.analysis.embeddings import ContextualEmbedder, layerwise_anisotropy, save_json
from mlm_suite.conversion import converted_minilm_dir
from mlm_suite.data.inputs.builtin import BUILTIN_DATASETS
from mlm_suite.data.words import split_words
from mlm_suite.errors import UsageError
from mlm_suite.evaluation.plots import plot_anisotropy
from mlm_suite.jobs.common.output_folder import OVERWRITE_HELP, claim_output_folder
from mlm_suite.jobs.common.arguments import check_at_least, check_model_source, parse_arguments
from mlm_suite.jobs.common.model_loading import pretrained_config, pretrained_model, pretrained_tokenizer
from mlm_suite.model_files import check_vocabulary


@dataclass
class AnisotropyArguments:
    """The job's flags, checked before anything is read or written (``--num_sentences`` against the corpus:
    :func:`main`)."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "encoder folder (default: the real all-MiniLM-L6-v2 converted to mlm_suite)"}
    )
    num_sentences: int = field(default=300, metadata={"help": "sentences sampled from Pang & Lee"})
    n_pairs: int = field(default=10000, metadata={"help": "random instance pairs per layer"})
    seed: int = 0
    batch_size: int = 32
    output_dir: str = "outputs/anisotropy"
    overwrite_output_dir: bool = field(default=False, metadata={"help": OVERWRITE_HELP})

    def __post_init__(self) -> None:
        check_at_least("batch_size", self.batch_size, 1)
        check_at_least("n_pairs", self.n_pairs, 1)
        check_at_least("num_sentences", self.num_sentences, 2)  # the cosines compare pairs of sentences' words
        check_model_source("model_name_or_path", self.model_name_or_path)


def main(argv: list[str] | None = None) -> list[dict]:
    (args,) = parse_arguments((AnisotropyArguments,), argv, description=__doc__.split("\n\n")[0])
    claim_output_folder(args.output_dir, {"--model_name_or_path": args.model_name_or_path},
                        overwrite=args.overwrite_output_dir)
    texts = BUILTIN_DATASETS["pang_lee_sentences"].read()
    if not 2 <= args.num_sentences <= len(texts):
        raise UsageError(f"--num_sentences must be between 2 and {len(texts)}, got {args.num_sentences}")
    sample = random.Random(args.seed).sample(texts, args.num_sentences)
    sentences = [[word for word, _, _ in split_words(text)] for text in sample]

    model_path = args.model_name_or_path or str(converted_minilm_dir())
    config = pretrained_config(model_path)
    tokenizer = pretrained_tokenizer(model_path)
    check_vocabulary(tokenizer, config, model_path, model_path)
    model = pretrained_model(AutoModel, model_path, config=config)
    embedder = ContextualEmbedder(model, tokenizer, batch_size=args.batch_size)
    results = layerwise_anisotropy(embedder, sentences, n_pairs=args.n_pairs, seed=args.seed)

    n_words = sum(len(words) for words in sentences)
    print(f"{args.num_sentences} Pang & Lee sentences, {n_words} word instances, model {model_path}")
    print(f"{'layer':>5}{'raw':>9}{'z-scored':>10}{'top rogue dim':>15}{'its share':>11}")
    for row in results:
        print(
            f"{row['layer']:>5}{row['raw']:>9.4f}{row['standardized']:>10.4f}"
            f"{row['top_rogue_dimension']:>15}{row['top_rogue_share']:>11.3f}"
        )
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    save_json(
        {"model": model_path, "num_sentences": args.num_sentences, "n_word_instances": n_words, "layers": results},
        output_dir / "anisotropy.json",
    )
    plot_anisotropy(results, output_dir / "anisotropy.png", f"Anisotropy by layer ({Path(model_path).name})")
    print(f"wrote {output_dir / 'anisotropy.json'} and {output_dir / 'anisotropy.png'}")
    return results


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    run_job(main)
