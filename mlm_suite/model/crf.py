"""Linear-chain conditional random field (CRF) for token classification, and the tagging schemes whose
transition rules constrain it (the one table of scheme names and prefixes; ``mlm_suite.data.finetuning.tagging``
validates data with it). ``transitions[i, j]`` scores moving from tag ``i`` to tag ``j``; a mask selects the
positions in the chain (typically each word's first piece), so constraints apply between words. Part of the
remote-code payload: it imports only torch. See docs/models.md.
"""

from typing import Optional

import torch
from torch import nn

#: Score added to forbidden start/transition/end moves: finite, so no ``inf - inf`` makes NaN in any dtype,
#: and a forbidden path is exp(-1e4) times less likely, excluded in float32 arithmetic.
FORBIDDEN_SCORE = -1.0e4

#: Prefixes each tagging scheme uses besides the bare ``"O"`` tag, by canonical name.
ALLOWED_PREFIXES: dict[str, frozenset[str]] = {
    "IO": frozenset("I"),
    "BIO": frozenset("BI"),
    "IOB1": frozenset("BI"),
    "BIOES": frozenset("BIES"),
}
#: Every accepted scheme name (upper case) → its canonical name.
SCHEME_ALIASES = {"IO": "IO", "BIO": "BIO", "IOB2": "BIO", "IOB1": "IOB1", "BIOES": "BIOES", "IOBES": "BIOES"}

Constraints = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _parse_label(label: str, scheme: str) -> tuple[str, Optional[str]]:
    """Split ``"B-PER"`` into ``("B", "PER")`` and ``"O"`` into ``("O", None)``.

    Raises:
        ValueError: if the label does not fit ``scheme`` (unknown prefix or missing type).
    """
    if label == "O":
        return "O", None
    prefix, sep, entity = label.partition("-")
    if not sep or not entity or prefix not in ALLOWED_PREFIXES[scheme]:
        allowed = ", ".join(f"{p}-<TYPE>" for p in "BIES" if p in ALLOWED_PREFIXES[scheme])
        raise ValueError(f"Label {label!r} does not fit the {scheme} scheme (expected 'O' or {allowed}).")
    return prefix, entity


def transition_allowed(scheme: str, previous: tuple[str, Optional[str]], current: tuple[str, Optional[str]]) -> bool:
    """Whether tag ``current`` may directly follow tag ``previous`` under the canonical ``scheme``.

    Tags are ``(prefix, type)`` pairs, ``("O", None)`` outside entities; a sequence starts and ends
    as if ``O`` stood before and after it.
    """
    (previous_prefix, previous_type), (prefix, type_) = previous, current
    continues_entity = previous_prefix in "BI" and previous_type == type_
    if scheme == "BIO":
        return prefix != "I" or continues_entity
    if scheme == "IOB1":
        # IOB1 only uses B-X to separate two adjacent X chunks.
        return prefix != "B" or continues_entity
    if scheme == "BIOES":
        if previous_prefix in "BI":
            # An open chunk must be continued or closed with its own type.
            return prefix in "IE" and previous_type == type_
        return prefix in "BSO"
    return True  # IO


def allowed_transitions(id2label: dict[int, str], scheme: str) -> Constraints:
    """Tag-transition constraints implied by a tagging scheme.

    Args:
        id2label: Maps tag ids ``0..N-1`` to labels such as ``"B-PER"``, ``"I-PER"``,
            ``"E-LOC"``, ``"S-LOC"`` or ``"O"``. Keys may be ints or int-like strings
            (as found in a JSON config).
        scheme: A name of :data:`SCHEME_ALIASES`: ``"BIO"`` (alias ``"IOB2"``), ``"BIOES"``
            (alias ``"IOBES"``), ``"IOB1"``, ``"IO"`` (case-insensitive).

            * BIO: ``I-X`` only after ``B-X``/``I-X``; a sequence cannot start with ``I-X``.
            * BIOES: ``B-X``/``I-X`` must be followed by ``I-X``/``E-X``; ``E``/``S``/``O``
              by ``B-*``/``S-*``/``O``; start with ``B``/``S``/``O``; end with ``E``/``S``/``O``.
            * IOB1: ``B-X`` only after ``B-X``/``I-X``; a sequence cannot start with ``B-X``.
            * IO: everything allowed.

    Returns:
        ``(allowed, allowed_start, allowed_end)``: bool tensors of shape ``(N, N)``
        (indexed ``[from, to]``), ``(N,)`` and ``(N,)``.

    Raises:
        ValueError: on an unknown scheme, ids that are not ``0..N-1``, or a label that
            does not fit the scheme (the message names the label).
    """
    canonical = SCHEME_ALIASES.get(scheme.strip().upper())
    if canonical is None:
        raise ValueError(f"Unknown tagging scheme {scheme!r}; expected one of {sorted(SCHEME_ALIASES)}.")
    labels = {int(i): label for i, label in id2label.items()}
    num_tags = len(labels)
    if sorted(labels) != list(range(num_tags)):
        raise ValueError(f"id2label keys must be 0..{num_tags - 1}, got {sorted(labels)}.")
    tags = [_parse_label(labels[i], canonical) for i in range(num_tags)]

    outside = ("O", None)
    # Explicit CPU so the masks keep their values when called inside a meta-device context.
    return (
        torch.tensor([[transition_allowed(canonical, src, dst) for dst in tags] for src in tags], device="cpu"),
        torch.tensor([transition_allowed(canonical, outside, tag) for tag in tags], device="cpu"),
        torch.tensor([transition_allowed(canonical, tag, outside) for tag in tags], device="cpu"),
    )


def _compact(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Move each row's selected positions to the front, keeping their order.

    Args:
        mask: ``(B, T)`` bool.
        tensors: each ``(B, T, ...)``; gathered along dim 1 with the same permutation.

    Returns:
        The compacted mask ``(B, L)`` (left-aligned, ``L`` = most selected positions in
        any row) and the compacted tensors ``(B, L, ...)``.
    """
    # A stable sort on "not selected" puts selected positions first in original order.
    order = torch.sort((~mask).to(torch.uint8), dim=1, stable=True).indices
    max_len = int(mask.sum(dim=1).max()) if mask.numel() else 0
    order = order[:, :max_len]
    compacted = []
    for tensor in tensors:
        index = order.view(*order.shape, *([1] * (tensor.dim() - 2))).expand(-1, -1, *tensor.shape[2:])
        compacted.append(tensor.gather(1, index))
    return mask.gather(1, order), compacted


class ConditionalRandomField(nn.Module):
    """Linear-chain CRF over per-token emission scores.

    The learnable parameters are ``transitions (N, N)`` ([from, to]),
    ``start_transitions (N,)`` and ``end_transitions (N,)``. Optional constraints are
    kept as non-persistent bool buffers ``allowed (N, N)``, ``allowed_start (N,)`` and
    ``allowed_end (N,)``, so the state dict holds only the three parameters: rebuild
    the constraints from the config (e.g. with :func:`allowed_transitions`) when
    constructing the model.

    Under Transformers' meta-device loading, non-persistent buffers come back
    uninitialised; the owning model's ``_init_weights`` must call
    :meth:`reset_parameters` (or at least :meth:`reset_constraints`) on this module.
    The constraints are also kept as plain Python lists so they can be rebuilt then.

    The recursions run in ``promote_types(emissions.dtype, float32)`` with autocast
    disabled, so fp16/bf16 emissions or parameters are handled in float32.
    """

    def __init__(self, num_tags: int, allowed_transitions: Optional[Constraints] = None) -> None:
        """
        Args:
            num_tags: Number of tags ``N``.
            allowed_transitions: Optional ``(allowed (N, N), allowed_start (N,),
                allowed_end (N,))`` bool masks, as returned by :func:`allowed_transitions`;
                ``None`` allows everything.
        """
        super().__init__()
        if num_tags < 1:
            raise ValueError(f"num_tags must be positive, got {num_tags}.")
        self.num_tags = num_tags
        if allowed_transitions is None:
            allowed = [[True] * num_tags for _ in range(num_tags)]
            allowed_start = allowed_end = [True] * num_tags
        else:
            # Explicit CPU: Transformers builds models under a meta-device context, where tensors have no values.
            masks = [torch.as_tensor(m, dtype=torch.bool, device="cpu") for m in allowed_transitions]
            if [tuple(m.shape) for m in masks] != [(num_tags, num_tags), (num_tags,), (num_tags,)]:
                raise ValueError(
                    f"allowed_transitions must have shapes ({num_tags}, {num_tags}), ({num_tags},), ({num_tags},)."
                )
            allowed, allowed_start, allowed_end = (m.tolist() for m in masks)
        self._constraint_values: tuple[list[list[bool]], list[bool], list[bool]] = (allowed, allowed_start, allowed_end)

        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.register_buffer("allowed", torch.empty(num_tags, num_tags, dtype=torch.bool), persistent=False)
        self.register_buffer("allowed_start", torch.empty(num_tags, dtype=torch.bool), persistent=False)
        self.register_buffer("allowed_end", torch.empty(num_tags, dtype=torch.bool), persistent=False)
        self.reset_parameters()

    def extra_repr(self) -> str:
        return f"num_tags={self.num_tags}"

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialise the scores ~ U(-0.1, 0.1) and rebuild the constraint buffers."""
        # Looked up through ``nn.init`` at call time so Transformers' init guard can skip loaded weights.
        for param in (self.transitions, self.start_transitions, self.end_transitions):
            nn.init.uniform_(param, -0.1, 0.1)
        self.reset_constraints()

    @torch.no_grad()
    def reset_constraints(self) -> None:
        """Refill the constraint buffers from the masks given at construction."""
        for buffer, values in zip((self.allowed, self.allowed_start, self.allowed_end), self._constraint_values):
            buffer.copy_(torch.tensor(values, dtype=torch.bool, device=buffer.device))

    def _scores(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Constraint-penalised ``(transitions (N, N), start (N,), end (N,))`` in ``dtype``."""
        return tuple(
            torch.where(allowed, param.to(dtype), param.to(dtype) + FORBIDDEN_SCORE)
            for param, allowed in (
                (self.transitions, self.allowed),
                (self.start_transitions, self.allowed_start),
                (self.end_transitions, self.allowed_end),
            )
        )

    def _check_inputs(self, emissions: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        """Validate shapes and return the mask as ``(B, T)`` bool (all-true if ``None``)."""
        if emissions.dim() != 3 or emissions.shape[-1] != self.num_tags:
            raise ValueError(f"emissions must be (batch, seq, {self.num_tags}), got {tuple(emissions.shape)}.")
        if mask is None:
            return torch.ones(emissions.shape[:2], dtype=torch.bool, device=emissions.device)
        if mask.shape != emissions.shape[:2]:
            raise ValueError(f"mask must be {tuple(emissions.shape[:2])}, got {tuple(mask.shape)}.")
        return mask.bool()

    def neg_log_likelihood(
        self,
        emissions: torch.Tensor,
        tags: torch.Tensor,
        mask: Optional[torch.Tensor] = None,
        reduction: str = "sum",
    ) -> torch.Tensor:
        """Negative log-likelihood of the gold tags over the selected positions.

        Args:
            emissions: ``(B, T, N)`` per-token scores (any float dtype).
            tags: ``(B, T)`` long gold tag ids; values at unselected positions are
                ignored (e.g. ``-100``).
            mask: ``(B, T)`` positions taking part (any pattern per row, see module
                docstring); ``None`` selects every position.
            reduction: ``"none"`` -> ``(B,)``; ``"sum"`` -> scalar sum over rows;
                ``"mean"`` -> scalar sum divided by the number of rows with at least
                one selected position (0 if there are none).

        Returns:
            The NLL in ``promote_types(emissions.dtype, float32)``. Rows without
            selected positions contribute 0. A gold path that breaks a constraint
            costs about ``1e4`` per violation.

        Raises:
            ValueError: on bad shapes, an unknown reduction, or a selected tag outside ``0..N-1``.
        """
        if reduction not in ("none", "sum", "mean"):
            raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}.")
        mask = self._check_inputs(emissions, mask)
        if tags.shape != mask.shape:
            raise ValueError(f"tags must be {tuple(mask.shape)}, got {tuple(tags.shape)}.")
        selected_tags = tags[mask]
        if selected_tags.numel() and (selected_tags.min() < 0 or selected_tags.max() >= self.num_tags):
            raise ValueError(f"Selected tags must lie in 0..{self.num_tags - 1}.")

        dtype = torch.promote_types(emissions.dtype, torch.float32)
        with torch.autocast(device_type=emissions.device.type, enabled=False):
            mask, (emissions, tags) = _compact(mask, emissions.to(dtype), tags)
            # Padding tags (possibly -100) only need to be valid indices; their terms are masked out.
            tags = tags.clamp(0, self.num_tags - 1)
            nll = self._log_partition(emissions, mask) - self._path_score(emissions, tags, mask)

        if reduction == "none":
            return nll
        if reduction == "sum":
            return nll.sum()
        return nll.sum() / mask.any(dim=1).sum().clamp(min=1)

    def _path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Score of the given paths; inputs compacted: ``(B, L, N)``, ``(B, L)``, ``(B, L)`` -> ``(B,)``."""
        batch, length, _ = emissions.shape
        if length == 0:
            return emissions.new_zeros(batch)
        transitions, start, end = self._scores(emissions.dtype)
        weights = mask.to(emissions.dtype)
        score = (emissions.gather(2, tags.unsqueeze(2)).squeeze(2) * weights).sum(dim=1)
        score = score + (transitions[tags[:, :-1], tags[:, 1:]] * weights[:, 1:]).sum(dim=1)
        last_tags = tags.gather(1, (mask.sum(dim=1, keepdim=True) - 1).clamp(min=0)).squeeze(1)
        return score + (start[tags[:, 0]] + end[last_tags]) * weights[:, 0]

    def _log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Forward algorithm; inputs compacted: ``(B, L, N)``, ``(B, L)`` -> log Z ``(B,)``."""
        batch, length, _ = emissions.shape
        if length == 0:
            return emissions.new_zeros(batch)
        transitions, start, end = self._scores(emissions.dtype)
        # alpha[b, j]: log-sum of scores of all prefixes ending in tag j.
        alpha = start + emissions[:, 0]
        for step in range(1, length):
            stepped = torch.logsumexp(alpha.unsqueeze(2) + transitions + emissions[:, step].unsqueeze(1), dim=1)
            alpha = torch.where(mask[:, step].unsqueeze(1), stepped, alpha)
        return torch.logsumexp(alpha + end, dim=1) * mask[:, 0].to(emissions.dtype)

    @torch.no_grad()
    def viterbi_decode(self, emissions: torch.Tensor, mask: Optional[torch.Tensor] = None) -> list[list[int]]:
        """Highest-scoring tag sequence per row, respecting the constraints.

        Args:
            emissions: ``(B, T, N)`` per-token scores (any float dtype).
            mask: ``(B, T)`` positions taking part (any pattern per row); ``None``
                selects every position.

        Returns:
            ``B`` lists of tag ids, one per selected position of the row, in order
            (empty for rows with no selected position).
        """
        mask = self._check_inputs(emissions, mask)
        dtype = torch.promote_types(emissions.dtype, torch.float32)
        with torch.autocast(device_type=emissions.device.type, enabled=False):
            mask, (emissions,) = _compact(mask, emissions.to(dtype))
            batch, length, num_tags = emissions.shape
            if length == 0:
                return [[] for _ in range(batch)]
            transitions, start, end = self._scores(dtype)
            identity = torch.arange(num_tags, device=emissions.device)

            score = start + emissions[:, 0]
            backpointers = []
            for step in range(1, length):
                best, best_prev = (score.unsqueeze(2) + transitions).max(dim=1)
                selected = mask[:, step].unsqueeze(1)
                score = torch.where(selected, best + emissions[:, step], score)
                # Past a row's end, pointing every tag at itself carries its final tag back unchanged.
                backpointers.append(torch.where(selected, best_prev, identity))

            path = [(score + end).argmax(dim=1)]
            for step_pointers in reversed(backpointers):
                path.append(step_pointers.gather(1, path[-1].unsqueeze(1)).squeeze(1))
            best_paths = torch.stack(path[::-1], dim=1).tolist()
        lengths = mask.sum(dim=1).tolist()
        return [row[:n] for row, n in zip(best_paths, lengths)]
