"""The module paths of mlm_suite 0.1's flat layout, still importable after the regrouping by concern.

``import mlm_suite.metrics`` (or ``from mlm_suite.metrics import entity_scores``) keeps working: a meta-path
finder serves each old name as a module that looks its attributes up in the new module(s), and warns once
(``DeprecationWarning``) where the code now lives. New code imports the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

#: old module → the module(s) its contents moved to (``mlm_suite.retrieval`` was split in two)
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "mlm_suite.alignment": ("mlm_suite.data.alignment",),
    "mlm_suite.embeddings": ("mlm_suite.analysis.embeddings",),
    "mlm_suite.freezing": ("mlm_suite.training.freezing",),
    "mlm_suite.metric_modules": ("mlm_suite.evaluation.metric_modules",),
    "mlm_suite.metrics": ("mlm_suite.evaluation.entities",),
    "mlm_suite.mlm_metrics": ("mlm_suite.evaluation.masked_lm",),
    "mlm_suite.model_card": ("mlm_suite.cards",),
    "mlm_suite.plots": ("mlm_suite.evaluation.plots",),
    "mlm_suite.resources": ("mlm_suite.data.resources",),
    "mlm_suite.retrieval": ("mlm_suite.training.retrieval", "mlm_suite.evaluation.retrieval"),
    "mlm_suite.tagging": ("mlm_suite.data.tagging",),
    "mlm_suite.tokenization": ("mlm_suite.data.tokenization",),
    "mlm_suite.trainer": ("mlm_suite.training.trainer",),
    "mlm_suite.training_schedules": ("mlm_suite.training.schedules",),
    "mlm_suite.wordnet": ("mlm_suite.analysis.wordnet",),
}
# mlm_suite.training (the training controls) became the package mlm_suite.training, which re-exports them.


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001, ANN201 (importlib's signature)
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in MOVED_MODULES else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        targets = MOVED_MODULES[spec.name]
        warnings.warn(
            f"{spec.name} moved to {' and '.join(targets)}; the old path will be removed in mlm_suite 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        modules = [importlib.import_module(target) for target in targets]
        alias = types.ModuleType(spec.name, f"Moved to {', '.join(targets)}.")

        def __getattr__(name: str) -> object:
            for module in modules:
                if hasattr(module, name):
                    return getattr(module, name)
            raise AttributeError(f"module {spec.name!r} (moved to {', '.join(targets)}) has no attribute {name!r}")

        alias.__getattr__ = __getattr__
        alias.__dir__ = lambda: sorted({name for module in modules for name in dir(module)})
        alias.__all__ = [name for module in modules for name in getattr(module, "__all__", ())]
        return alias

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # the alias resolves its attributes lazily


def install() -> None:
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
