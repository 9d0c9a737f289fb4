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
    assert loose == ["__init__", "cli", "errors", "export", "model_files"]
    packages = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
    assert packages == ["analysis", "cards", "conversion", "data", "evaluation", "jobs", "model", "training"]


def test_every_package_ships_in_the_wheel():
    """pyproject.toml lists the packages the wheel holds: one left out imports from the checkout and not once installed."""
    import tomllib

    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    found = {".".join(path.parent.relative_to(PACKAGE.parent).parts) for path in PACKAGE.rglob("__init__.py")}
    assert not found - listed, f"pyproject.toml's [tool.setuptools] packages lacks {sorted(found - listed)}"


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


#: Where argument objects may be assigned to: while they are parsed (each dataclass's own ``__post_init__``, the
#: parser's device defaults) and in the copy a job derives for its Trainer.
PARSING = {("jobs/arguments.py", "parse_arguments"), ("jobs/arguments.py", "feed_the_device"),
           ("jobs/arguments.py", "derived_training_arguments")}


def _argument_object(node) -> bool:
    """``args``, ``training_args``, ``data_args``, ``self.args`` ...: a name for an argument dataclass."""
    import ast

    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr == "args"
    return isinstance(node, ast.Name) and (node.id in ("args", "arguments") or node.id.endswith("_args"))


def test_no_function_assigns_to_an_argument_object_after_parsing():
    """A job resolves what it derives into values of its own (the pretraining plan, locals, a derived copy): the
    argument objects stay as parsed, so what a flag means is read in one place."""
    import ast

    offenders = []
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if function.name == "__post_init__" or (where, function.name) in PARSING:
                continue
            for node in ast.walk(function):
                targets = []
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                    targets = [node.target]
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                    targets = [ast.Attribute(value=node.args[0], attr="?")]
                for target in targets:
                    for element in (target.elts if isinstance(target, ast.Tuple) else [target]):
                        while isinstance(element, ast.Subscript):  # args.field[key] = ... changes args.field
                            element = element.value
                        if isinstance(element, ast.Attribute) and _argument_object(element.value):
                            offenders.append(f"{where}:{node.lineno} {function.name}: {ast.unparse(element)}")
    assert not offenders, "\n".join(offenders)
