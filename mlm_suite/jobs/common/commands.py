"""The ``mlm-suite`` commands: each name, the module whose ``main(argv)`` runs it and its one-line help.

Read by the command line (:mod:`mlm_suite.cli`) and by ``mlm-suite seeds``, which runs a fine-tuning command once
per seed; modules are imported only when their command runs, so ``mlm-suite --help`` stays fast. See
docs/command_line.md.
"""

from __future__ import annotations

from mlm_suite.conversion import FAMILY_NAMES

# command → (module with main(argv), one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "quickstart": ("mlm_suite.jobs.quickstart", "build a small model, save it, reload it through the Auto classes, compare outputs"),
    "convert": ("mlm_suite.jobs.convert", f"convert a Hugging Face {FAMILY_NAMES} folder into an mlm_suite folder"),
    "export-native": ("mlm_suite.jobs.export_native", "write an mlm_suite folder as the transformers class (BertFor*, RobertaFor*, ...) that computes the same outputs"),
    "export-onnx": ("mlm_suite.jobs.export_onnx", "export a checkpoint to ONNX and check it against the eager model"),
    "prepare-data": ("mlm_suite.jobs.prepare_data", "tokenise (and pack) a corpus once into Arrow shards for pretrain --prepared_data"),
    "pretrain": ("mlm_suite.jobs.pretrain", "MLM (+NSP) pretraining with the HF Trainer"),
    "finetune-ner": ("mlm_suite.jobs.finetune_ner", "token classification (NER/POS) fine-tuning"),
    "finetune-cls": ("mlm_suite.jobs.finetune_cls", "sequence classification fine-tuning"),
    "finetune-pair": ("mlm_suite.jobs.finetune_pair", "sentence-pair classification / regression fine-tuning"),
    "finetune-retrieval": ("mlm_suite.jobs.finetune_retrieval", "bi-encoder retrieval fine-tuning (in-batch negatives)"),
    "seeds": ("mlm_suite.jobs.seeds", "repeat a fine-tuning job over seeds; mean ± sd of its scores"),
    "wsd": ("mlm_suite.jobs.wsd", "nearest-centroid word-sense disambiguation with contextual embeddings"),
    "anisotropy": ("mlm_suite.jobs.anisotropy", "anisotropy of contextual embeddings per layer, raw and z-scored"),
}

__all__ = ["SUBCOMMANDS"]
