"""The ``mlm-suite`` command line.

Each subcommand forwards its remaining arguments to a ``main(argv)`` function, imported only
when that subcommand runs so ``mlm-suite --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .jobs.distributed import run_job

# subcommand → (module with main(argv), one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "quickstart": ("mlm_suite.cli", "build a small model, save it, reload it through the Auto classes, compare outputs"),
    "convert-bert": ("mlm_suite.cli", "convert a Hugging Face BERT folder into an mlm_suite folder"),
    "pretrain": ("mlm_suite.jobs.pretrain", "MLM (+NSP) pretraining with the HF Trainer"),
    "finetune-ner": ("mlm_suite.jobs.finetune_ner", "token classification (NER/POS) fine-tuning"),
    "finetune-cls": ("mlm_suite.jobs.finetune_classification", "sequence classification fine-tuning"),
    "finetune-pair": ("mlm_suite.jobs.finetune_pair", "sentence-pair classification / regression fine-tuning"),
    "seeds": ("mlm_suite.jobs.seeds", "repeat a fine-tuning job over seeds; mean ± sd of its scores"),
    "wsd": ("mlm_suite.jobs.wsd", "nearest-centroid word-sense disambiguation with contextual embeddings"),
    "anisotropy": ("mlm_suite.jobs.anisotropy", "anisotropy of contextual embeddings per layer, raw and z-scored"),
}


def convert_bert_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlm-suite convert-bert", description=SUBCOMMANDS["convert-bert"][1])
    parser.add_argument("src", help="folder with a BERT config.json and weights (safetensors or pytorch_model.bin)")
    parser.add_argument("dst", help="output folder")
    args = parser.parse_args(argv)
    from .convert import convert_bert_checkpoint

    print(f"converted {args.src} -> {convert_bert_checkpoint(args.src, args.dst)}")
    return 0


def quickstart_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlm-suite quickstart", description=SUBCOMMANDS["quickstart"][1])
    parser.add_argument("--output_dir", default="outputs/quickstart")
    parser.add_argument("--preset", default="mini")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from . import MlmSuiteConfig, MlmSuiteForMaskedLM, resources

    tokenizer = AutoTokenizer.from_pretrained(resources.minilm_dir())
    config = MlmSuiteConfig.preset(args.preset, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(config).eval()
    model.save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    reloaded = AutoModelForMaskedLM.from_pretrained(args.output_dir).eval()
    batch = tokenizer(["the movie was [MASK] good .", "a masked language model"], padding=True, return_tensors="pt")
    with torch.inference_mode():
        difference = (model(**batch).logits - reloaded(**batch).logits).abs().max().item()
    parameters = sum(p.numel() for p in model.parameters())
    print(f"saved a {args.preset} MlmSuiteForMaskedLM ({parameters / 1e6:.1f} M parameters) to {args.output_dir}")
    print(f"reloaded as {type(reloaded).__name__}; max |logit difference| = {difference:.2e}")
    return 0 if difference < 1e-5 else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        width = max(map(len, SUBCOMMANDS))
        lines = [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in SUBCOMMANDS.items()]
        print("usage: mlm-suite <command> [options]\n\ncommands:\n" + "\n".join(lines))
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    command, rest = argv[0], argv[1:]
    if command == "quickstart":
        return quickstart_main(rest)
    if command == "convert-bert":
        return convert_bert_main(rest)
    result = run_job(importlib.import_module(SUBCOMMANDS[command][0]).main, rest)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
