"""The ``mlm-suite`` command line.

Each subcommand forwards its remaining arguments to a ``main(argv)`` function, imported only
when that subcommand runs so ``mlm-suite --help`` stays fast (the table of commands:
:mod:`mlm_suite.jobs.commands`).

Options before the subcommand: ``--version``, ``--help`` and ``--debug`` (show the full traceback
of user errors, as ``MLM_SUITE_DEBUG=1`` does; see :mod:`mlm_suite.errors`). ``--debug`` after the
subcommand is the jobs' own ``TrainingArguments`` flag, not this one.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata

from mlm_suite.jobs.commands import SUBCOMMANDS
from mlm_suite.jobs.distributed import run_job


def convert_bert_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlm-suite convert-bert", description=SUBCOMMANDS["convert-bert"][1])
    parser.add_argument("src", help="folder with a BERT config.json and weights (safetensors or pytorch_model.bin)")
    parser.add_argument("dst", help="output folder")
    args = parser.parse_args(argv)
    from mlm_suite.convert import convert_bert_checkpoint

    print(f"converted {args.src} -> {convert_bert_checkpoint(args.src, args.dst)}")
    return 0


def quickstart_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlm-suite quickstart", description=SUBCOMMANDS["quickstart"][1])
    parser.add_argument("--output_dir", default="outputs/quickstart")
    parser.add_argument("--preset", default="mini")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM
    from mlm_suite.data import resources

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


def _installed_version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def version_text() -> str:
    """``mlm-suite <version> (torch <version>, transformers <version>, Python <version>)``."""
    try:
        own = metadata.version("mlm-suite")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        from mlm_suite import __version__ as own
    python = ".".join(map(str, sys.version_info[:3]))
    return (
        f"mlm-suite {own} (torch {_installed_version('torch')}, "
        f"transformers {_installed_version('transformers')}, Python {python})"
    )


def overview() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in SUBCOMMANDS.items()]
    return (
        "usage: mlm-suite [--version] [--debug] <command> [options]\n\ncommands:\n" + "\n".join(lines)
        + "\n\noptions:\n  -h, --help  show this message; mlm-suite <command> --help shows a command's options"
        + "\n  --version   print the versions of mlm-suite, torch and transformers"
        + "\n  --debug     show the full traceback of user errors (also: MLM_SUITE_DEBUG=1)"
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = None
    while argv and argv[0].startswith("-"):
        option = argv.pop(0)
        if option in ("-h", "--help"):
            print(overview())
            return 0
        if option == "--version":
            print(version_text())
            return 0
        if option == "--debug":
            debug = True
            continue
        print(overview(), file=sys.stderr)
        print(f"mlm-suite: error: unknown option {option!r}", file=sys.stderr)
        return 2
    if not argv:
        print(overview())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in SUBCOMMANDS:
        print(overview(), file=sys.stderr)
        print(f"mlm-suite: error: unknown command {command!r}", file=sys.stderr)
        return 2
    if command == "quickstart":
        job = quickstart_main
    elif command == "convert-bert":
        job = convert_bert_main
    else:
        job = importlib.import_module(SUBCOMMANDS[command][0]).main
    result = run_job(job, rest, prog=f"mlm-suite {command}", debug=debug)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
