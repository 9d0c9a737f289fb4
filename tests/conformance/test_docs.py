"""The README and docs/ as tested material.

* Every ```python block of README.md and docs/*.md runs (``>>>`` blocks as doctests), in a temporary folder shared
  by the blocks of its page, which run in order in one namespace (a block may use what an earlier one made).
  The line just before a block may mark it: ``<!-- slow -->`` (more than ~20 s: marked ``slow``, still run by the
  full suite) or ``<!-- not-run: <reason> -->`` (cannot run offline on a CPU: skipped with that reason).
* Every command in a ```bash block (``mlm-suite <command>``, ``python -m mlm_suite...``, ``python examples/...``,
  ``accelerate launch``/``torchrun`` of such a script) parses with its job's own parser, without running the job;
  commands quoted in the text (inline code) use only flags their job has. The set-up and test commands of the
  README (``<!-- main-command -->``, ``<!-- test-command -->``) are left to CI, which runs them (``.ci/run``).
* docs/jobs.md is what ``docs/generate_jobs_reference.py`` writes from the jobs' parsers.
* The README stays a front page (at most 250 lines), every relative link of README.md and docs/ points to a file
  that exists (and an ``#anchor`` to one of its headings, with GitHub's heading ids), and every ``mlm_suite.*``
  name and repository path quoted in the text exists.
"""

from __future__ import annotations

import argparse
import doctest
import functools
import glob
import importlib
import importlib.util
import re
import shlex
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250
CI_MARKERS = ("<!-- main-command -->", "<!-- test-command -->")  # blocks that CI runs itself (.ci/run)


def page_name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


# --------------------------------------------------------------------------------------------
# Reading the pages
# --------------------------------------------------------------------------------------------
@dataclass
class Block:
    page: str
    index: int  # among the page's blocks of the same language
    language: str
    code: str
    line: int  # 1-based line of the first code line
    marker: str  # the line just before the opening fence


def fenced_blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks, counts, position = [], {}, 0
    while position < len(lines):
        opening = re.match(r"^```(\S*)\s*$", lines[position])
        if not opening:
            position += 1
            continue
        end = position + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        language = opening.group(1).lower()
        marker = lines[position - 1].strip() if position else ""
        counts[language] = counts.get(language, -1) + 1
        blocks.append(Block(page_name(path), counts[language], language, "\n".join(lines[position + 1:end]) + "\n",
                            position + 2, marker))
        position = end + 1
    return blocks


def prose(path: Path) -> str:
    """The page without its fenced blocks (their lines blanked, so line numbers stay)."""
    out, inside = [], False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith("```"):
            inside = not inside
            out.append("")
        else:
            out.append("" if inside else line)
    return "\n".join(out)


INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def inline_code(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every inline code span outside fenced blocks (a span may go over a line break)."""
    text = prose(path)
    return [(text.count("\n", 0, match.start()) + 1, " ".join(match.group(2).split()))
            for match in INLINE_CODE.finditer(text)]


# --------------------------------------------------------------------------------------------
# Python blocks
# --------------------------------------------------------------------------------------------
def python_blocks() -> list:
    params = []
    for path in PAGES:
        for block in fenced_blocks(path):
            if block.language not in ("python", "py", "pycon"):
                continue
            marks = []
            not_run = re.match(r"<!--\s*not-run:\s*(.+?)\s*-->", block.marker)
            if not_run:
                marks.append(pytest.mark.skip(reason=f"not run: {not_run.group(1)}"))
            elif re.match(r"<!--\s*slow\s*-->", block.marker):
                marks.append(pytest.mark.slow)
            if re.search(r"torch\.(compile|export)\b|torch_compile=True", block.code):
                # inductor compiles its kernels with the C++ compiler, in processes of its own
                marks += [pytest.mark.compile, pytest.mark.multiprocess]
            params.append(pytest.param(block.page, block.index, marks=marks, id=f"{block.page}-python{block.index}"))
    return params


def skipped_as_prerequisite(block: Block) -> bool:
    """Slow and not-run blocks do not run before a later block of their page (they must not make what it needs)."""
    return bool(re.match(r"<!--\s*(slow|not-run:.*?)\s*-->", block.marker))


@dataclass
class PageRun:
    folder: Path
    namespace: dict
    ran: dict[int, BaseException | None] = field(default_factory=dict)


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory):
    runs: dict[str, PageRun] = {}

    def get(page: str) -> PageRun:
        if page not in runs:
            runs[page] = PageRun(tmp_path_factory.mktemp(re.sub(r"\W", "_", page)), {"__name__": "__docs__"})
        return runs[page]

    return get


def run_block(block: Block, namespace: dict) -> None:
    source = f"{block.page} (python block {block.index}, line {block.line})"
    if re.search(r"^\s*>>> ", block.code, re.M):
        test = doctest.DocTestParser().get_doctest(block.code, dict(namespace), source, block.page, block.line - 1)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert test.examples and runner.failures == 0, f"{runner.failures} failing example(s) in {source} (see above)"
    else:
        exec(compile(block.code, source, "exec"), namespace)


@pytest.mark.parametrize("page, index", python_blocks())
def test_python_block_runs(page, index, page_runs, monkeypatch):
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_EVALUATE_OFFLINE"):
        monkeypatch.setenv(variable, "1")
    blocks = [b for b in fenced_blocks(REPO / page) if b.language in ("python", "py", "pycon")]
    run = page_runs(page)
    monkeypatch.chdir(run.folder)
    for earlier in blocks[:index]:  # what this block may rely on, once per page
        if earlier.index in run.ran or skipped_as_prerequisite(earlier):
            continue
        try:
            run_block(earlier, run.namespace)
            run.ran[earlier.index] = None
        except BaseException as error:  # noqa: BLE001 (recorded, reported by that block's own test)
            run.ran[earlier.index] = error
    failed = [i for i, error in run.ran.items() if error is not None and i < index]
    assert not failed, f"{page}: earlier python block(s) {failed} failed, and this block may need what they make"
    if index in run.ran:  # it ran as another block's prerequisite
        if run.ran[index] is not None:
            raise run.ran[index]
        return
    try:
        run_block(blocks[index], run.namespace)
    except BaseException as error:
        run.ran[index] = error
        raise
    run.ran[index] = None


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def reference_generator():
    spec = importlib.util.spec_from_file_location("generate_jobs_reference", REPO / "docs" / "generate_jobs_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=None)
def job_parser(command: str) -> argparse.ArgumentParser:
    return reference_generator().capture_parser(command)


@functools.lru_cache(maxsize=None)
def module_commands() -> dict[str, str]:
    from mlm_suite.cli import SUBCOMMANDS

    return {module: command for command, (module, _) in SUBCOMMANDS.items() if module != "mlm_suite.cli"}


def subcommands() -> set[str]:
    from mlm_suite.cli import SUBCOMMANDS

    return set(SUBCOMMANDS)


def script_command(script: str) -> str | None:
    """The ``mlm-suite`` command that ``examples/<script>.py`` runs (it imports that job's ``main``)."""
    path = REPO / script
    if not path.is_file():
        return None
    for module, command in module_commands().items():
        if re.search(rf"^from {re.escape(module)} import main\b", path.read_text(encoding="utf-8"), re.M):
            return command
    return None


def job_invocation(tokens: list[str]) -> tuple[str, list[str]] | None:
    """``(command, its flags)`` for a command line that runs an mlm_suite job, else None."""
    if not tokens:
        return None
    if tokens[0] == "mlm-suite":
        rest = tokens[1:]
        while rest and rest[0] == "--debug":
            rest = rest[1:]
        if rest and rest[0] in subcommands():
            return rest[0], rest[1:]
        return None
    if tokens[0] in ("accelerate", "torchrun"):
        scripts = [i for i, token in enumerate(tokens) if token.endswith(".py")]
        if scripts:
            command = script_command(tokens[scripts[0]])
            return (command, tokens[scripts[0] + 1:]) if command else None
        if "-m" in tokens:
            i = tokens.index("-m")
            return job_invocation(["python", *tokens[i:]])
        return None
    if tokens[0] in ("python", "python3"):
        if len(tokens) > 2 and tokens[1] == "-m" and tokens[2] in module_commands():
            return module_commands()[tokens[2]], tokens[3:]
        if len(tokens) > 1 and tokens[1].startswith("examples/"):
            command = script_command(tokens[1])
            return (command, tokens[2:]) if command else None
    return None


SHELL_OPERATORS = {";", "&", "&&", "|", "||"}


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a bash block as token lists: continuation lines joined, comments dropped, split at
    ``&&``, ``;``, ``|`` ... (outside quotes)."""
    commands = []
    for line in re.sub(r"\\\n\s*", " ", code).split("\n"):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:  # unbalanced quotes: not a command line
            continue
        current: list[str] = []
        for token in tokens + [";"]:
            if token in SHELL_OPERATORS:
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(token)
    return commands


def per_parser(command: str, flags: list[str]) -> list[tuple[str, list[str]]]:
    """``mlm-suite seeds <job> ... -- <job flags>`` is two commands: seeds' flags and the job's."""
    if command != "seeds" or "--" not in flags:
        return [(command, flags)]
    split = flags.index("--")
    jobs = [token for token in flags[:split] if token in subcommands()]
    return [("seeds", flags[:split])] + ([(jobs[0], flags[split + 1:])] if jobs else [])


def flag_problems(command: str, flags: list[str]) -> list[str]:
    """Flags that ``command`` lacks (an abbreviation is not a flag either)."""
    parser = job_parser(command)
    options = {option for action in parser._actions for option in action.option_strings}
    problems = []
    for flag in flags:
        name = flag.split("=", 1)[0]
        if not re.fullmatch(r"--[A-Za-z][\w-]*", name):
            continue
        if name not in options:
            problems.append(f"mlm-suite {command} has no {name}")
    return problems


def parse_only(command: str, flags: list[str]) -> None:
    """Parse ``flags`` with ``command``'s parser, as the job would, without running it (argparse exits on an error)."""
    flags = [flag for flag in flags if flag != "..."]
    for name, part in per_parser(command, flags):
        _, unknown = job_parser(name).parse_known_args(part)
        assert not unknown, f"mlm-suite {name}: unknown arguments {unknown}"
        problems = flag_problems(name, part)
        assert not problems, "; ".join(problems)


def bash_commands() -> list:
    params = []
    for path in PAGES:
        for block in fenced_blocks(path):
            if block.language not in ("bash", "sh", "shell") or block.marker in CI_MARKERS:
                continue  # the set-up and test commands: CI runs them (.ci/run)
            for number, tokens in enumerate(shell_commands(block.code)):
                if job_invocation(tokens):
                    params.append(pytest.param(shlex.join(tokens), id=f"{block.page}-bash{block.index}-{number}"))
    return params


@pytest.mark.parametrize("command_line", bash_commands())
def test_bash_command_parses(command_line, capsys):
    command, flags = job_invocation(shlex.split(command_line))
    try:
        parse_only(command, flags)
    except SystemExit as error:
        pytest.fail(f"{command_line!r} does not parse (status {error.code}): {capsys.readouterr().err.strip()}")


@pytest.mark.parametrize("path", PAGES, ids=page_name)
def test_commands_quoted_in_the_text_use_existing_flags(path):
    problems = []
    for line, span in inline_code(path):
        try:
            tokens = shlex.split(span)
        except ValueError:
            continue
        invocation = job_invocation(tokens)
        if invocation is None:
            continue
        for command, flags in per_parser(*invocation):
            if command != "seeds" and "--" in flags:
                flags = flags[:flags.index("--")]
            problems += [f"line {line}: `{span}`: {problem}" for problem in flag_problems(command, flags)]
    assert not problems, f"{page_name(path)}:\n" + "\n".join(problems)


# --------------------------------------------------------------------------------------------
# The generated jobs reference, the front page, links and names
# --------------------------------------------------------------------------------------------
def test_jobs_reference_is_up_to_date():
    expected = reference_generator().render()
    current = (REPO / "docs" / "jobs.md").read_text(encoding="utf-8")
    assert current == expected, "docs/jobs.md is out of date: run `python docs/generate_jobs_reference.py` to refresh it"


def test_readme_is_a_front_page():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; at most {README_MAX_LINES} (move detail into docs/)"
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for marker in CI_MARKERS:
        assert f"{marker}\n```bash\n" in text, f"README.md lost the {marker} block"
    extras = re.search(r"^\[project\.optional-dependencies\]\n(.*?)^\[", (REPO / "pyproject.toml").read_text(encoding="utf-8"),
                       re.M | re.S)
    for extra in re.findall(r"^(\w[\w-]*)\s*=", extras.group(1), re.M):
        assert f'".[{extra}]"' in text, f"README.md does not show the {extra!r} extra of pyproject.toml"


def test_every_docs_page_is_linked_from_the_readme_and_the_index():
    readme = {target.partition("#")[0] for _, target in relative_links(REPO / "README.md")}
    index = {target.partition("#")[0] for _, target in relative_links(REPO / "docs" / "index.md")}
    for path in PAGES[1:]:
        assert f"docs/{path.name}" in readme, f"README.md does not link docs/{path.name}"
        assert path.name == "index.md" or path.name in index, f"docs/index.md does not link {path.name}"


def github_slug(heading: str) -> str:
    """The id GitHub gives a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "").lower().strip()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    ids = set()
    for line in prose(path).split("\n"):
        heading = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = github_slug(heading.group(1))
        ids.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return ids


def relative_links(path: Path) -> list[tuple[int, str]]:
    text = INLINE_CODE.sub(lambda match: "\n" * match.group(0).count("\n"), prose(path))  # no links in code
    links = []
    for match in re.finditer(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
        target = match.group(1)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            links.append((text.count("\n", 0, match.start()) + 1, target))
    return links


@pytest.mark.parametrize("path", PAGES, ids=page_name)
def test_relative_links_point_to_existing_files_and_headings(path):
    problems = []
    for line, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / file_part).resolve() if file_part else path
        if not destination.exists():
            problems.append(f"line {line}: {target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"line {line}: {target}: {page_name(destination)} has no heading #{anchor}")
    assert not problems, f"{page_name(path)}:\n" + "\n".join(problems)


def resolves(dotted: str) -> bool:
    """Whether ``mlm_suite.a.b.c`` is a module or an attribute reached from one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                target = getattr(target, name)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("path", PAGES, ids=page_name)
def test_names_and_paths_quoted_in_the_text_exist(path):
    problems = []
    for line, span in inline_code(path):
        for dotted in re.findall(r"(?<![\w/.])mlm_suite(?:\.[A-Za-z_]\w*)+", span):
            if not resolves(dotted):
                problems.append(f"line {line}: {dotted} cannot be imported")
        for repository_path in re.findall(r"(?<![\w/.~])(?:mlm_suite|tests|benchmarks|scripts|examples|docs)/[\w/.*-]*[\w*]", span):
            if not glob.glob(str(REPO / repository_path)):
                problems.append(f"line {line}: {repository_path}: no such file in the repository")
    assert not problems, f"{page_name(path)}:\n" + "\n".join(problems)
