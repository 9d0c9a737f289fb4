"""Contextual word embeddings from any Hugging Face encoder (one vector per word instance, its sub-token pieces
pooled), how much a few directions dominate their cosine similarity (anisotropy, rogue dimensions) and the
z-scoring that removes it, contextual similarity, and word-sense disambiguation by nearest sense centroid.
See docs/analysis.md.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, Union

import numpy as np
import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm

from mlm_suite.data.words import split_words
from mlm_suite.model_files import save_tensors

LayerSpec = Union[str, Sequence[int]]
ArrayLike = Union[torch.Tensor, np.ndarray, Sequence[Sequence[float]]]

LAYER_CHOICES = ("last", "last4_mean", "last4_sum")
POOLING_CHOICES = ("mean", "first")
# Below this many batches a progress bar is more noise than help.
_PROGRESS_MIN_BATCHES = 10
# anisotropy() draws its pairs in blocks of this many (8 MB of indices) and gathers at most this many vector entries at
# a time (2 MB of float64, which stays in cache): memory stays bounded however many pairs are asked for, and a seed
# draws the same pairs whatever the vectors' width.
_PAIRS_PER_DRAW = 1 << 20
_ENTRIES_PER_PRODUCT = 1 << 18


def _as_float_tensor(vectors: ArrayLike, name: str = "vectors") -> torch.Tensor:
    tensor = vectors if isinstance(vectors, torch.Tensor) else torch.as_tensor(np.asarray(vectors))
    if tensor.dim() != 2:
        raise ValueError(f"{name} must be a 2-D (n, dim) array, got shape {tuple(tensor.shape)}")
    return tensor.detach().to("cpu", torch.float32)


@dataclass
class TextEmbedding:
    """Word vectors of one raw text: ``vectors[i]`` (shape ``(hidden,)``) belongs to ``words[i]``,
    found at ``text[spans[i][0]:spans[i][1]]``."""

    words: list[str]
    spans: list[tuple[int, int]]
    vectors: torch.Tensor


class ContextualEmbedder:
    """One vector per word instance from an encoder's hidden states.

    Args:
        model: an encoder that accepts ``input_ids``, ``attention_mask`` and
            ``output_hidden_states=True`` and returns ``hidden_states`` (embeddings output then
            one tensor per layer). Task models (``*ForMaskedLM``...) are unwrapped to ``base_model``.
        tokenizer: a *fast* tokenizer (its ``word_ids`` map pieces back to words).
        layers: ``"last"`` (``hidden_states[-1]``), ``"last4_mean"`` / ``"last4_sum"`` (mean / sum of
            the last four), or a list of indices into ``hidden_states`` whose mean is taken
            (``[0]`` is the embedding layer, ``[k]`` the output of layer ``k``).
        subword_pooling: ``"mean"`` of a word's pieces, or its ``"first"`` piece.
        batch_size: sentences per forward pass.
        device: where to run the model; default: where its parameters are.
        max_length: the longest tokenised sentence allowed (special tokens included); default: the
            smaller of the tokenizer's ``model_max_length`` and the model's position embeddings.
            Longer sentences are an error (no silent truncation or windowing).
        show_progress: ``True``/``False`` forces the progress bar on/off; ``None`` shows it when there
            are at least 10 batches.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        layers: LayerSpec = "last",
        subword_pooling: str = "mean",
        batch_size: int = 32,
        device: str | torch.device | None = None,
        max_length: int | None = None,
        show_progress: bool | None = None,
    ) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise TypeError(
                f"ContextualEmbedder needs a fast tokenizer (it maps pieces to words with word_ids()); "
                f"got {type(tokenizer).__name__}. Load one with AutoTokenizer.from_pretrained(..., use_fast=True)."
            )
        if isinstance(layers, str) and layers not in LAYER_CHOICES:
            raise ValueError(f"layers must be one of {LAYER_CHOICES} or a list of indices, got {layers!r}")
        if not isinstance(layers, str):
            layers = [int(index) for index in layers]
            if not layers:
                raise ValueError("layers is an empty list; give at least one index into hidden_states")
        if subword_pooling not in POOLING_CHOICES:
            raise ValueError(f"subword_pooling must be one of {POOLING_CHOICES}, got {subword_pooling!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if tokenizer.pad_token_id is None:
            raise ValueError(f"tokenizer {type(tokenizer).__name__} has no pad token; batching needs one")

        self.model = getattr(model, "base_model", model)
        self.tokenizer = tokenizer
        self.layers = layers
        self.subword_pooling = subword_pooling
        self.batch_size = batch_size
        self.device = torch.device(device) if device is not None else next(self.model.parameters()).device
        self.max_length = max_length if max_length is not None else self._default_max_length()
        self.show_progress = show_progress

    def _default_max_length(self) -> int:
        limits = [getattr(self.model.config, "max_position_embeddings", None)]
        model_max_length = getattr(self.tokenizer, "model_max_length", None)
        # Tokenizers without a known limit report a huge sentinel (int(1e30)).
        if model_max_length is not None and model_max_length < 1_000_000:
            limits.append(model_max_length)
        known = [limit for limit in limits if limit]
        if not known:
            raise ValueError("cannot tell the model's maximum length; pass max_length explicitly")
        return min(known)

    # ------------------------------------------------------------------ public API

    def embed_words(self, sentences: Sequence[Sequence[str]]) -> list[torch.Tensor]:
        """Embed pre-split sentences.

        Args:
            sentences: ``n`` sentences, each a list of words.

        Returns:
            ``n`` float32 CPU tensors; tensor ``i`` has shape ``(len(sentences[i]), hidden)``.
        """
        vectors = self._embed(sentences, self._combine_layers)
        return [item if item is not None else torch.zeros(0, self._config_value("hidden_size")) for item in vectors]

    def embed_words_all_layers(self, sentences: Sequence[Sequence[str]]) -> list[torch.Tensor]:
        """Like :meth:`embed_words` but for every entry of ``hidden_states`` at once (``layers`` is ignored).

        Returns:
            ``n`` tensors; tensor ``i`` has shape ``(num_layers + 1, len(sentences[i]), hidden)``.
        """
        vectors = self._embed(sentences, lambda hidden_states: torch.stack(hidden_states, dim=1))
        empty_shape = (self._config_value("num_hidden_layers") + 1, 0, self._config_value("hidden_size"))
        return [item if item is not None else torch.zeros(empty_shape) for item in vectors]

    def embed_targets(self, sentences: Sequence[Sequence[str]], targets: Sequence[int]) -> torch.Tensor:
        """The vector of one target word per sentence.

        Args:
            sentences: ``n`` sentences, each a list of words.
            targets: ``n`` word indices, ``targets[i]`` into ``sentences[i]``.

        Returns:
            Tensor of shape ``(n, hidden)``.
        """
        if len(sentences) != len(targets):
            raise ValueError(f"got {len(sentences)} sentences but {len(targets)} target indices")
        for index, (words, target) in enumerate(zip(sentences, targets)):
            _check_target(words, target, f"sentence {index}")
        vectors = self.embed_words(sentences)
        if not vectors:
            raise ValueError("no sentences to embed")
        return torch.stack([sentence[target] for sentence, target in zip(vectors, targets)])

    def embed_texts(self, texts: Sequence[str]) -> list[TextEmbedding]:
        """Embed raw texts, split into words as BERT pre-splits them (:func:`~mlm_suite.data.words.split_words`).

        Returns:
            One :class:`TextEmbedding` per text, whose ``vectors`` has shape ``(n_words, hidden)``.
        """
        splits = [split_words(text) for text in texts]
        vectors = self.embed_words([[word for word, _, _ in split] for split in splits])
        return [
            TextEmbedding(
                words=[word for word, _, _ in split],
                spans=[(start, end) for _, start, end in split],
                vectors=sentence_vectors,
            )
            for split, sentence_vectors in zip(splits, vectors)
        ]

    # ------------------------------------------------------------------ internals

    def _combine_layers(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """``(batch, seq, hidden)`` from the ``num_layers + 1`` tensors of ``hidden_states``."""
        if self.layers == "last":
            return hidden_states[-1]
        if self.layers in ("last4_mean", "last4_sum"):
            if len(hidden_states) < 4:
                raise ValueError(f"{self.layers} needs 4 hidden states; the model returns {len(hidden_states)}")
            stacked = torch.stack(hidden_states[-4:])
            return stacked.mean(0) if self.layers == "last4_mean" else stacked.sum(0)
        for index in self.layers:
            if not -len(hidden_states) <= index < len(hidden_states):
                raise IndexError(
                    f"layer index {index} is out of range: the model returns {len(hidden_states)} hidden states "
                    f"(0 = embeddings, {len(hidden_states) - 1} = last layer)"
                )
        return torch.stack([hidden_states[index] for index in self.layers]).mean(0)

    def _tokenize(self, sentences: Sequence[Sequence[str]]) -> tuple[list[list[int]], list[list[int | None]]]:
        """Token ids and piece-to-word ids per sentence, after checking words and lengths."""
        for index, words in enumerate(sentences):
            if isinstance(words, str):
                raise TypeError(f"sentence {index} is a string; embed_words expects lists of words (use embed_texts)")
        encoding = self.tokenizer(
            [list(words) for words in sentences], is_split_into_words=True, add_special_tokens=True
        )
        input_ids: list[list[int]] = encoding["input_ids"]
        word_ids = [encoding.word_ids(index) for index in range(len(sentences))]
        for index, (words, ids, pieces) in enumerate(zip(sentences, input_ids, word_ids)):
            if len(ids) > self.max_length:
                raise ValueError(
                    f"sentence {index} is {len(ids)} tokens long (special tokens included), more than "
                    f"max_length={self.max_length}; split it before embedding"
                )
            covered = {word for word in pieces if word is not None}
            for word_index, word in enumerate(words):
                if word_index not in covered:
                    raise ValueError(
                        f"word {word_index} ({word!r}) of sentence {index} has no sub-tokens in the tokenizer; "
                        f"remove it or replace it"
                    )
        return input_ids, word_ids

    def _pooling_matrix(self, word_ids: list[int | None], n_words: int) -> torch.Tensor:
        """``(n_words, seq)`` weights that turn a sentence's piece vectors into word vectors."""
        matrix = torch.zeros(n_words, len(word_ids))
        for position, word in enumerate(word_ids):
            if word is None:
                continue
            if self.subword_pooling == "first":
                if not matrix[word].any():
                    matrix[word, position] = 1.0
            else:
                matrix[word, position] = 1.0
        return matrix / matrix.sum(dim=1, keepdim=True)

    def _embed(
        self,
        sentences: Sequence[Sequence[str]],
        select: Callable[[tuple[torch.Tensor, ...]], torch.Tensor],
    ) -> list[torch.Tensor | None]:
        """Run the model and pool pieces into words; ``select`` maps ``hidden_states`` to a tensor of
        shape ``(batch, seq, hidden)`` or ``(batch, extra, seq, hidden)``. Empty sentences give ``None``."""
        results: list[torch.Tensor | None] = [None] * len(sentences)
        nonempty = [index for index, words in enumerate(sentences) if len(words) > 0]
        if not nonempty:
            return results
        input_ids, word_ids = self._tokenize([sentences[index] for index in nonempty])
        # Longest first, so that each batch holds sentences of similar length (little padding).
        order = sorted(range(len(nonempty)), key=lambda position: -len(input_ids[position]))
        batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        show = self.show_progress if self.show_progress is not None else len(batches) >= _PROGRESS_MIN_BATCHES
        pad_id = self.tokenizer.pad_token_id

        self.model.eval()
        self.model.to(self.device)
        with torch.inference_mode():
            for batch in tqdm(batches, desc="embedding", unit="batch", disable=not show):
                width = max(len(input_ids[position]) for position in batch)
                ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                # Right padding keeps each real token's position id whatever the batch.
                for row, position in enumerate(batch):
                    length = len(input_ids[position])
                    ids[row, :length] = torch.tensor(input_ids[position])
                    mask[row, :length] = 1
                output = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    output_hidden_states=True,
                    return_dict=True,
                )
                if getattr(output, "hidden_states", None) is None:
                    raise TypeError(f"{type(self.model).__name__} returned no hidden_states for output_hidden_states=True")
                selected = select(output.hidden_states).float().cpu()
                for row, position in enumerate(batch):
                    length = len(input_ids[position])
                    index = nonempty[position]
                    pooling = self._pooling_matrix(word_ids[position], len(sentences[index]))
                    pieces = selected[row, ..., :length, :]
                    results[index] = pooling @ pieces
        return results

    def _config_value(self, name: str) -> int:
        value = getattr(self.model.config, name, None)
        if value is None:
            raise ValueError(f"the model's config has no {name}")
        return value


def _check_target(words: Sequence[str], target: int, where: str) -> None:
    if not isinstance(target, (int, np.integer)) or isinstance(target, bool):
        raise TypeError(f"target index of {where} must be an int, got {target!r}")
    if not 0 <= target < len(words):
        raise IndexError(f"target index {target} is outside {where}, which has {len(words)} words")


# ---------------------------------------------------------------------- geometry


def _normalize(vectors: torch.Tensor) -> torch.Tensor:
    norms = vectors.norm(dim=1, keepdim=True)
    if bool((norms == 0).any()):
        raise ValueError("a vector has zero norm; cosine similarity is undefined for it")
    return vectors / norms


def anisotropy(vectors: ArrayLike, n_pairs: int = 10000, seed: int = 0) -> float:
    """Expected cosine similarity between random pairs of distinct instances (Ethayarajh, 2019).

    Args:
        vectors: ``(n, dim)`` word-instance vectors, ``n >= 2``.
        n_pairs: pairs ``(i, j)``, ``i != j``, drawn uniformly with replacement. Computed in blocks, so memory does
            not grow with it (10^8 pairs of 128-wide vectors at once would take 100 GB); time does.
        seed: the random generator's seed (the same seed gives the same pairs).

    Returns:
        The mean cosine: about 0 for isotropic vectors, near 1 when all share one direction.
    """
    tensor = _as_float_tensor(vectors)
    n = tensor.shape[0]
    if n < 2:
        raise ValueError(f"anisotropy needs at least 2 vectors, got {n}")
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be >= 1, got {n_pairs}")
    generator = torch.Generator().manual_seed(seed)
    unit = _normalize(tensor.double())
    rows_per_product = max(1, _ENTRIES_PER_PRODUCT // unit.shape[1])
    total = 0.0
    for start in range(0, n_pairs, _PAIRS_PER_DRAW):
        count = min(_PAIRS_PER_DRAW, n_pairs - start)
        first = torch.randint(n, (count,), generator=generator)
        # Drawing from n - 1 values and skipping `first` gives a uniform distinct partner.
        second = torch.randint(n - 1, (count,), generator=generator)
        second = second + (second >= first).long()
        for rows, partners in zip(first.split(rows_per_product), second.split(rows_per_product)):
            total += float((unit[rows] * unit[partners]).sum())
    return total / n_pairs


@dataclass
class RogueDimensions:
    """The dimensions that contribute most to the expected cosine between distinct instances.

    ``indices[i]`` contributes ``contributions[i]`` (= ``E[u_d v_d / (|u||v|)]``), a fraction
    ``shares[i]`` of ``expected_cosine`` (the sum of all dimensions' contributions).
    """

    indices: list[int]
    contributions: list[float]
    shares: list[float]
    expected_cosine: float


def rogue_dimensions(vectors: ArrayLike, k: int = 5) -> RogueDimensions:
    """The ``k`` dimensions that dominate cosine similarity (Timkey & van Schijndel, 2021).

    Uses the exact closed form over all ordered pairs of distinct instances: with ``u_i`` the
    normalised vectors (shape ``(n, dim)``), dimension ``d`` contributes
    ``((sum_i u_id)^2 - sum_i u_id^2) / (n (n - 1))``; these sum to the expected cosine.
    A share above 1 is possible when other dimensions contribute negatively.
    """
    tensor = _as_float_tensor(vectors)
    n, dim = tensor.shape
    if n < 2:
        raise ValueError(f"rogue_dimensions needs at least 2 vectors, got {n}")
    if not 1 <= k <= dim:
        raise ValueError(f"k must be between 1 and the dimension {dim}, got {k}")
    unit = _normalize(tensor.double())
    contributions = (unit.sum(0) ** 2 - (unit**2).sum(0)) / (n * (n - 1))
    expected = float(contributions.sum())
    top = torch.topk(contributions, k)
    return RogueDimensions(
        indices=top.indices.tolist(),
        contributions=top.values.tolist(),
        shares=[value / expected if expected != 0 else math.nan for value in top.values.tolist()],
        expected_cosine=expected,
    )


class Standardizer:
    """Per-dimension z-scoring ``z = (x - mean) / std``, with ``std`` floored at ``eps``.

    Removes the rogue dimensions' dominance over cosine similarity (Timkey & van Schijndel, 2021). Not
    scikit-learn's ``StandardScaler``: torch tensors in and out, saved as safetensors rather than pickled, and a
    constant dimension is divided by ``eps`` (StandardScaler leaves it unscaled).
    """

    FORMAT = "mlm_suite.Standardizer"

    def __init__(self, eps: float = 1e-6) -> None:
        if eps <= 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        self.eps = eps
        self.mean: torch.Tensor | None = None
        self.std: torch.Tensor | None = None

    @property
    def is_fitted(self) -> bool:
        return self.mean is not None

    def fit(self, vectors: ArrayLike) -> "Standardizer":
        """Learn the mean and (floored, population) std of each dimension of ``(n, dim)`` vectors."""
        tensor = _as_float_tensor(vectors).double()
        if tensor.shape[0] == 0:
            raise ValueError("cannot fit a Standardizer on 0 vectors")
        self.mean = tensor.mean(0).float()
        self.std = tensor.std(0, unbiased=False).clamp_min(self.eps).float()
        return self

    def transform(self, vectors: ArrayLike) -> torch.Tensor:
        """z-score ``(..., dim)`` vectors (a tensor, array or nested list) → float32 tensor of the same shape."""
        if self.mean is None or self.std is None:
            raise RuntimeError("Standardizer.transform called before fit (or load)")
        tensor = vectors if isinstance(vectors, torch.Tensor) else torch.as_tensor(np.asarray(vectors))
        tensor = tensor.detach().to("cpu", torch.float32)
        if tensor.dim() == 0:
            raise ValueError("cannot standardize a scalar; expected vectors of shape (..., dim)")
        if tensor.shape[-1] != self.mean.shape[0]:
            raise ValueError(
                f"vectors have dimension {tensor.shape[-1]} but the Standardizer was fitted on dimension "
                f"{self.mean.shape[0]}"
            )
        return (tensor - self.mean) / self.std

    def fit_transform(self, vectors: ArrayLike) -> torch.Tensor:
        return self.fit(vectors).transform(vectors)

    def save(self, path: str | Path) -> None:
        """Write ``mean`` and ``std`` to a safetensors file (format name and eps in its metadata)."""
        if self.mean is None or self.std is None:
            raise RuntimeError("cannot save a Standardizer before fit")
        metadata = {"format": self.FORMAT, "eps": repr(self.eps), "dim": str(self.mean.shape[0])}
        save_tensors({"mean": self.mean.contiguous(), "std": self.std.contiguous()}, path, metadata=metadata)

    @classmethod
    def load(cls, path: str | Path) -> "Standardizer":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
        if metadata.get("format") != cls.FORMAT:
            raise ValueError(f"{path} is not a saved Standardizer (metadata format={metadata.get('format')!r})")
        tensors = load_file(str(path))
        standardizer = cls(eps=float(metadata["eps"]))
        standardizer.mean, standardizer.std = tensors["mean"], tensors["std"]
        return standardizer


# ---------------------------------------------------------------------- sense classification


def _most_frequent(counts: Counter) -> str:
    # Ties go to the alphabetically first sense, so results never depend on data order.
    return min(counts, key=lambda sense: (-counts[sense], sense))


class SenseCentroidClassifier:
    """Word sense disambiguation by nearest sense centroid (cosine).

    Each ``(word, sense)`` seen in training gets the mean of its instances' vectors; a test
    instance gets the sense of its word whose centroid is most cosine-similar. Words never seen
    in training have no candidate senses: :meth:`predict` returns ``None`` for them (a word
    seen with a single sense always gets that sense).

    Args:
        standardizer: when given, vectors are z-scored before centroids and cosines. An unfitted
            standardizer is fitted on the training vectors by :meth:`fit`.
    """

    def __init__(self, standardizer: Standardizer | None = None) -> None:
        self.standardizer = standardizer
        self.senses: dict[str, list[str]] = {}
        self.centroids: dict[str, torch.Tensor] = {}
        self.sense_counts: dict[str, Counter] = {}

    def _prepare(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.standardizer.transform(vectors) if self.standardizer is not None else vectors

    def fit(self, words: Sequence[str], vectors: ArrayLike, senses: Sequence[str]) -> "SenseCentroidClassifier":
        """Learn centroids from ``n`` labelled instances: ``words`` and ``senses`` of length ``n``,
        ``vectors`` of shape ``(n, dim)``."""
        tensor = _as_float_tensor(vectors)
        if not len(words) == len(senses) == tensor.shape[0]:
            raise ValueError(f"got {len(words)} words, {len(senses)} senses and {tensor.shape[0]} vectors")
        if tensor.shape[0] == 0:
            raise ValueError("cannot fit on 0 instances")
        if self.standardizer is not None and not self.standardizer.is_fitted:
            self.standardizer.fit(tensor)
        tensor = self._prepare(tensor)
        groups: dict[str, dict[str, list[int]]] = {}
        for index, (word, sense) in enumerate(zip(words, senses)):
            groups.setdefault(word, {}).setdefault(sense, []).append(index)
        self.senses, self.centroids, self.sense_counts = {}, {}, {}
        for word, by_sense in groups.items():
            names = sorted(by_sense)
            centroids = torch.stack([tensor[by_sense[name]].mean(0) for name in names])
            self.senses[word] = names
            self.centroids[word] = centroids / centroids.norm(dim=1, keepdim=True).clamp_min(1e-12)
            self.sense_counts[word] = Counter({name: len(by_sense[name]) for name in names})
        return self

    def knows(self, word: str, sense: str) -> bool:
        """Whether ``sense`` of ``word`` was seen in training (so it can be predicted)."""
        return sense in self.sense_counts.get(word, ())

    def most_frequent_sense(self, word: str) -> str | None:
        counts = self.sense_counts.get(word)
        return _most_frequent(counts) if counts else None

    def predict(self, words: Sequence[str], vectors: ArrayLike) -> list[str | None]:
        """The predicted sense of each of ``n`` instances (``vectors``: ``(n, dim)``); ``None`` for
        words unseen in training."""
        if not self.centroids:
            raise RuntimeError("SenseCentroidClassifier.predict called before fit")
        tensor = self._prepare(_as_float_tensor(vectors))
        if len(words) != tensor.shape[0]:
            raise ValueError(f"got {len(words)} words but {tensor.shape[0]} vectors")
        predictions: list[str | None] = []
        for word, vector in zip(words, tensor):
            if word not in self.centroids:
                predictions.append(None)
                continue
            scores = self.centroids[word] @ vector
            predictions.append(self.senses[word][int(scores.argmax())])
        return predictions

    def score(self, words: Sequence[str], vectors: ArrayLike, senses: Sequence[str]) -> float:
        """Accuracy on labelled instances. A gold ``(word, sense)`` never seen in training cannot be
        predicted, so it is an error (filter with :meth:`knows` first)."""
        for word, sense in zip(words, senses):
            if not self.knows(word, sense):
                raise ValueError(
                    f"sense {sense!r} of word {word!r} was never seen in training, so the classifier cannot "
                    f"predict it; drop such instances before scoring"
                )
        return accuracy(self.predict(words, vectors), senses)


def most_frequent_sense_baseline(
    train_words: Sequence[str], train_senses: Sequence[str], test_words: Sequence[str]
) -> list[str | None]:
    """Predict each test word's most frequent training sense (ties: alphabetically first);
    ``None`` for words unseen in training."""
    if len(train_words) != len(train_senses):
        raise ValueError(f"got {len(train_words)} training words but {len(train_senses)} senses")
    counts: dict[str, Counter] = {}
    for word, sense in zip(train_words, train_senses):
        counts.setdefault(word, Counter())[sense] += 1
    return [_most_frequent(counts[word]) if word in counts else None for word in test_words]


def accuracy(predictions: Sequence[str | None], gold: Sequence[str]) -> float:
    """Fraction of exact matches (a ``None`` prediction is wrong)."""
    if len(predictions) != len(gold):
        raise ValueError(f"got {len(predictions)} predictions but {len(gold)} gold labels")
    if not gold:
        raise ValueError("accuracy of 0 instances is undefined")
    return sum(prediction == label for prediction, label in zip(predictions, gold)) / len(gold)


# ---------------------------------------------------------------------- similarity


def contextual_similarity(a: ArrayLike, b: ArrayLike, standardizer: Standardizer | None = None) -> float:
    """Cosine between two word-instance vectors of shape ``(dim,)``, z-scored first if a
    ``standardizer`` is given."""
    first, second = (torch.as_tensor(np.asarray(v)) if not isinstance(v, torch.Tensor) else v for v in (a, b))
    if first.dim() != 1 or first.shape != second.shape:
        raise ValueError(f"expected two vectors of the same shape (dim,), got {tuple(first.shape)} and {tuple(second.shape)}")
    pair = _as_float_tensor(torch.stack([first, second]))
    if standardizer is not None:
        pair = standardizer.transform(pair)
    unit = _normalize(pair.double())
    return float(unit[0] @ unit[1])


def similarity_in_context(
    embedder: ContextualEmbedder,
    context_a: tuple[Sequence[str], int],
    context_b: tuple[Sequence[str], int],
    standardizer: Standardizer | None = None,
) -> float:
    """Cosine between word ``context_a[1]`` of sentence ``context_a[0]`` and word ``context_b[1]``
    of sentence ``context_b[0]``, both embedded in context by ``embedder``."""
    (words_a, index_a), (words_b, index_b) = context_a, context_b
    _check_target(words_a, index_a, "context_a")
    _check_target(words_b, index_b, "context_b")
    vectors = embedder.embed_targets([words_a, words_b], [index_a, index_b])
    return contextual_similarity(vectors[0], vectors[1], standardizer)


# ---------------------------------------------------------------------- layer-wise analysis


def layerwise_anisotropy(
    embedder: ContextualEmbedder, sentences: Sequence[Sequence[str]], n_pairs: int = 10000, seed: int = 0
) -> list[dict[str, float]]:
    """Anisotropy of every entry of ``hidden_states`` (0 = embeddings), raw and after z-scoring.

    Each layer's word-instance vectors of all ``sentences`` are pooled together; the
    standardizer is fitted on the same vectors (an analysis of this sample, not a held-out test).

    Returns:
        One dict per layer: ``layer``, ``raw``, ``standardized``, ``top_rogue_dimension``,
        ``top_rogue_share`` (of the raw expected cosine).
    """
    per_sentence = embedder.embed_words_all_layers(sentences)
    stacked = torch.cat(per_sentence, dim=1)  # (num_layers + 1, n_instances, hidden)
    results = []
    for layer, vectors in enumerate(stacked):
        rogue = rogue_dimensions(vectors, k=1)
        results.append(
            {
                "layer": layer,
                "raw": anisotropy(vectors, n_pairs=n_pairs, seed=seed),
                "standardized": anisotropy(Standardizer().fit_transform(vectors), n_pairs=n_pairs, seed=seed),
                "top_rogue_dimension": rogue.indices[0],
                "top_rogue_share": rogue.shares[0],
            }
        )
    return results


def save_json(data: object, path: str | Path) -> None:
    """Write ``data`` as indented JSON (NaN is written as null so other tools can read it)."""

    def clean(value: object) -> object:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(item) for item in value]
        return value

    Path(path).write_text(json.dumps(clean(data), indent=2) + "\n", encoding="utf-8")
