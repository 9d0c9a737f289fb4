"""``mlm-suite export-native``: write an mlm_suite folder as the folder of the transformers class that computes the
same outputs (``BertForMaskedLM``, ``RobertaForSequenceClassification``, ``ModernBertModel``, ...), which loads
without ``trust_remote_code``; a folder no such class computes is refused in one line naming what has no counterpart.

    mlm-suite export-native outputs/pretrain outputs/pretrain-bert
    mlm-suite export-native path/to/converted-folder out --family xlm-roberta

The export itself is :func:`mlm_suite.conversion.export_native_checkpoint`; see
docs/models.md#exporting-to-transformers-classes.
"""

from __future__ import annotations

import argparse
import json

from mlm_suite.conversion import export_native_checkpoint
from mlm_suite.conversion.families import EXPORTED, TRIED_BY_EXPORT
from mlm_suite.jobs.common.output_folder import OVERWRITE_HELP, claim_output_folder
from mlm_suite.jobs.common.running import command_prog

DESCRIPTION = (
    "write an mlm_suite folder as the folder of the transformers class (BertFor*, RobertaFor*, XLMRobertaFor*, "
    "DistilBertFor*, ElectraFor*, ModernBertFor*) that computes the same outputs, loadable without trust_remote_code"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=command_prog(), description=DESCRIPTION)
    parser.add_argument("src", help="an mlm_suite folder (config.json and its weights)")
    parser.add_argument("dst", help="output folder")
    parser.add_argument(
        "--family",
        choices=EXPORTED,
        help=f"the family to write (default: the one the folder was converted from, else the first of "
        f"{', '.join(TRIED_BY_EXPORT)} whose class computes what the folder does)",
    )
    parser.add_argument("--overwrite_output_dir", action="store_true", help=OVERWRITE_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    claim_output_folder(args.dst, inputs={"src": args.src}, flag="dst", overwrite=args.overwrite_output_dir)
    destination = export_native_checkpoint(args.src, args.dst, family=args.family)
    config = json.loads((destination / "config.json").read_text())
    print(f"exported {args.src} -> {destination} ({config['architectures'][0]})")
    return 0


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    run_job(main)
