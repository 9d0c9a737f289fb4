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
    assert loose == ["__init__", "cli", "convert", "errors", "export", "model_files"]
    packages = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
    assert packages == ["analysis", "cards", "data", "evaluation", "jobs", "model", "training"]


@pytest.mark.parametrize("old", ["mlm_suite.metrics", "mlm_suite.resources", "mlm_suite.trainer", "mlm_suite.wordnet"])
def test_the_flat_layout_of_the_first_days_is_gone(old):
    """Nothing was released with those paths: they are not served by any alias."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_only_the_jobs_take_a_jobs_argument_object():
    """Library code takes explicit parameters; Trainer callbacks and overrides get transformers' TrainingArguments."""
    import ast

    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "jobs" or path.name == "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            parameters = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            names = [parameter.arg for parameter in parameters]
            for index, parameter in enumerate(parameters):
                annotation = ast.unparse(parameter.annotation) if parameter.annotation else ""
                callback = names[index + 1 : index + 2] == ["state"]  # TrainerCallback.on_*(self, args, state, ...)
                if parameter.arg in ("model_args", "data_args", "hub_args") or (
                    parameter.arg == "args" and "TrainingArguments" not in annotation and not callback
                ):
                    offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}({parameter.arg})")
    assert not offenders, offenders


def test_one_module_per_command_and_no_job_imports_another():
    import ast

    from mlm_suite.jobs.commands import SUBCOMMANDS

    commands = {module for module, _ in SUBCOMMANDS.values()}
    assert commands == {"mlm_suite.jobs." + name.replace("-", "_") for name in SUBCOMMANDS}  # named as the command
    for module in commands:
        path = PACKAGE / "jobs" / f"{module.rsplit('.', 1)[1]}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                     for alias in node.names}
        assert not (imported & commands) - {module}, f"{module} imports {sorted((imported & commands) - {module})}"


def test_the_trainers_have_one_log_path():
    """``JobTrainer.log`` is the only override of ``Trainer.log``: a subclass or mix-in adds its values through
    ``JobTrainer.extra_log_values``, so what a log entry holds, and in which order, is decided in one place."""
    import ast

    overrides = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "log" for item in node.body
            ):
                overrides.append(f"{path.relative_to(PACKAGE.parent).as_posix()}:{node.name}")
    assert overrides == ["mlm_suite/training/trainer.py:JobTrainer"]
