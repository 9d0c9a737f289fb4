"""Write docs/jobs.md: every ``mlm-suite`` command and its own flags, read from the parsers the jobs build.

    python docs/generate_jobs_reference.py            # rewrites docs/jobs.md
    python docs/generate_jobs_reference.py --check    # exit status 1 if docs/jobs.md is out of date

Each command's ``main(argv)`` is called with its parse call intercepted, so the reference shows the parser the job
really builds (``HfArgumentParser`` dataclasses or ``argparse``), with the defaults it really sets. transformers'
``TrainingArguments`` fields are left out (they change from one transformers version to the next): the page lists
the flags mlm_suite declares, and for each job the ``TrainingArguments`` defaults it replaces. Fields declared only
on some transformers versions (under an ``if`` in the class body) are read from the source, so the page is the same
whichever transformers is installed. ``tests/conformance/test_docs.py`` checks that docs/jobs.md is this script's output and
uses :func:`capture_parser` to check the flags of the documented commands.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "jobs.md"
TRAINING_ARGUMENTS_URL = "https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments"


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__("parser captured")
        self.parser = parser


def job_main(command: str) -> Callable[[list[str]], Any]:
    """The function ``mlm-suite <command>`` runs (as :func:`mlm_suite.cli.main` picks it)."""
    from mlm_suite import cli

    return importlib.import_module(cli.SUBCOMMANDS[command][0]).main


def capture_parser(command: str) -> argparse.ArgumentParser:
    """The argument parser ``mlm-suite <command>`` builds, taken at its first parse call (nothing else runs)."""
    from mlm_suite.jobs.common.running import running_as

    main = job_main(command)

    def intercept(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Captured(self)

    original = argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_known_args = intercept  # parse_args and HfArgumentParser both go through it
    try:
        with running_as(f"mlm-suite {command}"):
            main([])
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original
    raise RuntimeError(f"mlm-suite {command} returned without parsing its arguments")


# --------------------------------------------------------------------------------------------
# Reading the parsers
# --------------------------------------------------------------------------------------------
def _class_source_fields(cls: type) -> list[tuple[str, ast.AnnAssign, ast.expr | None]]:
    """``(name, node, condition)`` for each annotated field in ``cls``'s body, in source order; ``condition`` is
    the test of the ``if`` a field is declared under (None for unconditional fields)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    found: list[tuple[str, ast.AnnAssign, ast.expr | None]] = []

    def walk(statements: list[ast.stmt], condition: ast.expr | None) -> None:
        for statement in statements:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                found.append((statement.target.id, statement, condition))
            elif isinstance(statement, ast.If):
                walk(statement.body, statement.test)
                walk(statement.orelse, statement.test)

    walk(body, None)
    return found


def _field_call_keywords(node: ast.AnnAssign) -> dict[str, ast.expr]:
    value = node.value
    if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) == "field":
        return {keyword.arg: keyword.value for keyword in value.keywords if keyword.arg}
    return {} if value is None else {"default": value}


def _source_help(node: ast.AnnAssign) -> str:
    metadata = _field_call_keywords(node).get("metadata")
    if isinstance(metadata, ast.Dict):
        for key, value in zip(metadata.keys, metadata.values):
            if isinstance(key, ast.Constant) and key.value == "help":
                try:
                    return ast.literal_eval(value)
                except ValueError:
                    return ast.unparse(value)
    return ""


def _format_default(value: Any) -> str:
    if value is dataclasses.MISSING:
        return "required"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, (list, tuple)) and not value:
        return "`[]`"
    return f"`{value!r}`"


def _clean(text: str) -> str:
    text = " ".join(str(text).replace("%%", "%").split())
    return text.replace("|", "\\|").replace("<", "\\<").replace(">", "\\>")


def _option_action(parser: argparse.ArgumentParser, name: str) -> argparse.Action | None:
    return parser._option_string_actions.get(f"--{name}")


def dataclass_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str, str]]:
    """``(flags, type, default, help)`` for every field that mlm_suite's dataclasses declare.

    Types are the annotations as written in the source and defaults the parser's (after ``set_defaults``), so
    nothing depends on how the installed transformers resolves types or spells dashed aliases.
    """
    rows = []
    for dataclass_type in parser.dataclass_types:
        own = [cls for cls in reversed(dataclass_type.__mro__) if cls.__module__.startswith("mlm_suite")]
        declared: dict[str, tuple[ast.AnnAssign, ast.expr | None]] = {}  # first declaration's place, last's node
        for cls in own:
            for name, node, condition in _class_source_fields(cls):
                declared[name] = (node, condition)
        fields = {field.name: field for field in dataclasses.fields(dataclass_type)}
        for name, (node, condition) in declared.items():
            annotation = "`" + ast.unparse(node.annotation).replace("|", "\\|") + "`"
            if condition is not None:  # declared on some transformers versions only: read from the source
                keywords = _field_call_keywords(node)
                default = f"`{ast.unparse(keywords['default'])}`" if "default" in keywords else "required"
                note = f" (declared only where `{ast.unparse(condition)}`)"
                rows.append((f"`--{name}`", annotation, default, _clean(_source_help(node)) + note))
                continue
            field = fields.get(name)
            if field is None or not field.init:
                continue
            flags = [f"--{name}", *field.metadata.get("aliases", [])]
            default = field.default
            if field.default_factory is not dataclasses.MISSING:
                default = field.default_factory()
            action = _option_action(parser, name)
            if action is not None and default is not dataclasses.MISSING:
                default = action.default
            if default is True and _option_action(parser, f"no_{name}") is not None:
                flags.append(f"--no_{name}")
            rows.append((", ".join(f"`{flag}`" for flag in flags), annotation, _format_default(default),
                         _clean(field.metadata.get("help", ""))))
    return rows


def argparse_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str, str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flags = ", ".join(f"`{option}`" for option in action.option_strings) or f"`{action.dest}` (positional)"
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            type_text = "switch"
        else:
            type_text = getattr(action.type, "__name__", "str") if action.type else "str"
            if action.choices:
                type_text = " \\| ".join(map(str, action.choices))
            if action.nargs in ("+", "*"):
                type_text += " ..."
        type_text = f"`{type_text}`"
        default = "required" if action.required else _format_default(action.default)
        rows.append((flags, type_text, default, _clean(action.help or "")))
    return rows


def training_defaults(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """The ``TrainingArguments`` defaults the job sets on its parser (``parser.set_defaults``)."""
    return [(f"`--{name}`", _format_default(value)) for name, value in parser._defaults.items()]


# --------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------
def entry_points(command: str) -> list[str]:
    """Other ways to run the command: ``python -m`` and the examples/ scripts that run the same ``main``."""
    from mlm_suite import cli

    module = cli.SUBCOMMANDS[command][0]
    if module == "mlm_suite.cli":
        return []
    ways = [f"`python -m {module}`"]
    for script in sorted((REPO / "examples").glob("*.py")):
        if re.search(rf"^from {re.escape(module)} import main\b", script.read_text(encoding="utf-8"), re.M):
            ways.append(f"`python examples/{script.name}`")
    return ways


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render() -> str:
    from mlm_suite import cli

    lines = [
        "# Jobs reference",
        "",
        "<!-- Generated by docs/generate_jobs_reference.py from the jobs' argument parsers: do not edit by hand. -->",
        "",
        "Every `mlm-suite` command with the flags it declares, read from the parser it builds. `mlm-suite --help` "
        "lists the commands, `mlm-suite <command> --help` the flags of one (with the installed transformers' "
        f"[`TrainingArguments`]({TRAINING_ARGUMENTS_URL}) for the jobs that train). Errors, `--debug` and "
        "`--version`: [the command line](command_line.md).",
        "",
    ]
    lines += [f"- [`mlm-suite {command}`](#mlm-suite-{command}): {help_text}" for command, (_, help_text) in cli.SUBCOMMANDS.items()]
    for command, (_, help_text) in cli.SUBCOMMANDS.items():
        parser = capture_parser(command)
        lines += ["", f"## `mlm-suite {command}`", "", help_text[0].upper() + help_text[1:] + "."]
        ways = entry_points(command)
        if ways:
            lines += ["", "Also runs as " + " and ".join(ways) + "."]
        hf = hasattr(parser, "dataclass_types")
        lines += [""] + table(("flag", "type", "default", "help"), dataclass_rows(parser) if hf else argparse_rows(parser))
        if hf:
            trains = any("TrainingArguments" in {cls.__name__ for cls in t.__mro__} for t in parser.dataclass_types)
            if trains:
                lines += ["", f"Plus transformers' [`TrainingArguments`]({TRAINING_ARGUMENTS_URL}) (`--learning_rate`, "
                          "`--bf16`, `--gradient_accumulation_steps`, `--resume_from_checkpoint`, `--push_to_hub` ...)."]
                defaults = training_defaults(parser)
                if defaults:
                    lines += ["", "`TrainingArguments` defaults this job replaces (flags given on the command line win):",
                              ""] + table(("flag", "job default"), defaults)
        if command == "seeds":
            lines += ["", "Flags after `--` go to the job (all but `--seed` and `--output_dir`, which are set per run)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write docs/jobs.md from the jobs' argument parsers")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/jobs.md differs, write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is out of date: run python docs/generate_jobs_reference.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
