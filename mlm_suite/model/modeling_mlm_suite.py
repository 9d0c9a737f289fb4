"""The mlm_suite encoder and its task heads: a BERT-family encoder that computes exactly what
``transformers.BertModel`` computes with the default configuration, padding-free (pad tokens are dropped
before the first layer; a ``SequenceLayout`` holds that bookkeeping). Part of the remote-code payload, so it
imports only torch, transformers and its siblings. See docs/models.md.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.dynamic_module_utils import custom_object_save
from transformers.activations import ACT2FN
from transformers.modeling_flash_attention_utils import FlashAttentionKwargs
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, can_return_tuple, logging

from .attention import MlmSuiteSelfAttention
from .configuration_mlm_suite import MlmSuiteConfig
from .crf import ConditionalRandomField, allowed_transitions
from .layout import SequenceLayout, first_real_column

IGNORE_INDEX = -100

logger = logging.get_logger(__name__)


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------
def rotary_tables(positions: torch.Tensor, head_size: int, theta: float, dtype: torch.dtype):
    """cos/sin tables ``(total, 1, head_size)`` for RoPE; computed per call so no buffer needs initialising."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_size, 2, device=positions.device, dtype=torch.float32) / head_size)
    angles = positions.float()[:, None] * inv_freq[None, :]  # (total, head_size/2)
    angles = torch.cat((angles, angles), dim=-1)[:, None, :]
    return angles.cos().to(dtype), angles.sin().to(dtype)


class MlmSuiteEmbeddings(nn.Module):
    """Word, position and token-type embeddings of ``config.embedding_width``, then LayerNorm and dropout; embeddings
    narrower than the layers (ELECTRA's ``embedding_size``) are projected to ``hidden_size``."""

    def __init__(self, config: MlmSuiteConfig):
        super().__init__()
        width = config.embedding_width
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        if config.position_embedding_type == "absolute":
            # A converted RoBERTa's table keeps the rows before its first position, which nothing reads.
            self.position_offset = config.position_offset
            self.position_embeddings = nn.Embedding(config.max_position_embeddings + self.position_offset, width)
        if config.type_vocab_size > 0:
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps, bias=config.use_bias)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        if width != config.hidden_size:
            self.project = nn.Linear(width, config.hidden_size, bias=config.use_bias)

    def forward(
        self,
        layout: SequenceLayout,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            # Called on the ids as given, so hooks on get_input_embeddings() (NEFTune, PEFT) see BERT's shape.
            inputs_embeds = self.word_embeddings(input_ids)  # (batch, seq, hidden)
        embeddings = layout.unpad(inputs_embeds)  # (total, hidden): real tokens only from here on
        if hasattr(self, "position_embeddings"):
            positions = layout.positions + self.position_offset if self.position_offset else layout.positions
            embeddings = embeddings + self.position_embeddings(positions)
        if hasattr(self, "token_type_embeddings"):
            if token_type_ids is None:
                embeddings = embeddings + self.token_type_embeddings.weight[0]
            else:
                embeddings = embeddings + self.token_type_embeddings(layout.unpad(token_type_ids))
        embeddings = self.dropout(self.norm(embeddings))  # (total, embedding_width)
        return self.project(embeddings) if hasattr(self, "project") else embeddings


class MlmSuiteFeedForward(nn.Module):
    """Dense → activation → dense, or gated (``geglu``: the first half of ``up``'s output, activated, times the second
    half), with ``config.ffn_inner_dropout`` on the activations before ``down``."""

    def __init__(self, config: MlmSuiteConfig):
        super().__init__()
        gated = config.ffn_type == "geglu"
        self.up = nn.Linear(config.hidden_size, config.intermediate_size * (2 if gated else 1), bias=config.use_bias)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.use_bias)
        self.activation = ACT2FN[config.hidden_act]
        self.gated = gated
        if config.ffn_inner_dropout:
            self.dropout = nn.Dropout(config.ffn_inner_dropout)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, value = self.up(hidden).chunk(2, dim=-1)
            activated = self.activation(gate) * value
        else:
            activated = self.activation(self.up(hidden))
        if hasattr(self, "dropout"):
            activated = self.dropout(activated)
        return self.down(activated)


class MlmSuiteLayer(GradientCheckpointingLayer):
    """Block ``index``: attention and feed-forward, each with residual + LayerNorm (post- or pre-norm; the first
    pre-norm block reads the embeddings' normalised output as it is with ``config.first_attention_norm`` off)."""

    def __init__(self, config: MlmSuiteConfig, index: int = 0):
        super().__init__()
        self.attention = MlmSuiteSelfAttention(config, index)
        if index == 0 and not config.first_attention_norm:
            self.attention_norm = nn.Identity()
        else:
            self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.use_bias)
        self.ffn = MlmSuiteFeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.use_bias)
        ffn_dropout = config.ffn_output_dropout
        self.dropout = nn.Dropout(config.hidden_dropout_prob if ffn_dropout is None else ffn_dropout)
        attention_dropout = config.attention_output_dropout
        self.attention_dropout = nn.Dropout(config.hidden_dropout_prob if attention_dropout is None else attention_dropout)
        self.pre_norm = config.norm_position == "pre"

    def forward(
        self,
        hidden: torch.Tensor,
        layout: SequenceLayout,
        rotary: tuple | None = None,
        output_attentions: bool = False,
        outputs_for: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(total, hidden)`` → ``(total, hidden)``, or only the rows of the flat token indices ``outputs_for``.

        With ``outputs_for`` every token still serves as a key and value, but the attention output
        projection, the residuals, norms and feed-forward network run on the selected tokens only.
        """
        residual = hidden if outputs_for is None else hidden[outputs_for]
        if self.pre_norm:
            attended, weights = self.attention(self.attention_norm(hidden), layout, rotary, output_attentions, outputs_for)
            hidden = residual + self.attention_dropout(attended)
            return hidden + self.dropout(self.ffn(self.ffn_norm(hidden))), weights
        attended, weights = self.attention(hidden, layout, rotary, output_attentions, outputs_for)
        hidden = self.attention_norm(residual + self.attention_dropout(attended))
        return self.ffn_norm(hidden + self.dropout(self.ffn(hidden))), weights


class MlmSuitePooler(nn.Module):
    """Dense + ``config.classifier_activation`` (tanh as BERT's) over ``config.classifier_pooling`` (``cls`` or
    ``mean``) of each row of the batch, or of each sequence of a flattened batch; ``config.pooler_dropout`` drops out
    the pooled vector before the dense layer, as RoBERTa's and ELECTRA's classification heads do, and
    ``config.pooler_norm`` adds a LayerNorm at the end, as ModernBERT's does."""

    def __init__(self, config: MlmSuiteConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.use_bias)
        self.activation = ACT2FN[config.classifier_activation]
        self.mode = config.classifier_pooling
        if config.pooler_dropout:
            self.dropout = nn.Dropout(config.pooler_dropout)
        if config.pooler_norm:
            self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.use_bias)

    def forward(self, hidden: torch.Tensor, layout: SequenceLayout, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """``(total, hidden)`` → ``(batch, hidden)``, or ``(num_sequences, hidden)`` for a flattened batch."""
        pooled = pool_sequences(hidden, layout, attention_mask, self.mode, by_segment=layout.flattened)
        if hasattr(self, "dropout"):
            pooled = self.dropout(pooled)
        pooled = self.activation(self.dense(pooled))
        return self.norm(pooled) if hasattr(self, "norm") else pooled


def pool_sequences(
    hidden: torch.Tensor, layout: SequenceLayout, attention_mask: torch.Tensor | None, mode: str, by_segment: bool = True
) -> torch.Tensor:
    """``(total, hidden)`` final token states → one vector per sequence by ``mode`` (``mean``, ``cls``, ``max``).

    The sequences are the layout's segments (rows, packed documents, the sequences of a flattened
    batch), or with ``by_segment=False`` the rows of the batch. Pads never enter: segments hold real
    tokens only, and rows (also the traced dense layout's, which has no segment offsets) are reduced
    over the padded grid with the mask.
    """
    if by_segment and layout.cu_seqlens is not None:
        reduce = {"mean": layout.segment_mean, "cls": layout.segment_first, "max": layout.segment_max}[mode]
        return reduce(hidden)
    padded = layout.pad(hidden)  # (batch, seq, hidden)
    real = torch.ones_like(padded[..., 0], dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    if mode == "cls":  # the row's first real token: column 0 only when the row is padded on the right
        return padded[torch.arange(padded.shape[0], device=padded.device), first_real_column(real)[:, 0]]
    if mode == "max":
        return padded.masked_fill(~real[..., None], torch.finfo(padded.dtype).min).amax(dim=1)
    weights = real.to(padded.dtype)[..., None]
    return (padded * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


class MlmSuiteTransform(nn.Module):
    """Dense (``hidden_size`` → ``width``) + ``activation`` + LayerNorm on each token's state: the MLM head's transform,
    and with ``config.token_head_transform`` what the token-classification and QA heads put before their classifier."""

    def __init__(self, config: MlmSuiteConfig, width: int, activation: str):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, width, bias=config.use_bias)
        self.activation = ACT2FN[activation]
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps, bias=config.use_bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(self.activation(self.dense(hidden)))


class MlmSuiteLMHead(MlmSuiteTransform):
    """Transform (``hidden_act``, to the embeddings' width) and a decoder tied to the word embeddings."""

    def __init__(self, config: MlmSuiteConfig):
        super().__init__(config, config.embedding_width, config.hidden_act)
        self.decoder = nn.Linear(config.embedding_width, config.vocab_size, bias=True)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(super().forward(hidden))


# --------------------------------------------------------------------------------------------
# Base classes
# --------------------------------------------------------------------------------------------
def every_module_in_mode(model: nn.Module, training: bool) -> bool:
    """Whether ``model`` and all its submodules are in training mode (``training=True``) or all in eval mode."""
    stack = [model]
    while stack:
        module = stack.pop()
        if module.training != training:
            return False
        stack.extend(child for child in module._modules.values() if child is not None)
    return True


class MlmSuitePreTrainedModel(PreTrainedModel):
    config_class = MlmSuiteConfig
    config: MlmSuiteConfig
    base_model_prefix = "encoder"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _no_split_modules = ["MlmSuiteLayer"]

    def train(self, mode: bool = True) -> MlmSuitePreTrainedModel:
        """``nn.Module.train``, returning at once when every module already is in ``mode``: the Trainer calls
        ``model.train()`` before every step, and setting the flag on each of BERT-base's 146 modules takes ~0.7 ms of
        the host's time per step, checking it ~0.04 ms."""
        if isinstance(mode, bool) and every_module_in_mode(self, mode):
            return self
        return super().train(mode)

    #: The Auto class a folder of this class loads with (its entry of ``auto_map`` names this class); None: a class
    #: no Auto class is made for. Each class declares its own.
    auto_class_name: ClassVar[str | None] = None

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, ConditionalRandomField):
            # Also refills the non-persistent constraint buffers, which from_pretrained leaves empty.
            module.reset_parameters()

    def check_before_save(self) -> None:
        """A class's own check of what it is about to save (a warning for what would load wrong); nothing here."""

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save weights, config and the model code so the folder loads with ``trust_remote_code=True``.

        ``auto_map`` lists every Auto class (:data:`AUTO_CLASSES`), so the folder loads with any of them; the entry of
        the class's own Auto class (:attr:`auto_class_name`) names the class being saved (so a pair head reloads as a
        pair head). A class without one has its code copied, no entry rewritten.
        """
        module = type(self).__module__.rsplit(".", 1)[-1]
        config_module = type(self.config).__module__.rsplit(".", 1)[-1]
        auto_map = {"AutoConfig": f"{config_module}.{type(self.config).__name__}"}
        auto_map.update({auto: f"{module}.{name}" for auto, name in AUTO_CLASSES.items()})
        if self.auto_class_name is not None:
            auto_map[self.auto_class_name] = f"{module}.{type(self).__name__}"
        self.config.auto_map = auto_map
        self.check_before_save()
        if getattr(type(self.config), "_auto_class", None) is None:
            type(self.config).register_for_auto_class()
        if self.auto_class_name is None:
            # Registering the class would rewrite an entry of auto_map: its code is copied instead.
            self._auto_class = None
            result = super().save_pretrained(save_directory, *args, **kwargs)
            custom_object_save(self, save_directory)
            return result
        if self._auto_class is None:
            type(self).register_for_auto_class(self.auto_class_name)
        return super().save_pretrained(save_directory, *args, **kwargs)


def has_placeholder_labels(config: MlmSuiteConfig) -> bool:
    """True while ``id2label`` holds transformers' default names ``LABEL_0, LABEL_1, ...``."""
    return all(re.fullmatch(r"LABEL_\d+", str(name)) for name in config.id2label.values())


def _check_inputs(
    config: MlmSuiteConfig, shape: tuple[int, int], token_type_ids, position_ids, max_length: int | None = None
) -> None:
    """Raise a ValueError naming the value and the limit for inputs the embeddings cannot represent.

    ``max_length`` is the longest sequence of a flattened batch (whose row holds many sequences).
    The checks of id values read tensors, so they are skipped where a host synchronisation is not
    wanted: under ``torch.compile`` and for flattened batches, whose collator built the ids.
    """
    longest = shape[1] if max_length is None else max_length
    if config.position_embedding_type == "absolute" and longest > config.max_position_embeddings:
        raise ValueError(
            f"sequence length {longest} exceeds max_position_embeddings={config.max_position_embeddings}; "
            "truncate or split the input"
        )
    if torch.compiler.is_compiling() or max_length is not None:
        return
    if position_ids is not None and config.position_embedding_type == "absolute" and position_ids.numel():
        largest = int(position_ids.max())
        if largest >= config.max_position_embeddings:
            raise ValueError(f"position id {largest} exceeds max_position_embeddings={config.max_position_embeddings}")
    # Without segment embeddings (DistilBERT, ModernBERT) token types are ignored, as those classes ignore them.
    if token_type_ids is not None and token_type_ids.numel() and config.type_vocab_size > 0:
        for extreme in (int(token_type_ids.max()), int(token_type_ids.min())):
            if not 0 <= extreme < config.type_vocab_size:
                raise ValueError(f"token type id {extreme} is out of range for type_vocab_size={config.type_vocab_size}")


def _output_flags(config: MlmSuiteConfig, output_attentions: bool | None, output_hidden_states: bool | None) -> tuple[bool, bool]:
    """The call's ``output_attentions`` / ``output_hidden_states``, else the config's."""
    return (
        bool(output_attentions if output_attentions is not None else config.output_attentions),
        bool(output_hidden_states if output_hidden_states is not None else config.output_hidden_states),
    )


def _check_labels(labels: torch.Tensor | None, expected_shape: torch.Size, what: str) -> None:
    if labels is not None and labels.shape != expected_shape:
        raise ValueError(f"{what} have shape {tuple(labels.shape)} but the input needs {tuple(expected_shape)}")


def normalised_sum(total: torch.Tensor, num_items_in_batch: int | torch.Tensor | None, local_items: torch.Tensor) -> torch.Tensor:
    """``total`` (a loss summed over items) divided by the items it averages over.

    The Trainer passes ``num_items_in_batch``, its count of labelled items (labels ≠ -100) over
    every gradient-accumulation micro-batch (and every process): dividing each micro-batch's sum
    by it makes the micro-batches add up to the mean of one large batch. Without it the count is
    this batch's own ``local_items`` and the loss is a plain mean. A step without items (no token selected
    for prediction) has a zero sum: its loss and gradient are 0, not 0 / 0.
    """
    if num_items_in_batch is None:
        return total / local_items.clamp(min=1)
    if isinstance(num_items_in_batch, torch.Tensor):
        return total / num_items_in_batch.to(total.device).clamp(min=1)
    return total / max(num_items_in_batch, 1)


def token_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Cross-entropy over ``(n, classes)`` logits, ignoring -100: the mean over labelled items.

    With class weights it is the mean of ``weight[label] * loss`` over the labelled items, not
    torch's ``sum / sum of weights``: that denominator depends on which classes a micro-batch
    holds, so only a count makes gradient accumulation and several processes add up to one batch.
    """
    losses = F.cross_entropy(
        logits.float(), labels, weight=weight, ignore_index=IGNORE_INDEX, reduction="sum", label_smoothing=label_smoothing
    )
    return normalised_sum(losses, num_items_in_batch, (labels != IGNORE_INDEX).sum())


def answer_boundary_loss(logits: torch.Tensor, positions: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor:
    """Cross-entropy of answer starts (or ends) ``positions`` ``(batch,)`` over ``logits`` ``(batch, seq)``.

    As in ``BertForQuestionAnswering``, a position outside the window (an answer truncated away) is ignored; so is
    one on a pad (``real`` False there), which BERT would score against a pad's logit: here that logit is the
    most negative float, whose loss of ~1e38 would swamp every logged loss (run_qa.py labels a pad when an answer
    starts at the last token of a padded context). Without a position to learn from, the loss is 0, not 0 / 0.
    """
    seq_len = logits.shape[1]
    positions = positions.view(-1).clamp(0, seq_len)
    if real is not None:
        on_a_pad = ~real.gather(1, positions.clamp(max=seq_len - 1)[:, None]).squeeze(1)
        positions = positions.masked_fill(on_a_pad, seq_len)
    losses = F.cross_entropy(logits, positions, ignore_index=seq_len, reduction="sum")
    return normalised_sum(losses, None, (positions != seq_len).sum())


# --------------------------------------------------------------------------------------------
# The encoder
# --------------------------------------------------------------------------------------------
class MlmSuiteModel(MlmSuitePreTrainedModel):
    """The bare encoder; returns ``last_hidden_state`` ``(batch, seq, hidden)`` and, with a pooler, ``pooler_output``.

    Pad positions of ``last_hidden_state`` and of ``hidden_states`` are zeros: pads never enter the layers.
    """

    auto_class_name = "AutoModel"

    # A sentence-embedding checkpoint's learned temperature is training state, not part of the encoder.
    _keys_to_ignore_on_load_unexpected = [r"^logit_scale$"]

    def __init__(self, config: MlmSuiteConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        config.check_sizes()
        self.embeddings = MlmSuiteEmbeddings(config)
        self.layers = nn.ModuleList(MlmSuiteLayer(config, index) for index in range(config.num_hidden_layers))
        if config.norm_position == "pre":
            self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.use_bias)
        self.pooler = MlmSuitePooler(config) if add_pooling_layer else None
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def layout(
        self,
        shape: tuple[int, int],
        device: torch.device,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        cu_seq_lens: torch.Tensor | None = None,
        max_length: int | None = None,
    ) -> SequenceLayout:
        """The :class:`SequenceLayout` of an input; the one place that decides how tokens are laid out.

        A flattened batch (``cu_seq_lens`` and ``max_length``) gives the layout with no reading of
        tensor values; under ``torch.compile`` / ``torch.export`` without them the traced dense
        layout; otherwise the padding-free layout read off the masks.
        """
        if cu_seq_lens is not None:
            if max_length is None:
                raise ValueError("cu_seq_lens_q needs max_length_q, the longest sequence as a Python int")
            if attention_mask is not None or document_ids is not None:
                raise ValueError(
                    "a flattened batch (cu_seq_lens_q) has no padding and one sequence per segment: "
                    "pass neither attention_mask nor document_ids with it"
                )
            return SequenceLayout.from_offsets(shape, cu_seq_lens, max_length, position_ids)
        count_real_tokens = self.config.positions_count == "real_tokens"
        if torch.compiler.is_compiling():
            return SequenceLayout.traced_dense(shape, device, attention_mask, position_ids, document_ids, count_real_tokens)
        return SequenceLayout.from_inputs(shape, device, attention_mask, position_ids, document_ids, count_real_tokens)

    def encode(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        output_index: torch.Tensor | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
    ) -> tuple[torch.Tensor, SequenceLayout, tuple | None, tuple | None]:
        """Run the stack on real tokens only; return ``(total, hidden)`` states and their layout.

        ``output_index`` (flat indices into ``batch * seq`` of real tokens) asks for the final states
        of those tokens alone, as ``(num_selected, hidden)`` in that order: the last layer then
        finishes only them (sparse MLM prediction needs nothing else), while its attention still
        reads every token. ``cu_seq_lens_q`` / ``max_length_q`` describe a flattened batch (see
        :meth:`forward` and :meth:`layout`).
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        if output_index is not None and (output_attentions or output_hidden_states):
            raise ValueError("output_index cannot be combined with output_attentions or output_hidden_states")
        reference = input_ids if input_ids is not None else inputs_embeds
        shape = tuple(reference.shape[:2])
        _check_inputs(self.config, shape, token_type_ids, position_ids, None if cu_seq_lens_q is None else max_length_q)
        layout = self.layout(
            shape, reference.device, attention_mask, position_ids, document_ids, cu_seq_lens_q, max_length_q
        )
        hidden = self.embeddings(layout, input_ids, token_type_ids, inputs_embeds)  # (total, hidden)
        rotary = {}  # RoPE base → its tables (full-attention and sliding-window layers may differ)
        if self.config.position_embedding_type == "rotary":
            head_size = self.config.hidden_size // self.config.num_attention_heads
            for theta in {layer.attention.rope_theta for layer in self.layers}:
                rotary[theta] = rotary_tables(layout.positions, head_size, theta, hidden.dtype)
        all_hidden = [] if output_hidden_states else None
        all_attentions = [] if output_attentions else None

        def record(hidden: torch.Tensor) -> torch.Tensor:
            # The padded copy handed to the user is the tensor the next layer reads (through a
            # gather), so gradients reach it, as they reach BertModel's hidden_states.
            padded = layout.pad(hidden)  # (batch, seq, hidden)
            all_hidden.append(padded)
            return layout.unpad(padded)

        selected = None if output_index is None else layout.token_of_cell(output_index)  # flat token indices
        if selected is not None and not self.layers:
            hidden = hidden[selected]
        last = len(self.layers) - 1
        if output_hidden_states and self.layers:
            hidden = record(hidden)
        for index, layer in enumerate(self.layers):
            tables = rotary.get(layer.attention.rope_theta)
            hidden, weights = layer(hidden, layout, tables, output_attentions, selected if index == last else None)
            if output_hidden_states and index < last:
                hidden = record(hidden)
            if output_attentions:
                all_attentions.append(weights)  # (batch, heads, seq, seq)
        if self.config.norm_position == "pre":
            hidden = self.final_norm(hidden)
        if output_hidden_states:
            hidden = record(hidden)  # the last entry is the final output, after the final norm
        hidden_states = tuple(all_hidden) if output_hidden_states else None
        attentions = tuple(all_attentions) if output_attentions else None
        return hidden, layout, hidden_states, attentions

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        """Encode a padded ``(batch, seq)`` batch, or a flattened one.

        A flattened batch is ``(1, total)`` tokens of several sequences with ``cu_seq_lens_q``
        (``(num_sequences + 1,)`` offsets) and ``max_length_q`` (the longest sequence, a Python
        int), as made by ``mlm_suite.data.flattening`` or transformers'
        ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` (its ``cu_seq_lens_k`` /
        ``max_length_k`` are the same for self-attention and are ignored). ``pooler_output`` then
        has one row per sequence.
        """
        output_attentions, output_hidden_states = _output_flags(self.config, output_attentions, output_hidden_states)
        hidden, layout, hidden_states, attentions = self.encode(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
            document_ids=document_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q,
        )
        sequence_output = hidden_states[-1] if hidden_states else layout.pad(hidden)  # (batch, seq, hidden)
        pooled = self.pooler(hidden, layout, attention_mask) if self.pooler is not None else None
        return BaseModelOutputWithPooling(
            last_hidden_state=sequence_output, pooler_output=pooled, hidden_states=hidden_states, attentions=attentions
        )


# --------------------------------------------------------------------------------------------
# Heads
# --------------------------------------------------------------------------------------------
@dataclass
class MlmSuiteForPreTrainingOutput(ModelOutput):
    """Output of ``MlmSuiteForPreTraining``: ``loss`` = MLM loss + NSP loss."""

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class _MaskedLMMixin:
    """The MLM head's computation, sparse (labelled tokens only) while training with ``config.sparse_prediction``."""

    _tied_weights_keys = {"lm_head.decoder.weight": "encoder.embeddings.word_embeddings.weight"}

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head.decoder = new_embeddings

    def labelled_positions(
        self, labels: torch.Tensor | None, masked_lm_positions: torch.Tensor | None, shape: torch.Size
    ) -> torch.Tensor | None:
        """Flat indices into ``batch * seq`` of the tokens sparse prediction scores, or None to score every token.

        Sparse prediction needs ``config.sparse_prediction``, training mode and labels. The tokens
        are the collator's ``masked_lm_positions`` when given (no reading of tensor values), else the
        labelled ones (a data-dependent size, so under ``torch.compile`` every token is scored instead).
        """
        _check_labels(labels, shape, "MLM labels")
        if labels is None or not (self.config.sparse_prediction and self.training):
            return None
        if masked_lm_positions is not None:
            return masked_lm_positions
        if torch.compiler.is_compiling():
            return None
        return (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)

    def masked_lm(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor | None,
        positions: torch.Tensor | None,
        num_items_in_batch: int | torch.Tensor | None,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(loss, logits)`` from the encoder's ``(batch, seq, hidden)`` output, or from the ``(num_labelled, hidden)``
        states at ``positions`` alone when the encoder finished only those.

        With ``positions`` (see :meth:`labelled_positions`) only those tokens are scored: ``logits`` is
        ``(num_labelled, vocab)`` in their order; otherwise ``(batch, seq, vocab)``. The loss is the same.
        """
        if positions is not None and hidden.dim() == 3:
            hidden = hidden.reshape(-1, hidden.shape[-1])[positions]  # (num_labelled, hidden)
        logits = self.lm_head(hidden)
        if labels is None:
            return None, logits
        targets = labels.reshape(-1) if positions is None else labels.reshape(-1)[positions]
        return token_cross_entropy(logits.view(-1, logits.shape[-1]), targets, num_items_in_batch), logits


class MlmSuiteForMaskedLM(_MaskedLMMixin, MlmSuitePreTrainedModel):
    """The encoder and the MLM head (transform + decoder tied to the word embeddings)."""

    auto_class_name = "AutoModelForMaskedLM"

    def __init__(self, config: MlmSuiteConfig):
        super().__init__(config)
        self.encoder = MlmSuiteModel(config, add_pooling_layer=False)
        self.lm_head = MlmSuiteLMHead(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        masked_lm_positions: torch.Tensor | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
        **kwargs: Unpack[FlashAttentionKwargs],
    ) -> MaskedLMOutput | tuple:
        """MLM logits and loss.

        ``masked_lm_positions`` (optional, from ``mlm_suite.data.flattening``): flat indices into
        ``batch * seq`` of the labelled tokens, so that sparse prediction needs no data-dependent
        size (as original BERT's ``masked_lm_positions``, flattened). Its name avoids "label": the
        ``Trainer`` takes every forward argument named like that for a label.
        """
        reference = input_ids if input_ids is not None else inputs_embeds
        shape = None if reference is None else reference.shape[:2]
        positions = None if shape is None else self.labelled_positions(labels, masked_lm_positions, shape)
        # Sparse prediction all the way down (the last layer finishes the labelled tokens only), unless
        # per-layer outputs are asked for or a label sits on padding, where no token is computed.
        finish_only_labelled = positions is not None and not any(
            (output_attentions, output_hidden_states, self.config.output_attentions, self.config.output_hidden_states)
        )
        if finish_only_labelled and masked_lm_positions is None and attention_mask is not None:
            finish_only_labelled = bool(attention_mask.reshape(-1)[positions].all())
        if finish_only_labelled:
            hidden = self.encoder.encode(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
                document_ids=document_ids, inputs_embeds=inputs_embeds, output_index=positions,
                cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q,
            )[0]  # (num_labelled, hidden)
            loss, logits = self.masked_lm(hidden, labels, positions, num_items_in_batch)
            return MaskedLMOutput(loss=loss, logits=logits)
        outputs = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
            document_ids=document_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q, **kwargs,
        )
        loss, logits = self.masked_lm(outputs.last_hidden_state, labels, positions, num_items_in_batch)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions)


class MlmSuiteForNextSentencePrediction(MlmSuitePreTrainedModel):
    """``[CLS] A [SEP] B [SEP]`` → 2 classes: 0 = B follows A, 1 = B is random (HF's convention)."""

    auto_class_name = "AutoModelForNextSentencePrediction"

    def __init__(self, config: MlmSuiteConfig):
        super().__init__(config)
        self.encoder = MlmSuiteModel(config, add_pooling_layer=True)
        self.nsp_head = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
        **kwargs: Unpack[FlashAttentionKwargs],
    ) -> NextSentencePredictorOutput | tuple:
        outputs = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
            document_ids=document_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q, **kwargs,
        )
        logits = self.nsp_head(outputs.pooler_output)  # (batch, 2)
        loss = None
        if labels is not None:
            _check_labels(labels, logits.shape[:1], "next-sentence labels")
            loss = token_cross_entropy(logits, labels, num_items_in_batch)
        output = NextSentencePredictorOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output


class MlmSuiteForPreTraining(_MaskedLMMixin, MlmSuitePreTrainedModel):
    """MLM + next-sentence prediction, as BERT was pretrained; the loss is their sum."""

    auto_class_name = "AutoModelForPreTraining"

    def __init__(self, config: MlmSuiteConfig):
        super().__init__(config)
        self.encoder = MlmSuiteModel(config, add_pooling_layer=True)
        self.lm_head = MlmSuiteLMHead(config)
        self.nsp_head = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        masked_lm_positions: torch.Tensor | None = None,
        num_sentence_pairs_in_batch: int | torch.Tensor | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
        **kwargs: Unpack[FlashAttentionKwargs],
    ) -> MlmSuiteForPreTrainingOutput | tuple:
        outputs = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
            document_ids=document_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q, **kwargs,
        )
        positions = self.labelled_positions(labels, masked_lm_positions, outputs.last_hidden_state.shape[:2])
        mlm_loss, prediction_logits = self.masked_lm(outputs.last_hidden_state, labels, positions, num_items_in_batch)
        nsp_logits = self.nsp_head(outputs.pooler_output)  # (batch or num_sequences, 2)
        losses = [mlm_loss] if mlm_loss is not None else []
        if next_sentence_label is not None:
            _check_labels(next_sentence_label, nsp_logits.shape[:1], "next-sentence labels")
            nsp_labels = next_sentence_label.view(-1)
            if num_sentence_pairs_in_batch is not None or num_items_in_batch is None or labels is None:
                nsp_loss = token_cross_entropy(nsp_logits, nsp_labels, num_sentence_pairs_in_batch)
            else:
                # A Trainer that counts only the masked tokens (the stock one): weighting each
                # micro-batch's NSP mean by its share of them is exact when that share is the
                # micro-batch's share of the pairs. JobTrainer passes num_sentence_pairs_in_batch.
                masked = (labels != IGNORE_INDEX).sum()
                nsp_loss = normalised_sum(token_cross_entropy(nsp_logits, nsp_labels) * masked, num_items_in_batch, masked)
            losses.append(nsp_loss)
        output = MlmSuiteForPreTrainingOutput(
            loss=sum(losses) if losses else None,
            prediction_logits=prediction_logits,
            seq_relationship_logits=nsp_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return output


class MlmSuiteForSequenceClassification(MlmSuitePreTrainedModel):
    """Pooled (``[CLS]`` or mean) representation → ``num_labels`` scores.

    ``config.problem_type`` works as in HF: ``regression`` (MSE, ``num_labels == 1``),
    ``single_label_classification`` (cross-entropy) or ``multi_label_classification`` (BCE),
    inferred from the labels' dtype when unset.
    """

    auto_class_name = "AutoModelForSequenceClassification"

    def __init__(self, config: MlmSuiteConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.encoder = MlmSuiteModel(config, add_pooling_layer=True)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _classification_loss(
        self, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None
    ) -> torch.Tensor:
        """The mean loss over the batch's targets, or its sum over ``num_items_in_batch`` (see :func:`normalised_sum`).

        The Trainer counts every element of ``labels`` that is not -100: one per row for a class,
        ``num_labels`` per row for regression targets and multi-label indicators, so each loss is
        summed over the same elements.
        """
        config = self.config
        if config.problem_type is None:
            if self.num_labels == 1:
                config.problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                config.problem_type = "single_label_classification"
            else:
                config.problem_type = "multi_label_classification"
        if config.problem_type == "single_label_classification":
            _check_labels(labels.view(-1), logits.shape[:1], "sequence labels")
            weights = _class_weight_tensor(config, logits)
            return token_cross_entropy(logits, labels.view(-1), num_items_in_batch, weights, config.label_smoothing)
        if config.problem_type == "regression":
            _check_labels(labels.reshape(-1), logits.reshape(-1).shape, "regression targets")
            total = F.mse_loss(logits.float().view(-1), labels.float().view(-1), reduction="sum")
        else:
            _check_labels(labels, logits.shape, "multi-label targets")
            total = F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="sum")
        return normalised_sum(total, num_items_in_batch, torch.tensor(labels.numel(), device=logits.device))

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
        **kwargs: Unpack[FlashAttentionKwargs],
    ) -> SequenceClassifierOutput | tuple:
        outputs = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
            document_ids=document_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q, **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.pooler_output))  # (batch, num_labels)
        loss = None
        if labels is not None:
            loss = self._classification_loss(logits, labels, num_items_in_batch)
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output


class MlmSuiteForPairClassification(MlmSuiteForSequenceClassification):
    """Sentence-pair classification or regression (NLI, paraphrase, STS) on ``[CLS] A [SEP] B [SEP]``.

    Segment ids (``token_type_ids`` 0 for A, 1 for B) tell the two sentences apart. Without them
    every token is taken as segment 0, as ``BertForSequenceClassification`` does, with a warning:
    that suits a single-segment input and is wrong for a pair.
    """

    def __init__(self, config: MlmSuiteConfig):
        if config.type_vocab_size < 2:
            raise ValueError(
                f"pair classification needs type_vocab_size >= 2 (segment ids 0 and 1), got {config.type_vocab_size}"
            )
        super().__init__(config)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
        **kwargs: Unpack[FlashAttentionKwargs],
    ) -> SequenceClassifierOutput | tuple:
        if token_type_ids is None:
            logger.warning_once(
                "pair classification got no token_type_ids: every token is taken as segment 0. For sentence "
                "pairs pass the segment ids (0 for [CLS] A [SEP], 1 for B [SEP]): tokenizer(text_a, text_b)"
            )
        return super().forward(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
            document_ids=document_ids, inputs_embeds=inputs_embeds, labels=labels, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, num_items_in_batch=num_items_in_batch, return_dict=True,
            cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q, **kwargs,
        )


def _class_weight_tensor(config: MlmSuiteConfig, logits: torch.Tensor) -> torch.Tensor | None:
    if config.class_weights is None:
        return None
    if len(config.class_weights) != logits.shape[-1]:
        raise ValueError(f"class_weights has {len(config.class_weights)} entries for {logits.shape[-1]} labels")
    return torch.tensor(config.class_weights, dtype=torch.float32, device=logits.device)


class MlmSuiteForTokenClassification(MlmSuitePreTrainedModel):
    """A label per token (NER, POS), optionally decoded by a constrained CRF (``config.use_crf``); with
    ``config.token_head_transform`` each token's state goes through dense, activation and LayerNorm first.

    With a CRF the loss is its negative log-likelihood over the labelled positions (labels ≠ -100,
    normally the first piece of each word) and ``logits`` stay the per-token emission scores;
    ``decode`` returns the Viterbi tag sequence of each row.
    """

    auto_class_name = "AutoModelForTokenClassification"

    def __init__(self, config: MlmSuiteConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.encoder = MlmSuiteModel(config, add_pooling_layer=False)
        if config.token_head_transform:
            self.transform = MlmSuiteTransform(config, config.hidden_size, config.classifier_activation)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        if config.use_crf:
            constraints = None
            if config.tagging_scheme is not None:
                constraints = allowed_transitions(config.id2label, config.tagging_scheme)
            self.crf = ConditionalRandomField(config.num_labels, constraints)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
        **kwargs: Unpack[FlashAttentionKwargs],
    ) -> TokenClassifierOutput | tuple:
        outputs = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
            document_ids=document_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q, **kwargs,
        )
        hidden = outputs.last_hidden_state
        if hasattr(self, "transform"):
            hidden = self.transform(hidden)
        logits = self.classifier(self.dropout(hidden))  # (batch, seq, num_labels)
        loss = None
        if labels is not None:
            _check_labels(labels, logits.shape[:2], "token labels")
            if self.config.use_crf:
                if cu_seq_lens_q is not None:
                    raise ValueError("the CRF scores each sequence as a whole: train it on padded batches, not flattened ones")
                # Per labelled token, like the softmax head: the Trainer counts tokens, and a count of
                # sequences would not add up across gradient-accumulation micro-batches.
                labelled = labels != IGNORE_INDEX
                nll = self.crf.neg_log_likelihood(logits, labels, labelled, reduction="sum")
                loss = normalised_sum(nll, num_items_in_batch, labelled.sum())
            else:
                loss = token_cross_entropy(
                    logits.view(-1, self.num_labels),
                    labels.view(-1),
                    num_items_in_batch,
                    _class_weight_tensor(self.config, logits),
                    self.config.label_smoothing,
                )
        output = TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output

    def check_before_save(self) -> None:
        """Placeholder label names (``LABEL_0``...) would reload as such: warn to set the real tags."""
        if has_placeholder_labels(self.config):
            warnings.warn(
                f"saving {type(self).__name__} with placeholder label names {sorted(self.config.id2label.values())}: "
                "set config.id2label / config.label2id to the real tags (e.g. 'B-PER') before saving",
                UserWarning,
                stacklevel=3,
            )

    @torch.no_grad()
    def decode(self, logits: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """Best label sequence per row over the positions in ``mask`` ``(batch, seq)``: Viterbi with a CRF, else argmax."""
        if self.config.use_crf:
            return self.crf.viterbi_decode(logits, mask.bool())
        best = logits.argmax(-1)
        return [row[keep].tolist() for row, keep in zip(best, mask.bool())]


class MlmSuiteForQuestionAnswering(MlmSuitePreTrainedModel):
    """Extractive QA: start and end logits per token (``config.qa_dropout`` drops out the token states first, as
    DistilBERT does; ``config.token_head_transform`` puts dense, activation and LayerNorm before that, as ModernBERT
    does)."""

    auto_class_name = "AutoModelForQuestionAnswering"

    def __init__(self, config: MlmSuiteConfig):
        super().__init__(config)
        self.encoder = MlmSuiteModel(config, add_pooling_layer=False)
        if config.token_head_transform:
            self.transform = MlmSuiteTransform(config, config.hidden_size, config.classifier_activation)
        if config.qa_dropout:
            self.dropout = nn.Dropout(config.qa_dropout)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
        **kwargs: Unpack[FlashAttentionKwargs],
    ) -> QuestionAnsweringModelOutput | tuple:
        outputs = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
            document_ids=document_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q, **kwargs,
        )
        hidden = outputs.last_hidden_state
        if hasattr(self, "transform"):
            hidden = self.transform(hidden)
        if hasattr(self, "dropout"):
            hidden = self.dropout(hidden)
        logits = self.qa_outputs(hidden).float()  # (batch, seq, 2)
        if attention_mask is not None:
            # No answer starts or ends at a pad: the most negative finite score keeps pads out of the softmax.
            logits = logits.masked_fill(~attention_mask.bool()[..., None], torch.finfo(logits.dtype).min)
        start_logits, end_logits = logits.unbind(-1)  # (batch, seq) each
        loss = None
        if start_positions is not None and end_positions is not None:
            real = attention_mask.bool() if attention_mask is not None else None
            loss = (
                answer_boundary_loss(start_logits, start_positions, real)
                + answer_boundary_loss(end_logits, end_positions, real)
            ) / 2
        output = QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return output


# --------------------------------------------------------------------------------------------
# Sentence embeddings and contrastive training (bi-encoder retrieval)
# --------------------------------------------------------------------------------------------
@dataclass
class SentenceEmbeddingOutput(ModelOutput):
    """Output of ``MlmSuiteForSentenceEmbedding``.

    ``embeddings`` ``(num_sequences, hidden)``: one per row of a padded batch, or per sequence of a
    flattened batch. With ``labels``: ``loss`` and ``scores`` ``(num_queries, num_documents)``, the
    scaled cosine similarities the loss was computed from.
    """

    loss: torch.Tensor | None = None
    embeddings: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def in_batch_negatives_loss(
    queries: torch.Tensor,
    documents: torch.Tensor,
    labels: torch.Tensor,
    scale: torch.Tensor | float,
    symmetric: bool = False,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """InfoNCE (multiple-negatives ranking) loss: each query against every document of the batch.

    Args:
        queries: ``(num_queries, hidden)``.
        documents: ``(num_documents, hidden)``: the positives and any hard negatives; every
            document that is not a query's positive is a negative for it.
        labels: ``(num_queries,)`` index of each query's positive among ``documents``.
        scale: inverse temperature; scores are ``scale * cosine similarity``.
        symmetric: also the document → query direction (each positive against every query) and
            average the two, as sentence-transformers' ``MultipleNegativesSymmetricRankingLoss``.
        num_items_in_batch: the Trainer's count of queries over the accumulated batch: the summed
            loss is divided by it (gradient accumulation then averages over every query);
            default: the mean over these queries.

    Returns:
        ``(loss, scores)`` with ``scores`` ``(num_queries, num_documents)`` in float32.
    """
    if documents.shape[0] < 2:  # one document is every query's positive: the loss is 0 and nothing trains
        raise ValueError(f"in-batch negatives need at least 2 documents in the batch, got {documents.shape[0]}")
    scores = F.normalize(queries.float(), dim=-1) @ F.normalize(documents.float(), dim=-1).T * scale
    loss = F.cross_entropy(scores, labels, reduction="sum")
    if symmetric:
        positives_vs_queries = scores[:, labels].T  # (num_queries, num_queries): row i is query i's positive
        targets = torch.arange(labels.shape[0], device=labels.device)
        loss = (loss + F.cross_entropy(positives_vs_queries, targets, reduction="sum")) / 2
    return normalised_sum(loss, num_items_in_batch, labels.new_tensor(labels.shape[0])), scores


class MlmSuiteForSentenceEmbedding(MlmSuitePreTrainedModel):
    """Sentence embeddings (``config.sentence_pooling`` over the real tokens, L2-normalised with
    ``config.normalize_embeddings``) and a bi-encoder's contrastive loss.

    Without ``labels`` it embeds every sequence of the batch. With ``labels`` ``(num_queries,)``
    the batch's first ``num_queries`` sequences are queries and the rest documents; ``labels[i]``
    is the index of query ``i``'s positive among the documents, and the loss is
    :func:`in_batch_negatives_loss` at temperature ``config.contrastive_temperature`` (a learned
    ``logit_scale`` with ``config.learn_temperature``).

    Saved folders load with ``AutoModel`` as the bare encoder (``MlmSuiteModel``), whose token
    states sentence-transformers pools.
    """

    # No Auto class is made for sentence embeddings: "AutoModel" stays the bare encoder, which sentence-transformers
    # loads and pools the token states of.
    auto_class_name = None

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if module is self and self.logit_scale is not None:
            self.logit_scale.fill_(math.log(1 / self.config.contrastive_temperature))

    def __init__(self, config: MlmSuiteConfig):
        super().__init__(config)
        # The pooler is kept, unused and frozen, so that the folder is a whole encoder for AutoModel (and
        # keeps a converted BERT's pooler); the embeddings pool the final token states. Frozen, DDP needs
        # no search for unused parameters (which gradient checkpointing turns off).
        self.encoder = MlmSuiteModel(config, add_pooling_layer=True)
        self.encoder.pooler.requires_grad_(False)
        # log(1 / temperature), as CLIP learns it; set by _init_weights
        self.logit_scale = nn.Parameter(torch.empty(())) if config.learn_temperature else None
        self.post_init()

    def unused_parameters(self) -> list[nn.Parameter]:
        """The pooler's: part of the saved encoder, never used by the embeddings (kept frozen)."""
        return list(self.encoder.pooler.parameters())

    def similarity_scale(self) -> torch.Tensor | float:
        """The inverse temperature: learned (capped at 100, as CLIP) or ``1 / config.contrastive_temperature``."""
        if self.logit_scale is None:
            return 1 / self.config.contrastive_temperature
        return self.logit_scale.exp().clamp(max=100)

    def contrastive_loss(
        self, embeddings: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss of a batch's ``(num_sequences, hidden)`` embeddings: queries first, then documents."""
        num_queries = labels.shape[0]
        return in_batch_negatives_loss(
            embeddings[:num_queries], embeddings[num_queries:], labels, self.similarity_scale(),
            self.config.contrastive_symmetric, num_items_in_batch,
        )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        cu_seq_lens_q: torch.Tensor | None = None,
        max_length_q: int | None = None,
        **kwargs: Unpack[FlashAttentionKwargs],
    ) -> SentenceEmbeddingOutput | tuple:
        output_attentions, output_hidden_states = _output_flags(self.config, output_attentions, output_hidden_states)
        hidden, layout, hidden_states, attentions = self.encoder.encode(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
            document_ids=document_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            cu_seq_lens_q=cu_seq_lens_q, max_length_q=max_length_q,
        )
        embeddings = pool_sequences(hidden, layout, attention_mask, self.config.sentence_pooling)  # (num_sequences, hidden)
        if self.config.normalize_embeddings:
            embeddings = F.normalize(embeddings, dim=-1)
        loss = scores = None
        if labels is not None:
            if labels.dim() != 1 or not 0 < labels.shape[0] < embeddings.shape[0]:
                raise ValueError(
                    f"labels must hold one positive-document index per query, {embeddings.shape[0]} sequences in all, "
                    f"got shape {tuple(labels.shape)}"
                )
            loss, scores = self.contrastive_loss(embeddings, labels, num_items_in_batch)
        return SentenceEmbeddingOutput(
            loss=loss, embeddings=embeddings, scores=scores, hidden_states=hidden_states, attentions=attentions
        )


#: Each Auto class and the class it loads (every folder's ``auto_map`` lists them all), from the classes' own
#: ``auto_class_name``.
AUTO_CLASSES: dict[str, str] = {
    model_class.auto_class_name: model_class.__name__
    for model_class in (MlmSuiteModel, MlmSuiteForMaskedLM, MlmSuiteForPreTraining, MlmSuiteForNextSentencePrediction,
                        MlmSuiteForSequenceClassification, MlmSuiteForTokenClassification, MlmSuiteForQuestionAnswering)
}


__all__ = [
    "AUTO_CLASSES",
    "MlmSuiteForMaskedLM",
    "MlmSuiteForNextSentencePrediction",
    "MlmSuiteForPairClassification",
    "MlmSuiteForPreTraining",
    "MlmSuiteForPreTrainingOutput",
    "MlmSuiteForQuestionAnswering",
    "MlmSuiteForSentenceEmbedding",
    "MlmSuiteForSequenceClassification",
    "MlmSuiteForTokenClassification",
    "MlmSuiteModel",
    "MlmSuitePreTrainedModel",
    "SentenceEmbeddingOutput",
    "SequenceLayout",
    "has_placeholder_labels",
    "in_batch_negatives_loss",
    "token_cross_entropy",
]
