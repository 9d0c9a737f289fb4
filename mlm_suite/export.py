"""``torch.export`` and ONNX export of mlm_suite models, checked against the eager model.

Under tracing the encoder lays tokens out with ``SequenceLayout.traced_dense`` (every cell of the padded batch is
computed, masks keep pads and packed documents apart), so the exported graph has no data-dependent shapes and takes
any batch size and length. The command is ``mlm-suite export-onnx`` (:mod:`mlm_suite.jobs.export_onnx`); see
docs/models.md.
"""

from __future__ import annotations

from pathlib import Path

import torch


INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# torch's exporter translates operators with opset 18 and later (an older opset is "converted" afterwards and,
# when that fails, silently stays 18). From 23 on attention becomes ONNX's Attention operator, which onnxruntime's
# CPU kernel refuses for a padding mask broadcast over the heads.
OPSET_VERSIONS = range(18, 23)


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
    """Write ``model`` (eval mode) to an ONNX file with dynamic batch and sequence axes; return its output names.

    The weights go beside it, in ``<path>.data``. ``opset_version`` is one of :data:`OPSET_VERSIONS` (default: torch's).
    """
    if opset_version is not None and opset_version not in OPSET_VERSIONS:
        raise ValueError(
            f"opset_version {opset_version}: the opsets exported are {OPSET_VERSIONS[0]} to {OPSET_VERSIONS[-1]} (OPSET_VERSIONS)"
        )
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


__all__ = ["OPSET_VERSIONS", "dynamic_shapes", "example_inputs", "export_onnx", "export_program", "onnx_difference", "output_names"]
