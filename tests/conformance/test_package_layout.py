"""The package layout by concern: every module imports, concerns are packages (the data ones grouped by pipeline),
tests mirror the modules, each input format and the word split have one definition, and no old path survives."""

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import mlm_suite

PACKAGE = Path(mlm_suite.__file__).parent
TESTS = Path(__file__).parents[1]
# evaluate loads a metric from a folder holding a script of the same name: the one module named as its package
METRIC_MODULES = PACKAGE / "evaluation" / "metric_modules"


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


def test_data_is_grouped_by_pipeline():
    """Inputs read, the pretraining and the fine-tuning pipelines are packages; what both pipelines use stays beside
    them (padding collators, flattened batches, the datasets.map options, the word splitter)."""
    data = PACKAGE / "data"
    assert sorted(path.parent.name for path in data.glob("*/__init__.py")) == ["finetuning", "inputs", "pretraining"]
    assert sorted(path.stem for path in data.glob("*.py")) == ["__init__", "flattening", "mapping", "padding", "words"]
    assert not hasattr(importlib.import_module("mlm_suite.data"), "DataCollatorForMaskedLM")  # its subpackages' names


def test_no_module_is_named_as_its_package():
    named_twice = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                   if path.stem == path.parent.name and METRIC_MODULES not in path.parents]
    assert not named_twice, named_twice


def test_setuptools_ships_every_package():
    """Every folder of modules is in pyproject.toml's ``packages`` (the metric modules' have no ``__init__``)."""
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8")
    packages = re.search(r"^packages = \[(.*?)^\]", pyproject, re.S | re.M).group(1)
    listed = set(re.findall(r'"(mlm_suite[\w.]*)"', packages))
    found = {".".join(path.parent.relative_to(PACKAGE.parent).parts) for path in PACKAGE.rglob("*.py")}
    assert listed == found


def test_tests_mirror_the_modules_they_are_named_after():
    """``tests/<package dir>/test_<module>.py`` mirrors ``mlm_suite/<package dir>/<module>.py``, wherever it is."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        modules.setdefault(path.stem, []).append(path.parent.relative_to(PACKAGE))
    misplaced = []
    for test in TESTS.rglob("test_*.py"):
        folder, homes = test.parent.relative_to(TESTS), modules.get(test.stem.removeprefix("test_"), [])
        if folder.parts[:1] not in (("conformance",), ("e2e",), ("benchmarks",)) and homes and folder not in homes:
            misplaced.append(f"tests/{folder.as_posix()}/{test.name}: its module is in {[str(home) for home in homes]}")
    assert not misplaced, misplaced


@pytest.mark.parametrize("old", ["mlm_suite.metrics", "mlm_suite.resources", "mlm_suite.trainer", "mlm_suite.wordnet"])
def test_the_flat_layout_of_the_first_days_is_gone(old):
    """Nothing was released with those paths: they are not served by any alias."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


FLAT_DATA_MODULES = [
    "alignment", "builtin", "chunking", "corpus", "corpus_sources", "labels", "masking", "nsp", "packing",
    "prepared", "readers", "resources", "schedules", "streaming", "subsets", "tagging", "text_files",
    "token_budget", "tokenization", "worker_batches",
]  # fmt: skip


@pytest.mark.parametrize("old", FLAT_DATA_MODULES)
def test_the_flat_data_folder_is_gone(old):
    """``mlm_suite.data`` was one folder of 25 modules before it was grouped by pipeline (``pretraining.py`` is now
    ``pretraining/rows.py``); no alias serves the old paths."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"mlm_suite.data.{old}")


def _names(target: ast.AST) -> frozenset[str]:
    return frozenset(name.id for name in ast.walk(target) if isinstance(name, ast.Name))


def _holds(source: str, predicate) -> bool:
    """Whether ``source`` has a node for which ``predicate(node, loop_targets)`` holds; ``loop_targets`` are the names
    bound by the ``for`` loops (and comprehensions) around the node."""

    def visit(node: ast.AST, loop_targets: frozenset[str]) -> bool:
        if predicate(node, loop_targets):
            return True
        if isinstance(node, (ast.For, ast.AsyncFor)):
            loop_targets |= _names(node.target)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):  # the element comes first
            loop_targets |= {name for generator in node.generators for name in _names(generator.target)}
        return any(visit(child, loop_targets) for child in ast.iter_child_nodes(node))

    return visit(ast.parse(source), frozenset())


def _definitions(predicate) -> set[str]:
    """The modules (paths relative to the package) for which :func:`_holds`."""
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
            if _holds(path.read_text(encoding="utf-8"), predicate)}


def _parses_each_line(node: ast.AST, loop_targets: frozenset[str]) -> bool:
    """``json.loads(line)`` where ``line`` comes from a loop: a JSON-lines reader."""
    return (isinstance(node, ast.Call) and ast.unparse(node.func) == "json.loads" and len(node.args) == 1
            and isinstance(node.args[0], ast.Name) and node.args[0].id in loop_targets)


def _word_regex(node: ast.AST, loop_targets: frozenset[str]) -> bool:
    """A string holding a regular expression of word-character runs (``\\w+``): a word splitter."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and "\\w+" in node.value


def test_the_definition_finders_find_what_they_look_for():
    assert _holds("for number, line in enumerate(handle):\n    record = json.loads(line)\n", _parses_each_line)
    assert _holds("records = [json.loads(line) for line in handle]\n", _parses_each_line)
    assert not _holds("for path in paths:\n    config = json.loads(path.read_text())\nvalue = json.loads(text)\n",
                      _parses_each_line)  # whole files, not lines
    assert _holds("WORDS = re.compile(r'\\w+|[^\\w\\s]')\n", _word_regex)
    assert not _holds("SENTENCE_END = re.compile(r'(?<=[.!?])\\s+')\n", _word_regex)


def test_json_lines_are_read_in_one_place():
    """One reader per format: a JSON-lines file (records, NER sentences, pretraining documents, WSD instances) is
    parsed line by line only by :func:`mlm_suite.data.inputs.readers.read_json_lines`, with one error type."""
    assert _definitions(_parses_each_line) == {"data/inputs/readers.py"}


def test_words_are_split_in_one_place():
    """One word splitter (:func:`mlm_suite.data.words.split_words`): its patterns are the only word regexes."""
    assert _definitions(_word_regex) == {"data/words.py"}


def test_input_files_are_opened_by_the_readers_and_the_pretraining_documents_alone():
    """Every input file is read by a reader of its format (:mod:`mlm_suite.data.inputs.readers`) or, for
    pretraining documents, in their one home (:mod:`mlm_suite.data.pretraining.documents`)."""

    def opens_text(node: ast.AST, loop_targets: frozenset[str]) -> bool:
        return isinstance(node, ast.Call) and ast.unparse(node.func) == "open_text"

    assert _definitions(opens_text) == {"data/inputs/readers.py", "data/pretraining/documents.py"}


def test_only_the_jobs_take_a_jobs_argument_object():
    """Library code takes explicit parameters; Trainer callbacks and overrides get transformers' TrainingArguments."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "jobs" in path.relative_to(PACKAGE).parts or path.name == "cli.py":
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
    from mlm_suite.jobs.common.commands import SUBCOMMANDS

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


def test_jobs_holds_the_commands_and_their_common_parts():
    """The top of ``mlm_suite/jobs`` is one module per command (named as it) and nothing else; what commands share
    is in ``jobs/common``, which imports no command."""
    from mlm_suite.jobs.common.commands import SUBCOMMANDS

    commands = {name.replace("-", "_") for name in SUBCOMMANDS}
    top = {path.stem for path in (PACKAGE / "jobs").glob("*.py")} - {"__init__"}
    assert top == commands
    for path in sorted((PACKAGE / "jobs" / "common").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        imported |= {f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                     for alias in node.names}
        assert not {f"mlm_suite.jobs.{name}" for name in commands} & imported, path.name


#: Where argument objects may be assigned to: while they are parsed (each dataclass's own ``__post_init__``, the
#: parser's device defaults) and in the copy a job derives for its Trainer.
PARSING = {("jobs/common/arguments.py", "parse_arguments"), ("jobs/common/arguments.py", "feed_the_device"),
           ("jobs/common/arguments.py", "derived_training_arguments")}


def assignments_to_arguments(source: str, where: str = "") -> list[str]:
    """``where:line function: target`` for each assignment to an attribute of an argument object (``args``,
    ``*_args``, ``self.args``, at any depth), or ``setattr`` on one, outside ``__post_init__`` and :data:`PARSING`."""
    import ast

    def argument_object(node: ast.AST) -> bool:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            if isinstance(node, ast.Attribute) and node.attr == "args" and isinstance(node.value, ast.Name) and (
                node.value.id == "self"
            ):
                return True
            node = node.value
        return isinstance(node, ast.Name) and (node.id in ("args", "arguments") or node.id.endswith("_args"))

    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if function.name == "__post_init__" or (where, function.name) in PARSING:
            continue
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            stored = [part for target in targets for part in (target.elts if isinstance(target, ast.Tuple) else [target])
                      if isinstance(part, (ast.Attribute, ast.Subscript)) and argument_object(part)]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and (
                node.args and argument_object(ast.Attribute(value=node.args[0], attr="?"))
            ):
                stored.append(node.args[0])
            found += [(node.lineno, f"{where}:{node.lineno} {function.name}: {ast.unparse(part)}") for part in stored]
    return [line for _, line in sorted(found)]


def test_the_assignment_finder_finds_what_a_job_would_change_in_its_arguments():
    source = ("def main(training_args, args):\n    training_args.resume_from_checkpoint = 'x'\n"
              "    args.accelerator_config.non_blocking = True\n    setattr(args, 'seed', 1)\n    checkpoint = 'x'\n"
              "    stage_args.output_dir, a = 'o', 1\n"
              "class T:\n    def log(self):\n        self.args.seed = 2\n        self.seed = 1\n"
              "    def __post_init__(self):\n        self.seed = 1\n")
    assert assignments_to_arguments(source) == [
        ":2 main: training_args.resume_from_checkpoint", ":3 main: args.accelerator_config.non_blocking",
        ":4 main: args", ":6 main: stage_args.output_dir", ":9 log: self.args.seed",
    ]


def test_no_function_assigns_to_an_argument_object_after_parsing():
    """A job resolves what it derives into values of its own (the pretraining plan, locals, a derived copy): the
    argument objects stay as parsed, so what a flag means is read in one place."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        offenders += assignments_to_arguments(path.read_text(encoding="utf-8"), where)
    assert not offenders, "\n".join(offenders)


def test_one_trainer_subclass_and_no_mixins():
    """``JobTrainer`` is the only subclass of ``transformers.Trainer`` (jobs hand it features, docs/trainer.md), and no
    class of the package is a mix-in: what a step, a save or a resume does reads in one file, in one order."""
    import ast

    subclasses, mixins = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            where = f"{path.relative_to(PACKAGE.parent).as_posix()}:{node.name}"
            bases = {base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "") for base in node.bases}
            if bases & {"Trainer", "JobTrainer", "Seq2SeqTrainer"}:
                subclasses.append(where)
            if node.name.endswith("Mixin") and path.parent.name != "model":  # the model's _MaskedLMMixin is HF's way
                mixins.append(where)
    assert subclasses == ["mlm_suite/training/trainer.py:JobTrainer"]
    assert mixins == []
