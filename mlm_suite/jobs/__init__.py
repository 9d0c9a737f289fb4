"""Runnable jobs behind the ``mlm-suite`` subcommands and the scripts in ``examples/``."""
