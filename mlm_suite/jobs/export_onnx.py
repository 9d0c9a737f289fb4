"""``mlm-suite export-onnx``: export a checkpoint to ONNX and check it against the eager model.

    mlm-suite export-onnx --model_name_or_path outputs/ner --output outputs/ner/model.onnx

writes an ONNX file (and its weights, ``model.onnx.data``) with inputs ``input_ids``, ``attention_mask`` (and
``token_type_ids`` when the model has segment embeddings), dynamic batch and sequence axes, and outputs named after
the model output's fields; it then runs the file with onnxruntime on a padded batch of another shape and fails (exit
status 1) when the largest difference from the eager model exceeds ``--tolerance``. The files are written in a
staging folder and moved into place once they passed, so a failed export leaves nothing behind. Needs the ``onnx``
extra. See docs/models.md.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
from pathlib import Path

from mlm_suite.errors import UsageError, staging_folder, writing
from mlm_suite.export import OPSET_VERSIONS, export_onnx, onnx_difference


def build_parser() -> argparse.ArgumentParser:
    from mlm_suite.jobs.common.running import command_prog

    parser = argparse.ArgumentParser(prog=command_prog(), description="export an mlm_suite checkpoint to ONNX")
    parser.add_argument("--model_name_or_path", required=True, help="an mlm_suite checkpoint folder (any head)")
    parser.add_argument("--output", required=True, help="the .onnx file to write")
    parser.add_argument(
        "--opset_version", type=int, default=None,
        help=f"ONNX opset, {OPSET_VERSIONS[0]} to {OPSET_VERSIONS[-1]} (default: torch's)",
    )
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest allowed |onnxruntime - eager| (default 1e-4)")
    return parser


def check_flags(args: argparse.Namespace) -> None:
    """The flags' values, before anything is read or written."""
    if args.opset_version is not None and args.opset_version not in OPSET_VERSIONS:
        raise UsageError(
            f"--opset_version {args.opset_version}: export-onnx writes opsets {OPSET_VERSIONS[0]} to {OPSET_VERSIONS[-1]} "
            f"(torch's exporter starts at {OPSET_VERSIONS[0]}; onnxruntime cannot run the attention of later ones)"
        )
    if not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise UsageError(f"--tolerance must be a non-negative number (the largest allowed difference), got {args.tolerance}")
    if Path(args.output).is_dir():
        raise UsageError(f"--output {args.output} is a folder: name the .onnx file to write (e.g. {Path(args.output) / 'model.onnx'})")
    if Path(args.output).suffix != ".onnx":
        raise UsageError(f"--output {args.output}: the file name must end in .onnx")


def main(argv: list[str] | None = None) -> float:
    from mlm_suite.jobs.common.model_loading import pretrained_config, pretrained_model

    args = build_parser().parse_args(argv)
    check_flags(args)
    source = Path(args.model_name_or_path)
    if not (source / "config.json").is_file():
        raise UsageError(f"--model_name_or_path {source}: no config.json there (an mlm_suite checkpoint folder)")
    output = Path(args.output)
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise UsageError(f"export-onnx needs the onnx extra: pip install 'mlm-suite[onnx]' ({error})") from None
    import mlm_suite.model as model_code

    config = pretrained_config(str(source))
    architecture = (config.architectures or ["MlmSuiteModel"])[0]
    model_class = getattr(model_code, architecture, None)
    if model_class is None:
        raise UsageError(f"--model_name_or_path {source} holds a {architecture}, not an mlm_suite model")
    model = pretrained_model(model_class, str(source)).eval()

    # The files are staged beside the output (the .onnx file names its .data file) and moved in once they passed.
    created = next((folder for folder in reversed([output.parent, *output.parent.parents]) if not folder.exists()), None)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        with writing(output), staging_folder(output.parent, f".{output.name}.staging-") as staging:
            staged = staging / output.name
            names = export_onnx(model, staged, args.opset_version)
            difference = onnx_difference(model, staged)
            if difference > args.tolerance:
                raise SystemExit(
                    f"the ONNX model differed from the eager model by {difference:.2e} > --tolerance {args.tolerance}; "
                    f"nothing written to {output}"
                )
            for file in sorted(staging.iterdir()):
                os.replace(file, output.parent / file.name)
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    print(f"wrote {output} ({architecture}; outputs {', '.join(names)}); max |onnxruntime - eager| = {difference:.2e}")
    return difference


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    run_job(main)
