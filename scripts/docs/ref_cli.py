"""The CLI reference page, from the argparse parsers the commands really build.

``floe`` (`floe.cli.build_parser`) and ``floe-optimizer`` (`floe_optimizer.main.parser`): each
command's usage, description and every option with its help and default.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Iterator

from ref_text import code, page_head, prose, table

USAGE_WIDTH = 100

Parser = argparse.ArgumentParser


def commands() -> list[tuple[Parser, str]]:
    """The user-facing parsers, each with what runs it."""
    from floe.cli import build_parser
    from floe_optimizer.main import parser

    return [
        (
            build_parser(),
            "Embedded mode (`optimize`, `demo`, `run`: floe and local Spark in one process) and the "
            "Kubernetes operator (`operator`, what the operator image runs).",
        ),
        (
            parser(),
            "The optimizer application outside the operator: it serves one group of a task service "
            "it can reach, with Spark local or on a cluster (the optimizer image runs it as "
            "`optimizer ARGS`). On Kubernetes the operator's driver pods run the optimizer themselves.",
        ),
    ]


def subcommands(parser: Parser) -> Iterator[tuple[str, Parser, str]]:
    """(name, parser, one-line help) of each subcommand of ``parser``, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name, "")


def options(parser: Parser) -> list[argparse.Action]:
    """Every documented argument of ``parser`` but ``--help`` and its subcommands."""
    return [
        action
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and action.help != argparse.SUPPRESS
    ]


class _FixedWidth(argparse.HelpFormatter):
    """argparse's formatter at `USAGE_WIDTH` columns, not the terminal's."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=USAGE_WIDTH)


def usage(parser: Parser) -> str:
    """``parser``'s usage line, wrapped at a fixed width whatever the terminal."""
    parser.formatter_class = _FixedWidth
    return parser.format_usage().removeprefix("usage: ").strip()


def flag(action: argparse.Action) -> str:
    """How the argument is written: ``-f``, ``--file FILE``; a positional by its name."""
    if not action.option_strings:
        return code(action.metavar or action.dest)
    takes_value = action.nargs != 0
    value = ""
    if takes_value:
        value = " " + str(action.metavar or action.dest.upper())
    return ", ".join(code(f"{option}{value}") for option in action.option_strings)


def default(action: argparse.Action) -> str:
    """The default as argparse applies it; ``required`` when the argument must be given."""
    if action.required or not action.option_strings:
        return "required"
    if action.nargs == 0:  # store_true / store_false
        return "off" if action.default is False else "on"
    if action.default is None or action.default == []:
        return "unset"
    if action.default == socket.gethostname():
        return "the host name"
    return code(action.default)


def description(action: argparse.Action) -> str:
    """The argument's help, with its choices and repeatability."""
    text = prose(action.help or "")
    if "%(" in text:
        text = text % {**vars(action), "prog": "", "default": action.default}
    extra = []
    if action.choices:
        extra.append("one of " + ", ".join(code(choice) for choice in action.choices))
    if isinstance(action, argparse._AppendAction) and "repeatable" not in text:
        extra.append("repeatable")
    if not text and not extra:
        raise ValueError(f"{action.option_strings or action.dest}: the argument has no help")
    return "; ".join(part for part in [text, *extra] if part)


def section(level: int, name: str, parser: Parser, about: str) -> list[str]:
    """One command's heading, usage, description and options table."""
    lines = [f"{'#' * level} {name}", ""]
    for paragraph in (parser.description, about):
        if paragraph:
            lines += [prose(paragraph), ""]
    lines += ["```text", usage(parser), "```", ""]
    rows = [(flag(action), default(action), description(action)) for action in options(parser)]
    if rows:
        lines.append(table(("Argument", "Default", "Description"), rows))
    if parser.epilog:
        lines += [prose(parser.epilog), ""]
    return lines


def render() -> str:
    """The whole page."""
    lines = page_head(
        "ref_cli",
        "the argparse parsers of floe.cli and floe_optimizer.main",
        "CLI",
        "Every command, its arguments and their defaults, as `--help` prints them. "
        "Exit codes of `floe`: 0 on success, 2 for bad arguments, a bad manifest or a table floe "
        "refuses, 1 when optimizing failed, 130 or 143 when interrupted.",
    )
    for parser, runs in commands():
        lines += section(2, parser.prog, parser, runs)
        for name, sub, summary in subcommands(parser):
            lines += section(3, f"{parser.prog} {name}", sub, summary[:1].upper() + summary[1:] + ".")
    return "\n".join(lines).rstrip() + "\n"
