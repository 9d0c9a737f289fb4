"""``mlm-suite export-onnx``: export a checkpoint to ONNX and check it against the eager model.

    mlm-suite export-onnx --model_name_or_path outputs/ner --output outputs/ner/model.onnx

writes an ONNX file with inputs ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the model has segment
embeddings), dynamic batch and sequence axes, and outputs named after the model output's fields; it then runs the
file with onnxruntime on a padded batch of another shape and fails (exit status 1) when the largest difference from
the eager model exceeds ``--tolerance``. Needs the ``onnx`` extra. See docs/models.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlm_suite.errors import UsageError
from mlm_suite.export import export_onnx, onnx_difference


def build_parser() -> argparse.ArgumentParser:
    from mlm_suite.jobs.distributed import command_prog

    parser = argparse.ArgumentParser(prog=command_prog(), description="export an mlm_suite checkpoint to ONNX")
    parser.add_argument("--model_name_or_path", required=True, help="an mlm_suite checkpoint folder (any head)")
    parser.add_argument("--output", required=True, help="the .onnx file to write")
    parser.add_argument("--opset_version", type=int, default=None, help="ONNX opset (default: torch's)")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest allowed |onnxruntime - eager| (default 1e-4)")
    return parser


def main(argv: list[str] | None = None) -> float:
    args = build_parser().parse_args(argv)
    source = Path(args.model_name_or_path)
    if not (source / "config.json").is_file():
        raise UsageError(f"--model_name_or_path {source}: no config.json there (an mlm_suite checkpoint folder)")
    output = Path(args.output)
    if output.suffix != ".onnx":
        raise UsageError(f"--output {output}: the file name must end in .onnx")
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise UsageError(f"export-onnx needs the onnx extra: pip install 'mlm-suite[onnx]' ({error})") from None
    from transformers import AutoConfig

    import mlm_suite.model as model_code

    config = AutoConfig.from_pretrained(source)
    architecture = (config.architectures or ["MlmSuiteModel"])[0]
    model_class = getattr(model_code, architecture, None)
    if model_class is None:
        raise UsageError(f"--model_name_or_path {source} holds a {architecture}, not an mlm_suite model")
    model = model_class.from_pretrained(source).eval()
    output.parent.mkdir(parents=True, exist_ok=True)
    names = export_onnx(model, output, args.opset_version)
    difference = onnx_difference(model, output)
    if difference > args.tolerance:
        output.unlink()
        raise SystemExit(
            f"the ONNX model differed from the eager model by {difference:.2e} > --tolerance {args.tolerance}; removed {output}"
        )
    print(f"wrote {output} ({architecture}; outputs {', '.join(names)}); max |onnxruntime - eager| = {difference:.2e}")
    return difference


if __name__ == "__main__":
    from mlm_suite.jobs.distributed import run_job

    run_job(main)
