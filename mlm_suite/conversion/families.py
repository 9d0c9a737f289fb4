"""The one list of the families mlm_suite converts: :data:`REGISTRY`, whatever names or counts them (help texts,
export-native's choices and the order it tries them in, the docs' family table, the tests) reads it.
"""

from __future__ import annotations

from mlm_suite.conversion.bert import BERT
from mlm_suite.conversion.core import Family
from mlm_suite.conversion.distilbert import DISTILBERT
from mlm_suite.conversion.electra import ELECTRA
from mlm_suite.conversion.modernbert import MODERNBERT
from mlm_suite.conversion.roberta import ROBERTA, XLM_ROBERTA

#: Every family, in the order export-native tries them for a folder that names none (BERT first: the MiniLM folders
#: the jobs start from are BERT's).
REGISTRY: tuple[Family, ...] = (BERT, ROBERTA, XLM_ROBERTA, DISTILBERT, ELECTRA, MODERNBERT)
#: The families by ``config.json``'s ``model_type``.
FAMILIES: dict[str, Family] = {model_type: family for family in REGISTRY for model_type in family.model_types}
#: Their names as a sentence writes them ("BERT, RoBERTa, ... or ModernBERT"), for help texts and messages.
FAMILY_NAMES = ", ".join(family.name for family in REGISTRY[:-1]) + f" or {REGISTRY[-1].name}"
#: The families export-native writes (by ``model_type``), and those it tries for a folder that names none, in order.
EXPORTED = tuple(family.model_types[0] for family in REGISTRY if family.exports)
TRIED_BY_EXPORT = tuple(family.model_types[0] for family in REGISTRY if family.exports and family.tried_by_export)

__all__ = ["EXPORTED", "FAMILIES", "FAMILY_NAMES", "REGISTRY", "TRIED_BY_EXPORT"]
