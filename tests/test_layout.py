"""The package layout by concern (issue 26), and the module paths of the old flat layout, which keep working."""

import importlib
import pkgutil
import sys
import warnings
from pathlib import Path

import pytest

import mlm_suite
from mlm_suite._moved_modules import MOVED_MODULES

PACKAGE = Path(mlm_suite.__file__).parent


def test_every_module_imports_without_an_old_path():
    """No module of the package (nor the CLI's jobs) goes through a moved path: they would warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for module in pkgutil.walk_packages(mlm_suite.__path__, "mlm_suite."):
            if ".metric_modules." not in module.name:  # evaluate imports those scripts from its own cache
                importlib.import_module(module.name)


def test_concerns_are_packages_not_loose_modules():
    loose = sorted(path.stem for path in PACKAGE.glob("*.py"))
    assert loose == ["__init__", "_moved_modules", "cli", "convert", "errors", "export"]
    packages = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
    assert packages == ["analysis", "cards", "data", "evaluation", "jobs", "model", "training"]


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_old_module_paths_still_import(old):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to"):
        alias = importlib.import_module(old)
    targets = [importlib.import_module(target) for target in MOVED_MODULES[old]]
    public = [name for target in targets for name in getattr(target, "__all__", [])] or [
        name for name in vars(targets[0]) if not name.startswith("_")
    ]
    assert public
    for name in public:  # the same objects, not copies
        owner = next(target for target in targets if hasattr(target, name))
        assert getattr(alias, name) is getattr(owner, name), name
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        alias.no_such_name


def test_old_from_imports_of_the_readme_still_work():
    """What users wrote with 0.1: ``from mlm_suite.X import name`` and ``from mlm_suite import resources``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from mlm_suite import resources
        from mlm_suite.metrics import entity_scores
        from mlm_suite.retrieval import RetrievalTrainer, evaluate_retrieval
        from mlm_suite.training import TimeBudgetCallback

    from mlm_suite.data.resources import minilm_dir
    from mlm_suite.evaluation.entities import entity_scores as moved_entity_scores
    from mlm_suite.evaluation.retrieval import evaluate_retrieval as moved_evaluate_retrieval
    from mlm_suite.training.controls import TimeBudgetCallback as moved_callback
    from mlm_suite.training.retrieval import RetrievalTrainer as moved_trainer

    assert resources.minilm_dir is minilm_dir and entity_scores is moved_entity_scores
    assert RetrievalTrainer is moved_trainer and evaluate_retrieval is moved_evaluate_retrieval
    assert TimeBudgetCallback is moved_callback
