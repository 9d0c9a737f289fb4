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


# The modules whose argument objects stay as parsed: what they derive lives in locals or in copies
# (mlm_suite.jobs.arguments.derived_training_arguments), as transformers' run_*.py keep the checkpoint to resume
# from in a local.
PARSED_ARGUMENTS_KEPT = [
    "jobs/anisotropy.py", "jobs/finetune_cls.py", "jobs/finetune_ner.py", "jobs/finetune_pair.py",
    "jobs/finetune_retrieval.py", "jobs/finetune_training.py", "jobs/sequence_classification.py", "jobs/wsd.py",
    "training/controls.py",
]


def assignments_to_arguments(source: str) -> list[str]:
    """``line: statement`` for each assignment to an attribute of an argument object (``args``, ``*_args``), or
    ``setattr`` on one, outside a ``__post_init__`` (where a dataclass completes its own values)."""
    import ast

    def argument_object(node: ast.AST) -> bool:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return isinstance(node, ast.Name) and (node.id == "args" or node.id.endswith("_args"))

    tree = ast.parse(source)
    own_values = {id(node) for function in ast.walk(tree)
                  if isinstance(function, ast.FunctionDef) and function.name == "__post_init__"
                  for node in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        if id(node) in own_values:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        stored = [target for target in targets for part in ast.walk(target)
                  if isinstance(part, (ast.Attribute, ast.Subscript)) and argument_object(part)]
        set_by_name = (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                       and node.args and argument_object(node.args[0]))
        if stored or set_by_name:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_assignment_finder_finds_what_a_job_would_change_in_its_arguments():
    source = ("def main(training_args, args):\n    training_args.resume_from_checkpoint = 'x'\n"
              "    args.accelerator_config.non_blocking = True\n    setattr(args, 'seed', 1)\n    checkpoint = 'x'\n"
              "class A:\n    def __post_init__(self, args=None):\n        self.seed = 1\n")
    assert assignments_to_arguments(source) == [
        "2: training_args.resume_from_checkpoint = 'x'", "3: args.accelerator_config.non_blocking = True",
        "4: setattr(args, 'seed', 1)",
    ]


@pytest.mark.parametrize("module", PARSED_ARGUMENTS_KEPT)
def test_jobs_keep_their_arguments_as_parsed(module):
    """Only ``__post_init__`` (and the parsing of mlm_suite/jobs/arguments.py) sets values on argument objects."""
    assert assignments_to_arguments((PACKAGE / module).read_text(encoding="utf-8")) == []
