"""The ``icecrawler`` command: global options, then one subcommand from ``icecrawler_cli.commands``."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import io
import logging
import os
import re
import select
import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import NoReturn

from icecrawler import __version__
from icecrawler.errors import IcecrawlerError
from icecrawler.logs import configure_logging
from icecrawler.optional import explain_missing, use_source_checkout
from icecrawler.processes import die_with_parent
from icecrawler.settings import load_settings
from icecrawler.stopsignals import holding_stop_signals
from icecrawler_cli.commands import COMMAND_MODULES, SERVES_UNTIL_STOPPED, BaseCommand, Unavailable

__all__ = ["main"]

ICE_PREFIXES = ("--Ice.", "--IceSSL.", "--IceGrid.", "--IceMX.", "--IceLocatorDiscovery.")


def _load_commands(names: Sequence[str] = COMMAND_MODULES) -> dict[str, BaseCommand]:
    """The named subcommands (default: every one, for ``--help``); one whose module needs what this install lacks
    (a source checkout, an extra) is listed all the same and says what is missing when run."""
    use_source_checkout()
    commands: dict[str, BaseCommand] = {}
    for name in names:
        try:
            commands[name] = importlib.import_module(f"icecrawler_cli.commands.{name}").Command()
        except ModuleNotFoundError as exc:
            error = explain_missing(exc, name)
            if error is None:
                raise
            commands[name] = Unavailable(error)
    return commands


class _Parser(argparse.ArgumentParser):
    """A parser whose errors are one line, like the commands' own: what is wrong, a close match for a mistyped
    command, option or choice, and where the usage is (argparse printed the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        _fail(self, message, self._close_match(message))

    def _close_match(self, message: str) -> str:
        choice = _INVALID_CHOICE.match(message)
        if choice:
            return _did_you_mean(choice["word"][1:-1], _listed_choices(choice["choices"]))
        unknown = re.match(r"unrecognized arguments: (.*)$", message)
        words = [word.split("=", 1)[0] for word in unknown[1].split() if word.startswith("-")] if unknown else []
        # One of its own options, not taken, is after ``--`` or was the value of another: no other is meant.
        long = [word for word in words if word.startswith("--") and word not in self._option_string_actions]
        options = [option for option in self._option_string_actions if option.startswith("--")]
        return _did_you_mean(long[0], options) if long else ""


#: argparse's message for a value outside ``choices``; the value is given as ``repr`` gives it.
_INVALID_CHOICE = re.compile(
    r"argument [^:]+: invalid choice: (?P<word>'[^']*'|\"[^\"]*\") \(choose from (?P<choices>.*)\)$"
)


def _fail(parser: argparse.ArgumentParser, message: str, hint: str) -> NoReturn:
    """Exit with ``parser``'s one-line error: what is wrong, ``hint``, and where its usage is."""
    parser.exit(2, f"{parser.prog}: error: {message}{hint} (see {parser.prog} --help)\n")


def _misplaced(top: argparse.ArgumentParser, parser: argparse.ArgumentParser, before: list[str]) -> NoReturn:
    """The error for ``before``, the words given before ``parser``'s subcommand, one of them its option: the
    top-level parser ``top``, the only one that looks there, knows none of them (``_before_command``)."""
    own = next(
        option
        for word in before
        if word.startswith("-")
        and (option := word.split("=", 1)[0]) in parser._option_string_actions
        and option not in top._option_string_actions
    )
    hint = f"; {own} is an option of `{parser.prog}`: put it after the subcommand"
    _fail(parser, f"unrecognized arguments: {' '.join(before)}", hint)


def _listed_choices(listed: str) -> list[str]:
    """The choices of argparse's "(choose from ...)": each quoted (``'seed', 'status'``) before gh-86357 (CPython
    3.12.8 and 3.13.1), bare (``seed, status``) since."""
    if re.fullmatch(r"'[^']*'(?:, '[^']*')*", listed):
        return re.findall(r"'([^']*)'", listed)
    return listed.split(", ")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs wrapped to the terminal paragraph by paragraph (consecutive lines that do not start
    with a space), so a long paragraph is not broken mid-word; indented lines (examples) stay as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        paragraph: list[str] = []
        for line in [*text.splitlines(), ""]:
            if line and not line[0].isspace():
                paragraph.append(line.strip())
                continue
            if paragraph:
                words = " ".join(paragraph)
                lines.append(
                    textwrap.fill(words, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)
                )
                paragraph = []
            lines.append(indent + line if line else "")
        return "\n".join(lines[:-1])


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    """The choices ``word`` may have meant, other than ``word`` itself, compared without leading dashes (the ``--``
    all options share made ``--quiet`` and ``--yes`` look like ``--set``): those it begins, else the closest and
    any as close (none when over three). One guess only where it stands out: difflib's best for ``stat`` was
    ``start`` (which starts HBase), not ``status``."""
    bare = {choice.lstrip("-"): choice for choice in choices if choice != word}
    typed = word.lstrip("-")
    found = [name for name in bare if typed and name.startswith(typed)]
    if not found:
        ratios = {name: difflib.SequenceMatcher(None, typed, name).ratio() for name in bare}
        best = max(ratios.values(), default=0.0)
        found = [name for name, ratio in ratios.items() if ratio >= max(_CLOSE, best - _AS_CLOSE)]
    if not found or len(found) > _MOST_NAMED:  # many: the list of choices, which the message gives
        return ""
    named = [bare[name] for name in found]
    return f"; did you mean {' or '.join(filter(None, [', '.join(named[:-1]), named[-1]]))}?"


#: How alike (difflib's ratio) a choice must be to be suggested at all (difflib's own cut-off), and how much less
#: alike than the closest one another may be and still be named beside it.
_CLOSE = 0.6
_AS_CLOSE = 0.1
#: The most choices named in one suggestion.
_MOST_NAMED = 3


def _command_parser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser:
    """The parser of subcommand ``name`` (``parser`` itself when there is none), to word an error as that command's."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]  # type: ignore[no-any-return]
    return parser


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("common options")
    group.add_argument(
        "-c", "--config", metavar="FILE", help="app settings file (TOML); default ./icecrawler.toml if it exists"
    )
    group.add_argument(
        "-s",
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set client.workers=8 (repeatable)",
    )
    group.add_argument(
        "--log-level",
        default=None,
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING or ERROR (default: setting log.level, INFO)",
    )
    group.add_argument("--log-json", action="store_true", default=None, help="log one JSON object per line")


def build_parser(commands: dict[str, BaseCommand]) -> argparse.ArgumentParser:
    """The parser of every command; a command whose options cannot be declared in this install is replaced in
    ``commands`` by an ``Unavailable`` one."""
    parser = _Parser(
        prog="icecrawler",
        description="A distributed, incremental crawler for Weibo timelines and product reviews: a scheduler and a "
        "storage server joined to N crawler clients by ZeroC Ice. Ice runtime settings go in Ice "
        "property files (--Ice.Config=FILE); app settings in icecrawler.toml or --set KEY=VALUE.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"icecrawler {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, command in commands.items():
        child = sub.add_parser(
            name,
            help=command.summary,
            description=command.description or command.summary,
            formatter_class=_HelpFormatter,
        )
        try:
            command.add_options(child)
        except ModuleNotFoundError as exc:  # a command that imports what it needs only here
            error = explain_missing(exc, name)
            if error is None:
                raise
            commands[name] = Unavailable(error)
        _add_common_options(child)
        if command.takes_ice_args:
            child.epilog = (
                "Ice options: --Ice.Config=FILE loads an Ice property file (see deploy/*.conf); any "
                "--Ice.*/--IceSSL.* property may also be given directly."
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # answered before any command module (and what it imports) is loaded
        print(f"icecrawler {__version__}")
        return 0
    ice_args = [arg for arg in argv if arg.startswith(ICE_PREFIXES)]
    rest = [arg for arg in argv if not arg.startswith(ICE_PREFIXES)]
    named = next((arg for arg in rest if not arg.startswith("-")), None)
    misplaced = _misplaced_ice_argument(argv)
    if misplaced:
        command = f" {named}" if named in COMMAND_MODULES else ""
        print(f"icecrawler{command}: error: {misplaced}", file=sys.stderr)
        return 2
    # From before the imports: a stop during a daemon's start-up is kept for it, not fatal (icecrawler.stopsignals).
    with holding_stop_signals() if named in SERVES_UNTIL_STOPPED else contextlib.nullcontext():
        # A child of the demo, a benchmark or a test stops when its parent dies, even by kill -9; an IceGrid server
        # whose node is gone already starts nothing (the next node starts its own).
        if not die_with_parent():
            return 0
        return _run(named, rest, ice_args)


#: Properties of ours that a property file holds (docs/ICE.md, section 1): Ice takes only its reserved prefixes from
#: the command line.
OWN_PROPERTY_PREFIXES = ("--Scheduler.", "--Storage.")


def _misplaced_ice_argument(argv: list[str]) -> str:
    """What is wrong with an Ice argument that would otherwise be taken for something else, or "": a bare
    ``--Ice.Config`` (its file name then read as an id or an unknown argument), or one of our own properties, which
    Ice reads from a property file only."""
    if "--Ice.Config" in argv:
        return _ice_config_spelling(argv)
    for arg in argv:
        toml = [path for path in arg.removeprefix("--Ice.Config=").split(",") if path.endswith(".toml")]
        if arg.startswith("--Ice.Config=") and toml:
            return (
                f"--Ice.Config={toml[0]} is a settings file (TOML): give it with -c {toml[0]}; --Ice.Config takes an "
                "Ice property file (deploy/*.conf)"
            )
    own = next((arg for arg in argv if arg.startswith(OWN_PROPERTY_PREFIXES)), None)
    if own is None:
        return ""
    name = own[2:].split("=", 1)[0]
    return (
        f"{own.split('=', 1)[0]}: {name} is read from the Ice property file only: put a line {name}=... in it and "
        "give it with --Ice.Config=FILE (deploy/client.conf shows one)"
    )


def _ice_config_spelling(argv: list[str]) -> str:
    """What to write instead of a bare ``--Ice.Config``: Ice takes a property's value only after ``=`` and reads
    the bare option as ``--Ice.Config=1``, so the file name after it would be taken for an argument (an id, for
    ``seed``)."""
    after = argv.index("--Ice.Config") + 1
    value = argv[after] if after < len(argv) and not argv[after].startswith("-") else "FILE"
    return f"--Ice.Config takes its value after '=': write --Ice.Config={value}"


def _run(named: str | None, rest: list[str], ice_args: list[str]) -> int:
    """``main`` once the Ice arguments are set apart and the command's name is known."""
    # Only the command being run is imported (a daemon starts without loading every role); --help and an unknown
    # name loads them all, to list them; so do words before the command, which may be an option and its value
    # naming another (`icecrawler -c seed status`), for ``_before_command`` to find the command.
    first = named in COMMAND_MODULES and rest[:1] == [named]
    commands = _load_commands([named] if first and named else COMMAND_MODULES)
    parser = build_parser(commands)
    unavailable = commands.get(named or "") if first else None
    if isinstance(unavailable, Unavailable) and "-h" not in rest and "--help" not in rest:
        print(f"icecrawler {named}: error: {unavailable.error}", file=sys.stderr)  # before its options are parsed
        return 2
    early = _before_command(parser, commands, rest)
    if early:  # argparse would take an option's value for the command (`icecrawler --log-level DEBUG status`)
        _misplaced(parser, _command_parser(parser, rest[len(early)]), early)
    args, unknown = parser.parse_known_args(rest)
    if unknown:  # an option the subcommand lacks: its error, not the top-level parser's
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not args.command:
        parser.print_help()
        return 2
    command = commands[args.command]
    if ice_args and not command.takes_ice_args:
        _command_parser(parser, args.command).error(f"'{args.command}' takes no Ice options: {' '.join(ice_args)}")
    try:
        settings = load_settings(args.config, args.assignments)
        if args.log_level:
            settings.set("log.level", args.log_level)
        if args.log_json:
            settings.set("log.json", True)
        configure_logging(settings.get_str("log.level"), settings.get_bool("log.json"))
        try:
            return command.run(args, settings, ice_args)
        except ModuleNotFoundError as exc:
            error = explain_missing(exc, args.command)
            if error is None:
                raise
            raise error from exc
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if isinstance(exc, BrokenPipeError) and args.command not in SERVES_UNTIL_STOPPED and _stdout_reader_gone():
            # The reader of our output went away (`icecrawler tasks | head`): what it wanted was printed. Point
            # stdout at /dev/null so that the interpreter's flush at exit does not fail again, and end as a pipe's
            # writer does. Any other broken pipe (a socket, a file given to -o) is an error like the rest.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        message = failure_line(exc) or _not_utf8_argument(exc, rest)
        if message is None:
            raise
        logging.getLogger("icecrawler").debug("command failed", exc_info=True)
        print(f"icecrawler {args.command}: error: {message}", file=sys.stderr)
        return 2


def _before_command(parser: argparse.ArgumentParser, commands: dict[str, BaseCommand], rest: list[str]) -> list[str]:
    """The words before the subcommand when one of them is the subcommand's option rather than ``icecrawler``'s,
    else []: the top-level parser knows none of them, and would read an option's value as the command. The
    subcommand is the first command word that the words before it leave free, as its parser reads them: the value
    of ``-c seed`` is a file. With none (``icecrawler -c seed``), which command was meant is unknown: []."""
    for index, word in enumerate(rest):
        if word not in commands:
            continue
        child = _command_parser(parser, word)
        if _values_taken(child, rest[:index]) > index:
            continue  # an option's value, not the command
        for arg in rest[:index]:
            option = arg.split("=", 1)[0]
            if (
                arg.startswith("-")
                and option in child._option_string_actions
                and option not in parser._option_string_actions
            ):
                return rest[:index]
        return []
    return []


def _values_taken(parser: argparse.ArgumentParser, words: list[str]) -> int:
    """How far ``parser`` would read the options among ``words`` with their values: past ``len(words)`` when the
    last one's value is the word after them (an option of one value; one of several values leaves that word to be
    the command). An option it does not know takes none (argparse's own reading)."""
    position = 0
    while position < len(words):
        word = words[position]
        position += 1
        if word == "--":
            return position
        action = parser._option_string_actions.get(word) if word.startswith("-") else None
        if action is None:
            continue
        if action.nargs is None:
            position += 1
        elif isinstance(action.nargs, int):
            position += action.nargs
        elif action.nargs == argparse.OPTIONAL:
            position += int(position >= len(words) or not words[position].startswith("-"))
        else:  # "*", "+", REMAINDER: every word up to the next option; the command's name after them stays one
            while position < len(words) and not words[position].startswith("-"):
                position += 1
    return position


def _not_utf8_argument(exc: BaseException, argv: list[str]) -> str | None:
    """One line for text from the command line that is not UTF-8 (a byte no UTF-8 character has, which Python keeps
    in ``sys.argv`` as a lone surrogate) and could not be encoded for a daemon (Ice sends text as UTF-8); None when
    ``exc`` is anything else, or text the command line did not give (a bug: a traceback)."""
    if not isinstance(exc, UnicodeEncodeError) or not isinstance(exc.object, str):
        return None
    bad = exc.object[exc.start : exc.end]
    given = next((arg for arg in argv if bad in arg), None)
    if given is None:
        return None
    shown = os.fsencode(given)
    return f"{shown[:80]!r}{'...' if len(shown) > 80 else ''} is not UTF-8 text, which ids, hosts and reasons must be"


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (poll reports an error on its write end)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def failure_line(exc: BaseException) -> str | None:
    """One line for an error the user can fix (ours, the OS's, Ice's own), or None for a bug (a traceback)."""
    if isinstance(exc, IcecrawlerError):
        text = str(exc)
    elif isinstance(exc, OSError):
        text = str(exc.strerror or exc) + (f": {exc.filename}" if exc.filename else "")
    elif type(exc).__module__.split(".")[0] == "Ice" and _is_ice_local(exc):
        text = f"{type(exc).__name__}: {exc}"
    else:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines)[:500] or type(exc).__name__


def _is_ice_local(exc: BaseException) -> bool:
    import Ice

    return isinstance(exc, Ice.LocalException)
