"""The ``mlm-suite`` command line.

Each subcommand forwards its remaining arguments to a ``main(argv)`` function, imported only
when that subcommand runs so ``mlm-suite --help`` stays fast (the table of commands:
:mod:`mlm_suite.jobs.common.commands`).

Options before the subcommand: ``--version``, ``--help`` and ``--debug`` (show the full traceback
of user errors, as ``MLM_SUITE_DEBUG=1`` does; see :mod:`mlm_suite.errors`). ``--debug`` after the
subcommand is the jobs' own ``TrainingArguments`` flag, not this one.
"""

from __future__ import annotations

import importlib
import sys
from importlib import metadata

from mlm_suite.jobs.common.commands import SUBCOMMANDS
from mlm_suite.jobs.common.running import run_job




def _installed_version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def version_text() -> str:
    """``mlm-suite <version> (torch <version>, transformers <version>, Python <version>)``."""
    try:
        own = metadata.version("mlm-suite")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        from mlm_suite import __version__ as own
    python = ".".join(map(str, sys.version_info[:3]))
    return (
        f"mlm-suite {own} (torch {_installed_version('torch')}, "
        f"transformers {_installed_version('transformers')}, Python {python})"
    )


def overview() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in SUBCOMMANDS.items()]
    return (
        "usage: mlm-suite [--version] [--debug] <command> [options]\n\ncommands:\n" + "\n".join(lines)
        + "\n\noptions:\n  -h, --help  show this message; mlm-suite <command> --help shows a command's options"
        + "\n  --version   print the versions of mlm-suite, torch and transformers"
        + "\n  --debug     show the full traceback of user errors (also: MLM_SUITE_DEBUG=1)"
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = None
    while argv and argv[0].startswith("-"):
        option = argv.pop(0)
        if option in ("-h", "--help"):
            print(overview())
            return 0
        if option == "--version":
            print(version_text())
            return 0
        if option == "--debug":
            debug = True
            continue
        print(overview(), file=sys.stderr)
        print(f"mlm-suite: error: unknown option {option!r}", file=sys.stderr)
        return 2
    if not argv:
        print(overview())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in SUBCOMMANDS:
        print(overview(), file=sys.stderr)
        print(f"mlm-suite: error: unknown command {command!r}", file=sys.stderr)
        return 2
    job = importlib.import_module(SUBCOMMANDS[command][0]).main
    result = run_job(job, rest, prog=f"mlm-suite {command}", debug=debug)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
