"""Raw text split into words with their character offsets: the package's one word splitter, :func:`split_words`.

Two patterns, for two different words:

* :data:`BERT_WORD_PATTERN` (the default): runs of word characters, or any other non-space character alone, as
  BERT's basic tokenizer pre-splits text ("don't" is ``don ' t``), so no word shares a sub-token with its neighbour.
  The analyses take one contextual vector per such word (anisotropy, WSD), the units the encoder itself sees.
* :data:`COMPOUND_WORD_PATTERN`: the same, except that an apostrophe or hyphen between word characters stays inside
  its word ("don't", "New-York"): the words :func:`~mlm_suite.data.finetuning.alignment.predict_entities` labels, so
  that an entity never ends inside one.
"""

from __future__ import annotations

import re

__all__ = ["BERT_WORD_PATTERN", "COMPOUND_WORD_PATTERN", "split_words"]

BERT_WORD_PATTERN = r"\w+|[^\w\s]"
COMPOUND_WORD_PATTERN = r"\w+(?:['’\-]\w+)*|[^\w\s]"


def split_words(text: str, pattern: str = BERT_WORD_PATTERN) -> list[tuple[str, int, int]]:
    """The words of ``text`` (every match of ``pattern``) as ``(word, start, end)``: ``text[start:end] == word``."""
    return [(match.group(), match.start(), match.end()) for match in re.finditer(pattern, text)]
