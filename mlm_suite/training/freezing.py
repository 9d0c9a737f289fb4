"""Freeze the encoder of a fine-tuning model, fully or all but its last layers.

Works on mlm_suite heads (encoder at ``model.encoder``: ``embeddings``, ``layers``, optional
``final_norm`` and ``pooler``) and on Hugging Face BERT heads (``model.bert``: ``embeddings``,
``encoder.layer``, optional ``pooler``). Call it before handing the model to the ``Trainer``:
the Trainer's optimizer only receives parameters with ``requires_grad=True``, so frozen ones
get neither updates nor optimizer state.
"""

from __future__ import annotations

from torch import nn


def _encoder_parts(model: nn.Module) -> tuple[nn.Module, nn.ModuleList]:
    """The model's encoder (its ``base_model``) and that encoder's list of layers."""
    encoder = getattr(model, "base_model", model)
    if isinstance(getattr(encoder, "layers", None), nn.ModuleList):  # mlm_suite
        return encoder, encoder.layers
    inner = getattr(encoder, "encoder", None)
    if isinstance(getattr(inner, "layer", None), nn.ModuleList):  # HF BERT family
        return encoder, inner.layer
    raise TypeError(
        f"freeze_encoder does not know where the layers of {type(model).__name__} are: expected "
        "base_model.layers (mlm_suite) or base_model.encoder.layer (HF BERT)"
    )


def freeze_encoder(model: nn.Module, train_last_k_layers: int | None = 0) -> dict[str, int]:
    """Set ``requires_grad`` so that only the head and the last ``train_last_k_layers`` layers train.

    Args:
        model: a task model (token/sequence/pair classification, ...) built on an mlm_suite or
            HF BERT encoder.
        train_last_k_layers:
            * ``0``: head only. The encoder (embeddings and every layer) is frozen; the pooler,
              when present, counts as part of the head and trains.
            * ``k`` in ``1..num_layers``: the last k layers train too (plus the final LayerNorm
              of pre-norm mlm_suite encoders, which belongs to the top of the stack); the
              embeddings and the lower layers stay frozen. ``k = num_layers`` freezes only the
              embeddings.
            * ``None`` or ``-1``: nothing is frozen (ordinary full fine-tuning), except the
              parameters a model lists as unused (``model.unused_parameters()``).

    Every parameter's flag is set explicitly, so calling it again with another ``k`` undoes the
    previous call.

    Returns:
        ``{"trainable": n, "frozen": m}`` parameter counts (numbers of scalars).

    Raises:
        ValueError: ``train_last_k_layers`` is below -1 or above the number of layers.
        TypeError: the model's layers cannot be found.
    """
    encoder, layers = _encoder_parts(model)
    if train_last_k_layers is None or train_last_k_layers == -1:
        frozen: set[int] = set()
    else:
        if not 0 <= train_last_k_layers <= len(layers):
            raise ValueError(
                f"train_last_k_layers={train_last_k_layers} but the encoder has {len(layers)} layers; "
                f"use 0..{len(layers)}, or None / -1 to train everything"
            )
        trainable_modules = list(layers[len(layers) - train_last_k_layers:])
        if getattr(encoder, "pooler", None) is not None:
            trainable_modules.append(encoder.pooler)
        if train_last_k_layers > 0 and getattr(encoder, "final_norm", None) is not None:
            trainable_modules.append(encoder.final_norm)
        trainable = {id(p) for module in trainable_modules for p in module.parameters()}
        frozen = {id(p) for p in encoder.parameters() if id(p) not in trainable}
    # A model may carry weights it never uses (the sentence-embedding model's pooler): they stay frozen.
    frozen |= {id(p) for p in getattr(model, "unused_parameters", list)()}
    counts = {"trainable": 0, "frozen": 0}
    for parameter in model.parameters():
        parameter.requires_grad_(id(parameter) not in frozen)
        counts["frozen" if id(parameter) in frozen else "trainable"] += parameter.numel()
    return counts


__all__ = ["freeze_encoder"]
