"""``mlm-suite quickstart``: build a small model, save it, reload it through the Auto classes, compare outputs.

It checks an installation in seconds (docs/command_line.md).
"""

from __future__ import annotations

import argparse

from mlm_suite.jobs.common.running import command_prog
from mlm_suite.model import PRESETS
from mlm_suite.jobs.common.output_folder import OVERWRITE_HELP, claim_output_folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=command_prog(), description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="outputs/quickstart")
    parser.add_argument("--preset", default="mini", choices=PRESETS)
    parser.add_argument("--overwrite_output_dir", action="store_true", help=OVERWRITE_HELP)
    args = parser.parse_args(argv)
    claim_output_folder(args.output_dir, overwrite=args.overwrite_output_dir)

    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM
    from mlm_suite.data.inputs import downloads
    from mlm_suite.model_files import staged_model_folder

    tokenizer = AutoTokenizer.from_pretrained(downloads.minilm_dir())
    config = MlmSuiteConfig.preset(args.preset, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(config).eval()
    with staged_model_folder(args.output_dir) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    reloaded = AutoModelForMaskedLM.from_pretrained(args.output_dir).eval()
    batch = tokenizer(["the movie was [MASK] good .", "a masked language model"], padding=True, return_tensors="pt")
    with torch.inference_mode():
        difference = (model(**batch).logits - reloaded(**batch).logits).abs().max().item()
    parameters = sum(p.numel() for p in model.parameters())
    print(f"saved a {args.preset} MlmSuiteForMaskedLM ({parameters / 1e6:.1f} M parameters) to {args.output_dir}")
    print(f"reloaded as {type(reloaded).__name__}; max |logit difference| = {difference:.2e}")
    return 0 if difference < 1e-5 else 1


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    raise SystemExit(run_job(main))
