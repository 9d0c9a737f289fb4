"""Padding-free bookkeeping: :class:`SequenceLayout` says where the real tokens of a batch are and which of them
attend to each other, built once per forward pass from the masks, from a flattened batch's offsets, or (under
tracing without offsets) as a dense grid with masks. Part of the remote-code payload: it imports only torch.
See docs/models.md#flattened-batches-torchcompile-and-export.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def first_real_column(real: torch.Tensor) -> torch.Tensor:
    """``(batch, seq)`` bool → ``(batch, 1)``: the column of each row's first real token (0 for a row of pads), where a
    left-padded row begins."""
    return real.to(torch.uint8).argmax(dim=1, keepdim=True)


def segment_starts(
    real: torch.Tensor, position_ids: torch.Tensor | None, document_ids: torch.Tensor | None
) -> torch.Tensor:
    """``(batch, seq)`` bool: the first real token of each row, and wherever a position id returns to 0 or the document changes."""
    starts = real & (real.cumsum(dim=1) == 1)
    if position_ids is not None:
        starts |= real & (position_ids == 0)
    if document_ids is not None:
        changed = torch.ones_like(starts)
        changed[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
        starts |= real & changed
    return starts


@dataclass
class SequenceLayout:
    """Where the tokens of a ``(batch, seq)`` input are, and how they group into attention segments.

    The encoder works on a flat ``(total, hidden)`` tensor of tokens; attention is confined to each
    segment (a sequence, or one document of a packed row). Flat token order is row-major over the real
    cells, so each segment is a contiguous run of flat tokens: ``cu_seqlens[i]:cu_seqlens[i + 1]``
    (``cu_seqlens`` is ``None`` only in the traced dense layout, whose segments are hidden inside
    ``attention_allowed``). Attention kernels read the segments as a padded grid (:meth:`to_segments`
    with ``attention_allowed``) or, variable-length ones, straight from the flat tensor with
    ``cu_seqlens`` and ``max_segment_len``.
    """

    batch_size: int
    seq_len: int
    positions: torch.Tensor  # (total,) position id of every token
    max_segment_len: int
    cu_seqlens: torch.Tensor | None = None  # (num_segments + 1,) int32 segment offsets in flat token order
    token_index: torch.Tensor | None = None  # (total,) index into batch*seq; None: every cell is a token
    segment_index: torch.Tensor | None = None  # (total,) index into num_segments*max_segment_len; None: segments are rows
    key_padding_mask: torch.Tensor | None = None  # (num_segments, max_segment_len) bool, True = real; None: all real
    # Broadcastable to (num_segments, heads, len, len), True = may attend; None: every cell may.
    attention_allowed: torch.Tensor | None = None
    real_cells: torch.Tensor | None = None  # traced dense layout only: (batch, seq) bool, pads are False
    segment_of_token: torch.Tensor | None = None  # from_offsets only: (total,) segment of each flat token

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def from_inputs(
        cls,
        shape: tuple[int, int],
        device: torch.device,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        count_real_tokens: bool = False,
    ) -> "SequenceLayout":
        """The padding-free layout read off the masks (host synchronisations: sizes depend on values).

        Segments start at the first real token of each row, wherever ``position_ids`` returns to 0
        (packed rows) and wherever ``document_ids`` changes. Without explicit ``position_ids``,
        tokens take their column counted from the row's first real token as position (BERT's column,
        which a left-padded row would otherwise start past its pads with), or their offset within their
        document when ``document_ids`` is given, or with ``count_real_tokens`` their offset within their
        segment (as RoBERTa counts the tokens that are not pads).
        """
        batch_size, seq_len = shape
        columns = torch.arange(seq_len, device=device).expand(batch_size, seq_len)
        real = torch.ones(shape, dtype=torch.bool, device=device) if attention_mask is None else attention_mask.bool()
        starts = segment_starts(real, position_ids, document_ids)
        packed = bool((starts.sum(dim=1) > 1).any())
        if not packed and bool(real.all()):
            positions = columns if position_ids is None else position_ids
            cu_seqlens = torch.arange(0, (batch_size + 1) * seq_len, seq_len, device=device, dtype=torch.int32)
            return cls(batch_size, seq_len, positions.reshape(-1), seq_len, cu_seqlens)

        token_index = real.reshape(-1).nonzero().squeeze(1)  # (total,)
        segment_of_token = starts.reshape(-1)[token_index].cumsum(0) - 1  # (total,)
        segment_lengths = torch.bincount(segment_of_token)  # (num_segments,)
        max_segment_len = int(segment_lengths.max()) if segment_lengths.numel() else 0  # 0: every row is padding
        if position_ids is not None:
            positions = position_ids.reshape(-1)[token_index]
        elif document_ids is not None or count_real_tokens:
            positions = None  # the offsets within the segments, computed below
        else:
            positions = (columns - first_real_column(real)).reshape(-1)[token_index]
        return cls._from_lengths(
            batch_size, seq_len, segment_lengths, max_segment_len, positions, token_index, segment_of_token
        )

    @classmethod
    def from_offsets(
        cls,
        shape: tuple[int, int],
        cu_seqlens: torch.Tensor,
        max_segment_len: int,
        position_ids: torch.Tensor | None = None,
    ) -> "SequenceLayout":
        """The layout of an already flattened ``(1, total)`` batch; nothing here reads tensor values.

        Args:
            shape: ``(1, total)``.
            cu_seqlens: ``(num_segments + 1,)`` offsets, ``0, len_0, len_0 + len_1, ..., total``.
            max_segment_len: the longest segment, or any larger value (a bucketed length keeps
                ``torch.compile`` from specialising on every new maximum).
            position_ids: ``(1, total)``; default: the offset of each token within its segment.
        """
        batch_size, total = shape
        if batch_size != 1:
            raise ValueError(
                f"cu_seq_lens_q describes a flattened batch of shape (1, total tokens), got input of shape {tuple(shape)}"
            )
        device = cu_seqlens.device
        offsets = cu_seqlens.long()
        flat = torch.arange(total, device=device)
        # Segment of each token without a data-dependent size: the number of segment ends at or before it.
        segment_of_token = torch.searchsorted(offsets[1:], flat, right=True)  # (total,)
        positions = None if position_ids is None else position_ids.reshape(-1)
        lengths = offsets[1:] - offsets[:-1]  # (num_segments,)
        return cls._from_lengths(1, total, lengths, max_segment_len, positions, None, segment_of_token, cu_seqlens)

    @classmethod
    def _from_lengths(
        cls,
        batch_size: int,
        seq_len: int,
        segment_lengths: torch.Tensor,
        max_segment_len: int,
        positions: torch.Tensor | None,
        token_index: torch.Tensor | None,
        segment_of_token: torch.Tensor,
        cu_seqlens: torch.Tensor | None = None,
    ) -> "SequenceLayout":
        """The grid bookkeeping shared by the padding-free layouts, from the segment of every flat token."""
        device = segment_of_token.device
        if cu_seqlens is None:
            cu_seqlens = F.pad(segment_lengths.cumsum(0), (1, 0)).to(torch.int32)
        offset_in_segment = torch.arange(segment_of_token.numel(), device=device) - cu_seqlens.long()[segment_of_token]
        segment_index = segment_of_token * max_segment_len + offset_in_segment  # (total,)
        cells = torch.arange(max_segment_len, device=device)
        key_padding_mask = cells[None, :] < segment_lengths[:, None]  # (num_segments, max_segment_len)
        return cls(
            batch_size,
            seq_len,
            offset_in_segment if positions is None else positions,
            max_segment_len,
            cu_seqlens,
            token_index,
            segment_index,
            key_padding_mask,
            key_padding_mask[:, None, None, :],
            segment_of_token=segment_of_token if token_index is None else None,
        )

    @classmethod
    def traced_dense(
        cls,
        shape: tuple[int, int],
        device: torch.device,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        count_real_tokens: bool = False,
    ) -> "SequenceLayout":
        """For ``torch.compile`` / ``torch.export`` without offsets: every cell is computed, masks keep segments apart.

        Shapes depend only on the input's shape, so tracing needs no data-dependent size. Real
        tokens get what the padding-free layouts give them; pad outputs are zeroed by :meth:`pad`.
        """
        batch_size, seq_len = shape
        columns = torch.arange(seq_len, device=device).expand(batch_size, seq_len)
        real = torch.ones(shape, dtype=torch.bool, device=device) if attention_mask is None else attention_mask.bool()
        if position_ids is None and document_ids is None:
            allowed = None if attention_mask is None else real[:, None, None, :]  # (batch, 1, 1, seq)
            # Pad cells before a row's first real token get position 0: computed, never read.
            positions = (real.cumsum(dim=1) - 1) if count_real_tokens else columns - first_real_column(real)
            positions = positions.clamp(min=0)
        else:
            starts = segment_starts(real, position_ids, document_ids)
            segment = starts.cumsum(dim=1)  # (batch, seq): segment number within the row, 1-based at real tokens
            allowed = (segment[:, :, None] == segment[:, None, :]) & real[:, None, :]  # (batch, seq, seq)
            allowed = allowed[:, None]  # (batch, 1, seq, seq)
            if position_ids is not None:
                positions = position_ids
            else:  # offset within the document: column minus the column where the segment started
                positions = columns - (starts * columns).cummax(dim=1).values
        return cls(
            batch_size,
            seq_len,
            positions.reshape(-1),
            seq_len,
            attention_allowed=allowed,
            real_cells=None if attention_mask is None else real,
        )

    # ---- properties ----------------------------------------------------------------------------
    @property
    def num_segments(self) -> int:
        return self.batch_size if self.cu_seqlens is None else self.cu_seqlens.shape[0] - 1

    @property
    def flattened(self) -> bool:
        """Built from offsets: the segments are the examples of the batch (poolers and heads work per segment)."""
        return self.segment_of_token is not None

    # ---- moving tokens between layouts -------------------------------------------------------
    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """``(batch, seq, ...)`` → ``(total, ...)``: keep the tokens the layers compute."""
        flat = padded.reshape(self.batch_size * self.seq_len, *padded.shape[2:])
        return flat if self.token_index is None else flat[self.token_index]

    def pad(self, flat: torch.Tensor) -> torch.Tensor:
        """``(total, ...)`` → ``(batch, seq, ...)``, zeros at pad positions."""
        if self.token_index is not None:
            full = flat.new_zeros(self.batch_size * self.seq_len, *flat.shape[1:])
            flat = full.index_copy(0, self.token_index, flat)
        padded = flat.view(self.batch_size, self.seq_len, *flat.shape[1:])
        if self.real_cells is not None:
            padded = padded * self.real_cells.view(self.batch_size, self.seq_len, *([1] * (flat.dim() - 1)))
        return padded

    def token_of_cell(self, cells: torch.Tensor) -> torch.Tensor:
        """Flat ``batch * seq`` indices of real cells → their flat token indices."""
        if self.token_index is None:
            return cells
        lookup = torch.zeros(self.batch_size * self.seq_len, dtype=torch.long, device=cells.device)
        lookup[self.token_index] = torch.arange(self.token_index.numel(), device=cells.device)
        return lookup[cells]

    def to_segments(self, flat: torch.Tensor) -> torch.Tensor:
        """``(total, ...)`` → ``(num_segments, max_segment_len, ...)`` grid for attention."""
        if self.segment_index is None:
            return flat.view(self.batch_size, self.seq_len, *flat.shape[1:])
        grid = flat.new_zeros(self.num_segments * self.max_segment_len, *flat.shape[1:])
        grid = grid.index_copy(0, self.segment_index, flat)
        return grid.view(self.num_segments, self.max_segment_len, *flat.shape[1:])

    def from_segments(self, grid: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """``(num_segments, max_segment_len, ...)`` → ``(total, ...)``, or ``(len(tokens), ...)`` for the flat indices ``tokens``."""
        flat = grid.reshape(-1, *grid.shape[2:])
        if self.segment_index is None:
            return flat if tokens is None else flat[tokens]
        return flat[self.segment_index if tokens is None else self.segment_index[tokens]]

    def allowed_within(self, window: int | None) -> torch.Tensor | None:
        """``attention_allowed``, less (with a ``window``) the keys more than ``window`` positions from their query.

        The grid's cells are a segment's tokens in order (the traced dense layout's: a row's columns, whose
        segments are contiguous runs), so the distance of two tokens of a segment is that of their cells.
        """
        if window is None:
            return self.attention_allowed
        # A window that holds every segment whole leaves the mask as it is (not under tracing, where the length is
        # symbolic and comparing it would pin it).
        if not torch.compiler.is_compiling() and window >= self.max_segment_len - 1:
            return self.attention_allowed
        cells = torch.arange(self.max_segment_len, device=self.positions.device)
        near = (cells[:, None] - cells[None, :]).abs() <= window  # (len, len)
        return near if self.attention_allowed is None else self.attention_allowed & near

    def additive_attention_mask(self, dtype: torch.dtype, window: int | None = None) -> torch.Tensor | None:
        """Bias (broadcastable to ``(segments, heads, len, len)``) hiding what a query may not see: other segments,
        pads and, with a ``window`` (a sliding-window layer), the keys more than ``window`` positions away.

        It uses the dtype's most negative finite value, not -inf, so softmax stays finite in
        fp16/bf16 even for the grid's empty query rows (which are discarded afterwards).
        """
        allowed = self.allowed_within(window)
        if allowed is None:
            return None
        bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        return bias.masked_fill_(~allowed, torch.finfo(dtype).min)

    # ---- per-segment reductions (padding-free layouts: cu_seqlens is set) ----------------------
    def token_segments(self) -> torch.Tensor:
        """``(total,)``: the segment of every flat token."""
        if self.segment_of_token is not None:
            return self.segment_of_token
        if self.segment_index is not None:
            return torch.div(self.segment_index, self.max_segment_len, rounding_mode="floor")
        # Neither padding nor packing: the segments are the rows.
        return torch.arange(self.batch_size * self.seq_len, device=self.positions.device) // self.seq_len

    def segment_first(self, flat: torch.Tensor) -> torch.Tensor:
        """``(total, ...)`` → ``(num_segments, ...)``: the first token of each segment (``[CLS]``)."""
        return flat[self.cu_seqlens[:-1].long()]

    def segment_mean(self, flat: torch.Tensor) -> torch.Tensor:
        """``(total, hidden)`` → ``(num_segments, hidden)``: the mean over each segment's tokens."""
        sums = flat.new_zeros(self.num_segments, flat.shape[1]).index_add(0, self.token_segments(), flat)
        lengths = (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).clamp(min=1)
        return sums / lengths[:, None].to(flat.dtype)

    def segment_max(self, flat: torch.Tensor) -> torch.Tensor:
        """``(total, hidden)`` → ``(num_segments, hidden)``: the element-wise maximum over each segment's tokens."""
        index = self.token_segments()[:, None].expand_as(flat)
        empty = flat.new_full((self.num_segments, flat.shape[1]), torch.finfo(flat.dtype).min)
        return empty.scatter_reduce(0, index, flat, reduce="amax", include_self=False)

    # ---- attention weights in the user's layout ------------------------------------------------
    def _attention_cells(self) -> tuple[torch.Tensor, ...]:
        """Index tensors pairing each real ``(segment, query, key)`` grid cell with its ``(row, query, key)`` batch cell."""
        device = self.positions.device
        token_index = self.token_index
        if token_index is None:
            token_index = torch.arange(self.batch_size * self.seq_len, device=device)
        token_of_cell = torch.zeros(self.num_segments * self.max_segment_len, dtype=torch.long, device=device)
        token_of_cell[self.segment_index] = token_index
        token_of_cell = token_of_cell.view(self.num_segments, self.max_segment_len)  # flat batch*seq index
        row = token_of_cell[:, :1].reshape(-1) // self.seq_len  # (num_segments,): a segment lies within one row
        column = token_of_cell % self.seq_len  # (num_segments, max_segment_len)
        real = self.key_padding_mask
        segment, query, key = (real[:, :, None] & real[:, None, :]).nonzero(as_tuple=True)
        return segment, query, key, row[segment], column[segment, query], column[segment, key]

    def attention_to_batch(self, weights: torch.Tensor) -> torch.Tensor:
        """``(num_segments, heads, len, len)`` weights → ``(batch, heads, seq, seq)``, zero between segments and at pads."""
        if self.segment_index is None:
            if self.real_cells is not None:  # traced dense: pad query rows hold weights over real keys
                weights = weights * self.real_cells[:, None, :, None]
            return weights
        segment, query, key, row, query_column, key_column = self._attention_cells()
        out = weights.new_zeros(self.batch_size, weights.shape[1], self.seq_len, self.seq_len)
        out[row, :, query_column, key_column] = weights[segment, :, query, key]
        return out

    def attention_from_batch(self, weights: torch.Tensor) -> torch.Tensor:
        """Inverse of ``attention_to_batch``: ``(batch, heads, seq, seq)`` → ``(num_segments, heads, len, len)``."""
        if self.segment_index is None:
            return weights
        segment, query, key, row, query_column, key_column = self._attention_cells()
        out = weights.new_zeros(self.num_segments, weights.shape[1], self.max_segment_len, self.max_segment_len)
        out[segment, :, query, key] = weights[row, :, query_column, key_column]
        return out


__all__ = ["SequenceLayout", "first_real_column", "segment_starts"]
