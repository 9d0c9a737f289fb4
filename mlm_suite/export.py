"""``torch.export`` and ONNX export of mlm_suite models, checked against the eager model.

Under tracing the encoder lays tokens out with ``SequenceLayout.traced_dense`` (every cell of the
padded batch is computed, masks keep pads and packed documents apart, pad outputs are zeroed), so
the exported graph has no data-dependent shapes and takes any batch size and length::

    mlm-suite export-onnx --model_name_or_path outputs/ner --output outputs/ner/model.onnx

writes an ONNX file with inputs ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the
model has segment embeddings), dynamic batch and sequence axes, and outputs named after the model
output's fields (``logits``, ``last_hidden_state`` ...). It then runs the file with onnxruntime on
a padded batch of another shape and prints the largest difference from the eager model; above
``--tolerance`` the command fails (exit status 1). Needs the ``onnx`` extra
(``pip install "mlm-suite[onnx]"``: onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from mlm_suite.errors import UsageError

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def example_inputs(model: torch.nn.Module, batch_size: int = 2, seq_len: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    """A padded batch the model accepts: random ids, the last row half padding, two segments when the model has them."""
    config = model.config
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, config.vocab_size, (batch_size, seq_len), generator=generator)
    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    attention_mask[-1, seq_len // 2 :] = 0
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if config.type_vocab_size > 1:
        token_type_ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
        token_type_ids[:, seq_len // 2 :] = 1
        inputs["token_type_ids"] = token_type_ids
    return inputs


def dynamic_shapes(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, dict[int, object]]:
    """Dynamic batch and sequence axes; learned absolute positions bound the sequence length."""
    absolute = getattr(model.config, "position_embedding_type", "absolute") == "absolute"
    seq = torch.export.Dim("seq", max=model.config.max_position_embeddings) if absolute else torch.export.Dim("seq")
    batch = torch.export.Dim("batch")
    return {name: {0: batch, 1: seq} for name in inputs}


def export_program(model: torch.nn.Module, inputs: dict[str, torch.Tensor] | None = None) -> torch.export.ExportedProgram:
    """``torch.export.export`` of an eval-mode model with dynamic batch and sequence axes."""
    inputs = inputs if inputs is not None else example_inputs(model)
    return torch.export.export(model.eval(), (), kwargs=inputs, dynamic_shapes=dynamic_shapes(model, inputs))


def output_names(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> list[str]:
    """The fields the model returns for ``inputs`` (no labels), in order: ``logits``, ``last_hidden_state`` ..."""
    with torch.no_grad():
        return [name for name, value in model.eval()(**inputs).items() if isinstance(value, torch.Tensor)]


def export_onnx(model: torch.nn.Module, path: str | Path, opset_version: int | None = None) -> list[str]:
    """Write ``model`` (eval mode) to an ONNX file with dynamic batch and sequence axes; return its output names."""
    inputs = example_inputs(model)
    names = output_names(model, inputs)
    kwargs = {} if opset_version is None else {"opset_version": opset_version}
    torch.onnx.export(
        model.eval(),
        (),
        str(path),
        kwargs=inputs,
        dynamic_shapes=dynamic_shapes(model, inputs),
        input_names=list(inputs),
        output_names=names,
        dynamo=True,
        verbose=False,
        **kwargs,
    )
    return names


def onnx_difference(model: torch.nn.Module, path: str | Path, batch_size: int = 3, seq_len: int = 13) -> float:
    """Largest absolute difference between onnxruntime on ``path`` and the eager model, over every output."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = example_inputs(model, batch_size, seq_len, seed=1)
    feeds = {item.name: inputs[item.name].numpy() for item in session.get_inputs()}
    names = [item.name for item in session.get_outputs()]
    with torch.no_grad():
        expected = model.eval()(**inputs)
    produced = session.run(names, feeds)
    return max(float((expected[name] - torch.from_numpy(value)).abs().max()) for name, value in zip(names, produced))


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
