"""``mlm-suite convert``: convert a Hugging Face folder of a BERT-like family (those of
:data:`mlm_suite.conversion.FAMILIES`: the encoder and its head) into an mlm_suite folder.

    mlm-suite convert path/to/roberta-folder path/to/mlm_suite-folder
    mlm-suite convert path/to/sentence-transformers-folder out --classifier_pooling cls

The conversion itself is :func:`mlm_suite.conversion.convert_checkpoint`; see docs/models.md#converting-checkpoints.
"""

from __future__ import annotations

import argparse
import json

from mlm_suite.conversion import FAMILY_NAMES, convert_checkpoint
from mlm_suite.jobs.common.running import command_prog
from mlm_suite.jobs.common.output_folder import OVERWRITE_HELP, claim_output_folder

DESCRIPTION = f"convert a Hugging Face {FAMILY_NAMES} folder (the encoder and its head) into an mlm_suite folder"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=command_prog(), description=DESCRIPTION)
    parser.add_argument("src", help="folder with a config.json and weights (safetensors or pytorch_model.bin)")
    parser.add_argument("dst", help="output folder")
    parser.add_argument(
        "--classifier_pooling",
        choices=("cls", "mean"),
        help="pooling of the sequence heads (default: the pooling a sentence-transformers folder was trained with, else cls)",
    )
    parser.add_argument("--overwrite_output_dir", action="store_true", help=OVERWRITE_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    claim_output_folder(args.dst, inputs={"src": args.src}, flag="dst", overwrite=args.overwrite_output_dir)
    destination = convert_checkpoint(args.src, args.dst, classifier_pooling=args.classifier_pooling)
    config = json.loads((destination / "config.json").read_text())
    print(f"converted {args.src} -> {destination} ({config['architectures'][0]}, classifier_pooling={config['classifier_pooling']})")
    return 0


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    run_job(main)
