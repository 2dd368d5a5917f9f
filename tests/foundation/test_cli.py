"""The CLI front door: every subcommand is listed and has --help; errors are clear."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from icecrawler_cli.cli import main
from icecrawler_cli.commands import COMMAND_MODULES

REQUIRED = ("scheduler", "storage", "client", "seed", "status", "export", "parse", "demo", "bench")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "icecrawler_cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_help_lists_every_subcommand() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for name in (*REQUIRED, *COMMAND_MODULES):
        assert name in result.stdout, name


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_each_subcommand_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"icecrawler {name}" in out
    assert "--set KEY=VALUE" in out and "--log-json" in out


def test_bad_setting_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["settings", "--set", "client.nope=1"]) == 2
    assert "unknown setting 'client.nope'" in capsys.readouterr().err


def test_ice_options_are_refused_where_meaningless(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["settings", "--Ice.Trace.Network=1"])
    assert "takes no Ice options" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["seed", "jd:100012043978", "--Ice.Config", "client.conf"], "--Ice.Config=client.conf"),
        (["scheduler", "--Ice.Config", "scheduler.conf"], "--Ice.Config=scheduler.conf"),
        (["status", "--Ice.Config"], "--Ice.Config=FILE"),
    ],
)
def test_an_ice_config_without_equals_says_how_to_write_it(
    args: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ice reads only ``--Ice.Config=FILE``: a space instead of ``=`` made the file name an id for ``seed`` ("unknown
    source 'client.conf'"), an unrecognised argument for the rest, and a bare ``--Ice.Config`` the file '1'."""
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--Ice.Config takes its value after '='" in err and hint in err, err
    assert "unknown source" not in err and "'1'" not in err


def test_settings_command_shows_origin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["settings", "--set", "client.workers=3"]) == 0
    line = next(row for row in capsys.readouterr().out.splitlines() if row.startswith("client.workers "))
    assert "3" in line and "(cmdline)" in line


def test_log_json_emits_one_object_per_line() -> None:
    code = (
        "import logging, json; from icecrawler.logs import configure_logging; "
        "configure_logging('INFO', True); logging.getLogger('x').info('hello %s', 'world', extra={'task': 't1'})"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    import json

    event = json.loads(result.stderr.strip())
    assert event["msg"] == "hello world" and event["task"] == "t1" and event["level"] == "INFO"


@pytest.mark.parametrize("command", ["settings", "sources"])
def test_a_reader_that_goes_away_ends_the_command_quietly(command: str) -> None:
    """``icecrawler settings | head -1``: the pipe closes before the output is written; no "error: Broken pipe"
    and no traceback, and the exit status a pipe's writer has (128 + SIGPIPE)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "icecrawler_cli", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None
    child.stdout.close()
    _, err = child.communicate(timeout=120)
    assert child.returncode == 141, err.decode()
    assert err == b""


def test_a_broken_pipe_that_is_not_our_output_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a closed standard output ends a command quietly; a broken socket or FIFO is reported like any error."""
    from icecrawler_cli.commands import settings as settings_command

    def broken(*args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(settings_command.Command, "run", broken)
    assert main(["settings"]) == 2
    assert "icecrawler settings: error: Broken pipe" in capsys.readouterr().err


def test_every_argument_of_every_subcommand_says_what_it_is_and_its_default() -> None:
    """``--help`` is the operator's reference: no option or positional without a help text, and an option with a
    default other than empty or off says it (``%(default)s`` or the value in words)."""
    import argparse

    from icecrawler_cli.cli import _load_commands, build_parser

    parser = build_parser(_load_commands())
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    bare, undefaulted = [], []
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help:
                bare.append(label)
            elif (
                action.option_strings
                and action.default not in (None, False, "", [], 0)
                and "default" not in action.help
            ):
                undefaulted.append(label)
    assert bare == [], f"arguments without a help text: {bare}"
    assert undefaulted == [], f"options whose help does not give their default: {undefaulted}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--duration", "nan"], "--duration nan: give a finite number above 0"),
        (["--speed", "inf"], "--speed inf: give a finite number above 0"),
        (["--drain-timeout", "-1"], "--drain-timeout -1.0: give a finite number of 0 or more"),
        (["--clients", "0"], "--clients 0: give 1 or more"),
    ],
)
def test_demo_refuses_a_bad_number_before_starting_anything(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--duration nan`` passed the ``<= 0`` check and ran a whole demo; ``--drain-timeout`` was not checked."""
    assert main(["demo", *args, "--var-dir", str(tmp_path / "var"), "--output-dir", str(tmp_path / "out")]) == 2
    assert f"icecrawler demo: error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "var").exists() and not (tmp_path / "out").exists()


def test_demo_refuses_an_output_dir_it_cannot_make_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plot and summary.json go to --output-dir at the very end: one that cannot be made (a file stands where the
    folder would be) was found only after the whole crawl and drain, their result thrown away."""
    taken = tmp_path / "out"
    taken.write_text("a file, not a folder")
    assert main(["demo", "--duration", "1", "--var-dir", str(tmp_path / "var"), "--output-dir", str(taken)]) == 2
    captured = capsys.readouterr()
    assert f"icecrawler demo: error: --output-dir {taken}: File exists" in captured.err
    assert "starting the sandbox" not in captured.out and not (tmp_path / "var").exists()


def test_a_second_demo_on_the_same_var_dir_is_refused_before_it_empties_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second ``icecrawler demo`` (``make demo`` in another terminal) emptied --var-dir under the running one,
    its databases and logs, judged that one's crawl by its own store, and removed the other's directory at its end."""
    from icecrawler_local.demo import var_dir_lock

    var = tmp_path / "var"
    (var / "logs").mkdir(parents=True)
    (var / "logs" / "scheduler.log").write_text("the running demo's log")
    with var_dir_lock(var):  # the running demo holds it
        code = main(["demo", "--duration", "1", "--var-dir", str(var), "--output-dir", str(tmp_path / "out")])
    assert code == 2
    assert f"icecrawler demo: error: --var-dir {var} is in use by demo pid {os.getpid()}" in capsys.readouterr().err
    assert (var / "logs" / "scheduler.log").read_text() == "the running demo's log"


def test_a_demo_whose_lock_file_cannot_be_made_runs_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock beside --var-dir is made in its parent, which may take no file (``--var-dir /data`` under a
    root-owned ``/``): the demo exited 2 where it used to run. It warns and runs. The crawl itself is stood in for
    (it is what tests/e2e/test_demo.py runs); the lock is a real one on a path no file can have."""
    from icecrawler.datalock import DataLock
    from icecrawler_local import demo

    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(demo, "var_dir_lock", lambda var_dir: DataLock(tmp_path / "a-file" / ".var.lock", "demo"))
    ran: list[Path] = []

    def crawl(self: object, args: object, scenario: object, var_dir: Path, output_dir: Path) -> int:
        ran.append(var_dir)
        return 0

    monkeypatch.setattr(demo.Demo, "_run_locked", crawl)
    var = tmp_path / "var"
    assert main(["demo", "--duration", "1", "--var-dir", str(var), "--output-dir", str(tmp_path / "out")]) == 0
    assert ran == [var]
    out = capsys.readouterr().out
    assert "icecrawler demo: warning: cannot create the lock file" in out and "would not be refused" in out


def test_demo_takes_a_drain_timeout_of_0() -> None:
    """``--drain-timeout 0`` (summarize at the cut-off, no drain) ran before the numeric options were checked."""
    from icecrawler_local.demo import bad_numbers

    good = argparse.Namespace(duration=60.0, speed=60.0, every=5.0, clients=1, drain_timeout=0.0)
    assert bad_numbers(good) == ""
    assert "give a finite number of 0 or more" in bad_numbers(
        argparse.Namespace(**{**vars(good), "drain_timeout": -1.0})
    )


@pytest.mark.parametrize("command", ["status", "seed"])
def test_a_proxy_property_on_the_command_line_says_where_it_goes(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--Scheduler.Proxy=...`` is not an Ice option (docs/ICE.md): ``seed`` took it for an id ("unknown source
    '--Scheduler.Proxy=scheduler'"), the others for an unknown argument. Now both say to put it in the file."""
    proxy = "--Scheduler.Proxy=scheduler:tcp -h 127.0.0.1 -p 10000"
    assert main([command, proxy, *(["jd:100012043978"] if command == "seed" else [])]) == 2
    err = capsys.readouterr().err
    assert "unknown source" not in err and "property file" in err and "--Ice.Config=FILE" in err, err


def test_the_two_config_files_given_the_wrong_way_round_say_which_flag_takes_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The settings (TOML, ``-c``) and the Ice properties (``--Ice.Config=``) swapped: the TOML was read as Ice
    properties (a warning per table, then the default endpoints), the property file as invalid TOML."""
    settings, properties = tmp_path / "icecrawler.toml", tmp_path / "client.conf"
    settings.write_text('[scheduler]\ndb_dir = "var/scheduler"\n')
    properties.write_text("Scheduler.Proxy=scheduler:tcp -h 127.0.0.1 -p 10000\n")
    assert main(["status", f"--Ice.Config={settings}"]) == 2
    err = capsys.readouterr().err
    assert "settings file" in err and f"-c {settings}" in err and "invalid config file entry" not in err, err
    assert main(["status", "-c", str(properties)]) == 2
    err = capsys.readouterr().err
    assert "invalid TOML" in err and f"--Ice.Config={properties}" in err, err


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["seed", "jd:100012043978", "--lsting", "ecshop:1"],
            "icecrawler seed: error: unrecognized arguments: --lsting ecshop:1; did you mean --listing?",
        ),
        (["status", "--tsk", "reviews:jd:1"], "icecrawler status: error: unrecognized arguments: --tsk"),
        (["sede", "jd:100012043978"], "icecrawler: error: argument COMMAND: invalid choice: 'sede' (choose from"),
        (["tasks", "--limit", "abc"], "icecrawler tasks: error: argument --limit: invalid int value: 'abc'"),
        (["hold"], "icecrawler hold: error: the following arguments are required: host"),
    ],
)
def test_a_mistyped_command_or_option_is_one_line_that_names_the_command(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The other errors of the CLI are one line; argparse's printed the usage first, and an option a subcommand does
    not have was blamed on ``icecrawler`` itself under the top-level usage (``icecrawler: error: unrecognized
    arguments: --lsting``). Now: one line, the command named, a close match offered, and where the usage is."""
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith(line) and err.count("\n") == 1 and "usage:" not in err, err
    command = "icecrawler" if args[0] == "sede" else f"icecrawler {args[0]}"
    assert err.rstrip().endswith(f"(see {command} --help)"), err
    if args[0] == "sede":
        assert "did you mean seed?" in err, err


@pytest.mark.parametrize("name", ["", *COMMAND_MODULES])
def test_help_prose_fits_the_terminal(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command's description was printed as written: paragraphs of 300-500 characters on one line, which an
    80-column terminal broke mid-word. Prose is wrapped to the width; indented lines (examples) stay as written."""
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main([name, "--help"] if name else ["--help"])
    long = [line for line in capsys.readouterr().out.splitlines() if len(line) > 80 and not line[:1].isspace()]
    assert long == [], long


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        ("argument COMMAND: invalid choice: 'sede' (choose from 'scheduler', 'seed')", "; did you mean seed?"),
        ("argument COMMAND: invalid choice: 'sede' (choose from scheduler, seed, status)", "; did you mean seed?"),
        ("argument --role: invalid choice: 'clinet' (choose from 'client', 'admin')", "; did you mean client?"),
        ("argument --role: invalid choice: 'clinet' (choose from client, admin, reader)", "; did you mean client?"),
        ('argument --role: invalid choice: "it\'s" (choose from its, admin)', "; did you mean its?"),
    ],
)
def test_a_close_choice_is_found_in_either_form_of_argparse_s_list(message: str, hint: str) -> None:
    """argparse quoted each choice (``'seed', 'status'``) until gh-86357 (CPython 3.12.8, 3.13.1), and lists them
    bare since (``seed, status``): a mistyped command or choice gets its suggestion on either."""
    from icecrawler_cli.cli import _Parser

    assert _Parser(prog="icecrawler")._close_match(message) == hint


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--log-json", "status"], "--log-json is an option of `icecrawler status`: put it after the subcommand"),
        (["--json", "settings"], "--json is an option of `icecrawler settings`: put it after the subcommand"),
        (["--set=client.workers=2", "status"], "--set is an option of `icecrawler status`: put it after"),
        (["--log-level", "DEBUG", "status"], "--log-level is an option of `icecrawler status`: put it after"),
        (["-c", "x.toml", "seed", "jd:1"], "-c is an option of `icecrawler seed`: put it after the subcommand"),
        # An option of several values leaves the word after them to be the command.
        (["--from", "a", "reshard", "--to", "b"], "--from is an option of `icecrawler reshard`: put it after"),
        (["--from", "reshard"], "--from is an option of `icecrawler reshard`: put it after"),
        # A subcommand's name as an option's value is not the subcommand (a settings file named "seed").
        (["-c", "seed", "status"], "icecrawler status: error: unrecognized arguments: -c seed; -c is an option of"),
        (
            ["--log-level", "status", "seed"],
            "arguments: --log-level status; --log-level is an option of `icecrawler seed`",
        ),
        (["-s", "a=1", "-c", "seed", "status"], "-s is an option of `icecrawler status`: put it after the subcommand"),
    ],
)
def test_an_option_given_before_its_subcommand_is_said_to_go_after_it(
    args: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``icecrawler --log-json status`` suggested the very word given (``did you mean --log-json?``), and
    ``icecrawler --log-level DEBUG status`` took DEBUG for the command (``invalid choice: 'DEBUG'``); the option is
    the subcommand's, only in the wrong place."""
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert hint in err and "did you mean" not in err and "invalid choice" not in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("args", "unrecognized"),
    [
        (["status", "--", "--json"], "-- --json"),
        (["settings", "--", "--json", "--log-json"], "-- --json --log-json"),
        (["-c", "seed"], "-c"),
        (["--log-level", "seed"], "--log-level"),
    ],
)
def test_an_option_of_the_command_not_before_it_gets_no_hint_to_move_it(
    args: list[str], unrecognized: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``icecrawler status -- --json`` was told "--json is an option of `icecrawler status`: put it after the
    subcommand", though it was after it (``--`` made it an argument). The hint is only for a word that came before
    the subcommand; where the only command word is an option's value (``-c seed``: a settings file named "seed"),
    which command was meant is unknown, so there is none either, and no other option is offered for the command's
    own."""
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    command = args[0] if args[0][0] != "-" else args[1]
    assert info.value.code == 2
    assert err.startswith(f"icecrawler {command}: error: unrecognized arguments: {unrecognized} (see"), err
    assert "put it after" not in err and "did you mean" not in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        ("argument action: invalid choice: 'stat' (choose from 'start', 'stop', 'status')", "; did you mean status?"),
        ("argument action: invalid choice: 'stat' (choose from start, stop, status)", "; did you mean status?"),
        ("argument action: invalid choice: 'sta' (choose from start, stop, status)", "; did you mean start or status?"),
        (
            "argument action: invalid choice: 'st' (choose from start, stop, status)",
            "; did you mean start, stop or status?",
        ),
        (
            "argument action: invalid choice: 'strat' (choose from start, stop, status)",
            "; did you mean start or status?",
        ),
        ("argument action: invalid choice: 'stauts' (choose from start, stop, status)", "; did you mean status?"),
        ("argument COMMAND: invalid choice: 's' (choose from scheduler, storage, seed, status, hbase)", ""),
    ],
)
def test_a_choice_the_word_begins_is_preferred_and_close_ones_are_all_named(message: str, hint: str) -> None:
    """``icecrawler hbase stat`` suggested ``start`` (difflib's closest), which starts HBase, for ``status``: a
    choice the typed word begins comes first, and where several are as close, all of them are named (none where
    that is over three: the message lists the choices)."""
    from icecrawler_cli.cli import _Parser

    assert _Parser(prog="icecrawler hbase")._close_match(message) == hint


def test_a_truncated_action_is_completed_not_replaced(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["hbase", "stat"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "invalid choice: 'stat'" in err and "; did you mean status? (see icecrawler hbase --help)" in err, err


@pytest.mark.parametrize(
    "args",
    [["status", "--quiet"], ["status", "--host", "x"], ["remove", "x", "--yes"], ["status", "--version"]],
)
def test_an_unknown_option_like_none_of_the_command_s_gets_no_suggestion(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Whole words were compared, so the ``--`` every option shares lifted ``--quiet``, ``--host`` and ``--yes`` to
    ``--set`` and ``--version`` to ``--json``: suggestions that misled. (``--lsting`` still gets ``--listing``, and
    ``sede`` gets ``seed``: the test above.)"""
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"icecrawler {args[0]}: error: unrecognized arguments: " in err and "did you mean" not in err, err


@pytest.mark.parametrize("name", ["", *COMMAND_MODULES])
def test_help_prose_starts_each_sentence_as_one(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines of a description are joined into paragraphs, so a line that began with an action's name read as a
    sentence cut in two (``... may call nothing. issue writes NODE.pem``): each sentence starts as one (``e.g. a``
    is not a sentence's end)."""
    monkeypatch.setenv("COLUMNS", "2000")
    with pytest.raises(SystemExit):
        main([name, "--help"] if name else ["--help"])
    prose = [line for line in capsys.readouterr().out.splitlines() if not line[:1].isspace()]
    cut = [found for line in prose for found in re.findall(r"\S*(?<!\.[a-z])[a-z)]\. [a-z]\S*", line)]
    assert cut == [], cut


def test_certs_role_help_lists_what_each_role_may_call() -> None:
    """``certs --role``'s help said a client may call "lease, report, write, status" while
    ``security.PERMISSIONS`` also gives it the account cookies with a lease: each role's list is what it grants."""
    from icecrawler.security import PERMISSIONS, TRUSTED
    from icecrawler_cli.cli import _command_parser, _load_commands, build_parser

    words = {"lease": "lease", "report": "report", "write": "write", "status": "status", "cookies": "cookies"}
    words |= {"add": "seed", "remove": "remove", "hold": "hold"}
    assert set(words) == TRUSTED
    certs = _command_parser(build_parser(_load_commands(["certs"])), "certs")
    text = next(action.help for action in certs._actions if "--role" in action.option_strings)
    assert text is not None
    for role, granted in PERMISSIONS.items():
        listed = re.sub(r"; no [^;]*", "", re.findall(rf"\b{role} \(([^)]*)\)", text)[0])
        assert {name for name, word in words.items() if re.search(rf"\b{word}\b", listed)} == granted, (role, text)
