"""The ``floe`` command line: ``floe optimize`` (one table, once), ``demo``, ``run``, ``operator``
and ``history``."""

from floe.cli.commands import build_parser, main, operator_config

__all__ = ["build_parser", "main", "operator_config"]
