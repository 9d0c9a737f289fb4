"""Configuration of the mlm_suite encoder and its heads, with BERT's hyper-parameter names and BERT's values
as defaults. Part of the remote-code payload: it imports only transformers. See docs/models.md.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

# (hidden_size, num_hidden_layers, num_attention_heads, intermediate_size). tiny/mini/small are
# the compact BERTs of Turc et al. (2019); base/large are Devlin et al. (2019).
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (128, 2, 2, 512),
    "mini": (256, 4, 4, 1024),
    "small": (512, 4, 8, 2048),
    "base": (768, 12, 12, 3072),
    "large": (1024, 24, 16, 4096),
}

# Size fields → their smallest value (type_vocab_size 0: no token-type embeddings).
_SIZES = {
    "vocab_size": 1,
    "hidden_size": 1,
    "num_hidden_layers": 1,
    "num_attention_heads": 1,
    "intermediate_size": 1,
    "max_position_embeddings": 1,
    "type_vocab_size": 0,
}

_CHOICES = {
    "norm_position": ("post", "pre"),
    "position_embedding_type": ("absolute", "rotary"),
    "ffn_type": ("gelu", "geglu"),
    "classifier_pooling": ("cls", "mean"),
    "sentence_pooling": ("mean", "cls", "max"),
    "classifier_activation": ("tanh", "relu", "gelu"),
    "positions_count": ("columns", "real_tokens"),
}
#: What a layer's attention sees: the whole sequence, or a window around each token (``local_attention``).
LAYER_TYPES = ("full_attention", "sliding_attention")

# The options other encoder families need (RoBERTa, DistilBERT, ELECTRA, ModernBERT), with the defaults that are
# BERT. A config.json holds them only where they differ, so every folder saved before they existed is saved unchanged.
FAMILY_OPTIONS = {
    "positions_count": "columns",
    "embedding_size": None,
    "attention_output_dropout": None,
    "classifier_activation": "tanh",
    "pooler_dropout": 0.0,
    "qa_dropout": 0.0,
    "layer_types": None,
    "local_attention": None,
    "local_rope_theta": None,
    "first_attention_norm": True,
    "ffn_inner_dropout": 0.0,
    "ffn_output_dropout": None,
    "pooler_norm": False,
    "token_head_transform": False,
    "position_offset": 0,
}


def check_layer_types(layer_types: list[str] | None, num_hidden_layers: int) -> None:
    """Raise a ValueError unless ``layer_types`` is None or names one of :data:`LAYER_TYPES` for each layer."""
    if layer_types is None:
        return
    if any(kind not in LAYER_TYPES for kind in layer_types):
        raise ValueError(f"layer_types={layer_types!r}: each entry must be one of {LAYER_TYPES}")
    if len(layer_types) != num_hidden_layers:
        raise ValueError(f"layer_types has {len(layer_types)} entries for num_hidden_layers={num_hidden_layers}")


class MlmSuiteConfig(PreTrainedConfig):
    r"""Hyper-parameters of an mlm_suite encoder and its heads.

    BERT's hyper-parameters keep BERT's names, so a ``BertConfig`` maps onto this one field by field.
    The switches select modern variants; their defaults reproduce BERT exactly:

    - ``norm_position``: ``"post"`` (BERT: LayerNorm after each residual add) or ``"pre"``
      (LayerNorm before each sub-layer, plus a final LayerNorm).
    - ``position_embedding_type``: ``"absolute"`` (learned table) or ``"rotary"`` (RoPE on
      queries and keys, no position table; ``rope_theta`` sets the base).
    - ``ffn_type``: ``"gelu"`` (dense → activation → dense) or ``"geglu"`` (gated).
    - ``use_bias``: biases in linear layers and LayerNorms.
    - ``classifier_pooling``: ``"cls"`` (first token) or ``"mean"`` (mean of real tokens), feeding the pooler.
    - ``sparse_prediction``: during training the MLM head runs only where ``labels != -100``.
    - ``use_crf``, ``tagging_scheme``: a CRF on the token-classification head, with transitions
      constrained by the tagging scheme (``"BIO"``, ``"BIOES"``, ``"IOB1"``, ``"IO"``).
    - ``class_weights``, ``label_smoothing``: applied by the classification losses (positions
      labelled -100 are always ignored).
    - ``sentence_pooling`` (``"mean"``, ``"cls"`` or ``"max"`` over the real tokens) and
      ``normalize_embeddings`` (L2): the sentence embeddings of ``MlmSuiteForSentenceEmbedding``.
    - ``contrastive_temperature`` (its initial value when ``learn_temperature``) and
      ``contrastive_symmetric``: its in-batch-negatives loss (cosine similarity / temperature).

    Options of the other BERT-like families (:data:`FAMILY_OPTIONS`; config.json holds them only when set):

    - ``positions_count``: ``"columns"`` (BERT: a token's position is its column, counted from the row's first real
      token, so that a left-padded row starts at 0 as it does alone) or ``"real_tokens"`` (RoBERTa: positions count
      the real tokens, which differs only in a row whose mask has holes).
    - ``position_offset``: rows at the start of the position table that no position reads (RoBERTa's first
      ``pad_token_id + 1``: its positions start after the padding id); position ``p`` reads row ``p + position_offset``,
      and the table holds ``max_position_embeddings + position_offset`` rows.
    - ``embedding_size``: the width of the embeddings when it is not ``hidden_size`` (ELECTRA): a linear layer
      projects them to ``hidden_size``, and the MLM head maps back to it before the tied decoder.
    - ``attention_output_dropout``: dropout on the attention block's output before its residual add (default:
      ``hidden_dropout_prob``; DistilBERT has none, 0.0).
    - ``classifier_activation``: the pooler's activation, ``"tanh"`` (BERT, RoBERTa), ``"relu"`` (DistilBERT)
      or ``"gelu"`` (ELECTRA).
    - ``pooler_dropout``: dropout on the pooled token before the pooler's dense layer (RoBERTa's and ELECTRA's
      classification heads drop out there too).
    - ``qa_dropout``: dropout on the token states before the question-answering head (DistilBERT).
    - ``layer_types``: per layer, ``"full_attention"`` (every token of the sequence) or ``"sliding_attention"``
      (the tokens at most ``local_attention // 2`` positions away, either side: ``local_attention`` is the whole
      window, as ModernBERT counts it); default: every layer full.
    - ``local_rope_theta``: the RoPE base of the sliding-window layers (default: ``rope_theta``, which the
      full-attention layers keep).
    - ``first_attention_norm``: ``False`` leaves out the first pre-norm layer's attention LayerNorm, whose input is
      the embeddings' normalised output already (ModernBERT).
    - ``ffn_inner_dropout``: dropout on the feed-forward network's activations, before its output projection
      (ModernBERT's ``mlp_dropout``); ``ffn_output_dropout``: dropout on its output before the residual add
      (default: ``hidden_dropout_prob``; ModernBERT has none, 0.0).
    - ``pooler_norm``: a LayerNorm after the pooler's activation (ModernBERT's classification head is dense,
      activation, LayerNorm).
    - ``token_head_transform``: the token-classification and question-answering heads run each token's state through
      dense, ``classifier_activation`` and LayerNorm before their dropout and classifier (ModernBERT).
    """

    model_type = "mlm_suite"

    def __init__(
        self,
        vocab_size: int = 30522,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        layer_norm_eps: float = 1e-12,
        initializer_range: float = 0.02,
        pad_token_id: int | None = 0,
        norm_position: str = "post",
        position_embedding_type: str = "absolute",
        rope_theta: float = 10000.0,
        ffn_type: str = "gelu",
        use_bias: bool = True,
        classifier_pooling: str = "cls",
        classifier_dropout: float | None = None,
        sparse_prediction: bool = True,
        use_crf: bool = False,
        tagging_scheme: str | None = None,
        class_weights: list[float] | None = None,
        label_smoothing: float = 0.0,
        sentence_pooling: str = "mean",
        normalize_embeddings: bool = False,
        contrastive_temperature: float = 0.05,
        learn_temperature: bool = False,
        contrastive_symmetric: bool = False,
        tie_word_embeddings: bool = True,
        positions_count: str = "columns",
        embedding_size: int | None = None,
        attention_output_dropout: float | None = None,
        classifier_activation: str = "tanh",
        pooler_dropout: float = 0.0,
        qa_dropout: float = 0.0,
        layer_types: list[str] | None = None,
        local_attention: int | None = None,
        local_rope_theta: float | None = None,
        first_attention_norm: bool = True,
        ffn_inner_dropout: float = 0.0,
        ffn_output_dropout: float | None = None,
        pooler_norm: bool = False,
        token_head_transform: bool = False,
        position_offset: int = 0,
        **kwargs,
    ):
        for name, value in (
            ("norm_position", norm_position),
            ("position_embedding_type", position_embedding_type),
            ("ffn_type", ffn_type),
            ("classifier_pooling", classifier_pooling),
            ("sentence_pooling", sentence_pooling),
            ("classifier_activation", classifier_activation),
            ("positions_count", positions_count),
        ):
            if value not in _CHOICES[name]:
                raise ValueError(f"{name}={value!r} is not one of {_CHOICES[name]}")
        # Checked here too, not only in check_sizes: transformers' own check of layer_types would raise an error
        # that is no ValueError.
        check_layer_types(layer_types, num_hidden_layers)
        if not first_attention_norm and norm_position != "pre":
            raise ValueError("first_attention_norm=False needs norm_position='pre' (a post-norm layer's norm follows it)")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={label_smoothing} must be in [0, 1)")
        if not contrastive_temperature > 0:
            raise ValueError(f"contrastive_temperature={contrastive_temperature} must be positive")
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.norm_position = norm_position
        self.position_embedding_type = position_embedding_type
        self.rope_theta = rope_theta
        self.ffn_type = ffn_type
        self.use_bias = use_bias
        self.classifier_pooling = classifier_pooling
        self.classifier_dropout = classifier_dropout
        self.sparse_prediction = sparse_prediction
        self.use_crf = use_crf
        self.tagging_scheme = tagging_scheme
        self.class_weights = class_weights
        self.label_smoothing = label_smoothing
        self.sentence_pooling = sentence_pooling
        self.normalize_embeddings = normalize_embeddings
        self.contrastive_temperature = contrastive_temperature
        self.learn_temperature = learn_temperature
        self.contrastive_symmetric = contrastive_symmetric
        self.positions_count = positions_count
        self.embedding_size = embedding_size
        self.attention_output_dropout = attention_output_dropout
        self.classifier_activation = classifier_activation
        self.pooler_dropout = pooler_dropout
        self.qa_dropout = qa_dropout
        self.layer_types = None if layer_types is None else list(layer_types)
        self.local_attention = local_attention
        self.local_rope_theta = local_rope_theta
        self.first_attention_norm = first_attention_norm
        self.ffn_inner_dropout = ffn_inner_dropout
        self.ffn_output_dropout = ffn_output_dropout
        self.pooler_norm = pooler_norm
        self.token_head_transform = token_head_transform
        self.position_offset = position_offset
        super().__init__(pad_token_id=pad_token_id, tie_word_embeddings=tie_word_embeddings, **kwargs)

    def to_dict(self) -> dict:
        """``PreTrainedConfig.to_dict`` less the family options that hold their BERT default (:data:`FAMILY_OPTIONS`)."""
        output = super().to_dict()
        for name, default in FAMILY_OPTIONS.items():
            if name in output and output[name] == default:
                del output[name]
        return output

    @property
    def embedding_width(self) -> int:
        """The width of the word, position and token-type embeddings: ``embedding_size``, else ``hidden_size``."""
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    def attention_window(self, layer: int) -> int | None:
        """How many positions away, either side, the queries of layer ``layer`` see: ``local_attention // 2`` in a
        sliding-window layer, None (the whole sequence) in a full-attention one."""
        if self.layer_types is None or self.layer_types[layer] == "full_attention":
            return None
        return self.local_attention // 2

    def layer_rope_theta(self, layer: int) -> float:
        """The RoPE base of layer ``layer``: ``local_rope_theta`` in a sliding-window layer when set, else ``rope_theta``."""
        if self.attention_window(layer) is not None and self.local_rope_theta is not None:
            return self.local_rope_theta
        return self.rope_theta

    def check_sizes(self) -> None:
        """Raise a ValueError, naming the field and its value, if a size is not a whole number of at least its
        minimum (:data:`_SIZES`) or the attention sizes do not fit together.

        Building a model calls this, not the constructor: as with ``BertConfig``, a config may be
        created (or updated attribute by attribute) before its sizes agree.
        """
        for name, low in _SIZES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be a whole number of at least {low}, got {value!r}")
        offset = self.position_offset
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"position_offset must be a whole number of at least 0, got {offset!r}")
        size = self.embedding_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"embedding_size must be a whole number of at least 1 or None, got {size!r}")
        check_layer_types(self.layer_types, self.num_hidden_layers)
        window = self.local_attention
        if "sliding_attention" in (self.layer_types or ()) and (
            isinstance(window, bool) or not isinstance(window, int) or window < 2
        ):
            raise ValueError(f"sliding_attention layers need local_attention, a whole number of at least 2, got {window!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads ({self.num_attention_heads})"
            )
        if self.position_embedding_type == "rotary" and (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError(
                f"rotary position embeddings need an even head size, got {self.hidden_size // self.num_attention_heads}"
            )

    @classmethod
    def preset(cls, name: str, **overrides) -> "MlmSuiteConfig":
        """A configuration of a published size: ``tiny``, ``mini``, ``small``, ``base`` or ``large``, to pretrain.

        Attention dropout is 0 unless overridden (as in ModernBERT and Cramming): the varlen flash kernel, the
        fast attention path on CUDA, has no dropout, so 0.1 (BERT's, and ``MlmSuiteConfig()``'s) would send every
        training step through the padded grid; on the held-out split it costs nothing (docs/performance.md).
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        hidden, layers, heads, intermediate = PRESETS[name]
        sizes = dict(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=intermediate
        )
        return cls(**{**sizes, "attention_probs_dropout_prob": 0.0, **overrides})


__all__ = ["FAMILY_OPTIONS", "LAYER_TYPES", "MlmSuiteConfig", "PRESETS", "check_layer_types"]
