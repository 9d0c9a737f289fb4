"""The package layout by concern: every module imports, concerns are packages, and no old path survives."""

import importlib
import pkgutil
from pathlib import Path

import pytest

import mlm_suite

PACKAGE = Path(mlm_suite.__file__).parent


def test_every_module_imports():
    for module in pkgutil.walk_packages(mlm_suite.__path__, "mlm_suite."):
        if ".metric_modules." not in module.name:  # evaluate imports those scripts from its own cache
            importlib.import_module(module.name)


def test_concerns_are_packages_not_loose_modules():
    loose = sorted(path.stem for path in PACKAGE.glob("*.py"))
    assert loose == ["__init__", "cli", "convert", "errors", "export"]
    packages = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
    assert packages == ["analysis", "cards", "data", "evaluation", "jobs", "model", "training"]


@pytest.mark.parametrize("old", ["mlm_suite.metrics", "mlm_suite.resources", "mlm_suite.trainer", "mlm_suite.wordnet"])
def test_the_flat_layout_of_the_first_days_is_gone(old):
    """Nothing was released with those paths: they are not served by any alias."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
