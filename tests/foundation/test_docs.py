"""The repository stands on its own: no tracked file points at a document the repository does not contain.

Checked over every tracked text file: names of the developers' notes kept outside the repository
(docs/ARCHITECTURE.md, "Where the facts live", says where their facts are written instead), numbered rules of a
style guide the repository does not have, ``§`` section references whose document is missing, ``*.md`` names
that match no tracked file, and relative Markdown links that do not resolve. And the step-by-step guides
(CONTRIBUTING.md's "Adding a source", a setting, a metric, an operation; docs/ARCHITECTURE.md's walk through the
code) cite only files, modules, names, subcommands and make targets that exist. Every ``icecrawler ...`` command
line the Markdown docs show names a subcommand and options its parser has, and every repository path they name is
there."""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
from collections.abc import Iterator, Set
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def digest(name: str) -> str:
    """First 16 hex digits of the SHA-256 of a lower-case name."""
    return hashlib.sha256(name.lower().encode()).hexdigest()[:16]


#: The outside notes, by the digests of their lower-case names, so that this file names none of them either: a
#: notes file (an upper-case name with underscores) or a bare upper-case ``*.md`` stem with one of these digests
#: is a pointer to an outside note ...
OUTSIDE_NOTE_DIGESTS = frozenset(
    {
        "7cf75110e4818776",
        "0f50b88818937ec1",
        "fe001038344d17cf",
        "197129aec34bcd18",
        "a77de8a6daa11295",
        "cb86eb2d914d37df",
        "c2792b4380a5e497",
    }
)
#: ... and so is any ``*.md`` file whose stem ends (after ``_``) in a name with one of these digests: a name that
#: only ends like an outside note reads as a pointer to it.
OUTSIDE_ENDING_DIGESTS = frozenset({"c2792b4380a5e497"})
#: The folders that hold the outside notes (the outer one, and the one inside it), kept as bare names so that no
#: line of this file is itself a path into them (docs/ARCHITECTURE.md, "Where the facts live").
OUTSIDE_FOLDERS = ("shared", "reference")
#: A path into those folders: anything under the outer one, or an upper-case note name under the inner one.
OUTSIDE_PATH = re.compile(rf"(?<![\w.-]){OUTSIDE_FOLDERS[0]}/|(?<![\w.-]){OUTSIDE_FOLDERS[1]}/[A-Z_]+")
#: An upper-case name with underscores (how notes files are named), and a Markdown file name with its stem.
UPPER_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
MD_STEM = re.compile(r"(?<![\w-])([\w-]+)\.md\b")
#: A numbered rule of a style guide: the repository has none, so every such reference points outside.
GUIDE_RULE = re.compile(r"\b[A-Z]{2,} rule \d+")
#: A Markdown file name, possibly with a path: docs/SITE_RESPONSES.md, CHANGELOG.md.
MD_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
#: A section sign with the document it belongs to somewhere before it on the line.
SECTION = re.compile(r"§")
#: [text](target) in Markdown, target without a scheme.
MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: This file names the patterns it looks for.
SELF = Path(__file__).resolve().relative_to(REPO).as_posix()


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = []
    for name in listed.decode().split("\0"):
        path = REPO / name
        if not name or name == SELF or not path.is_file():
            continue
        head = path.read_bytes()[:4096]
        if b"\0" in head:  # binary (images)
            continue
        files.append(path)
    return files


def outside_names(
    line: str, whole: Set[str] = OUTSIDE_NOTE_DIGESTS, endings: Set[str] = OUTSIDE_ENDING_DIGESTS
) -> Iterator[str]:
    """The names and paths on ``line`` that point at the outside notes (``whole``, ``endings``: their digests)."""
    yield from (match.group(0) for match in OUTSIDE_PATH.finditer(line))
    yield from (match.group(0) for match in GUIDE_RULE.finditer(line))
    for match in UPPER_NAME.finditer(line):
        parts = match.group(0).split("_")
        if any(digest("_".join(parts[k:])) in whole for k in range(len(parts))):
            yield match.group(0)
    for match in MD_STEM.finditer(line):
        stem, bare = match.group(1), match.start() == 0 or line[match.start() - 1] not in "/."
        if (bare and stem.isupper() and digest(stem) in whole) or digest(stem.rsplit("_", 1)[-1]) in endings:
            yield match.group(0)


def could_refer(line: str) -> bool:
    """A cheap first look: only these lines can hold any of the references the tests look for."""
    marks = (".md", "§", " rule ", *(f"{folder}/" for folder in OUTSIDE_FOLDERS))
    return any(mark in line for mark in marks) or bool(UPPER_NAME.search(line))


def lines_of(files: list[Path]) -> list[tuple[str, int, str]]:
    """(repository path, line number, line) of every line that could hold a reference (most lines cannot)."""
    found: list[tuple[str, int, str]] = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        name = path.relative_to(REPO).as_posix()
        found.extend(
            (name, number, line) for number, line in enumerate(text.splitlines(), start=1) if could_refer(line)
        )
    return found


@pytest.fixture(scope="module")
def files() -> list[Path]:
    found = tracked_text_files()
    assert len(found) > 100, "git ls-files found too few files; is this a checkout?"
    return found


@pytest.fixture(scope="module")
def lines(files: list[Path]) -> list[tuple[str, int, str]]:
    return lines_of(files)


@pytest.fixture(scope="module")
def md_names(files: list[Path]) -> set[str]:
    """Every tracked Markdown file, by repository path and by base name."""
    paths = {path.relative_to(REPO).as_posix() for path in files if path.suffix == ".md"}
    return paths | {Path(path).name for path in paths}


def test_no_reference_to_notes_kept_outside_the_repository(lines: list[tuple[str, int, str]]) -> None:
    found = [f"{name}:{number}: {line.strip()}" for name, number, line in lines if any(outside_names(line))]
    assert found == [], "references to documents outside the repository:\n" + "\n".join(found)


def known(name: str, where: str, md_names: set[str]) -> bool:
    """Whether ``name`` (as written in the file ``where``) is a Markdown file of the repository: by repository
    path or base name, or as a path relative to ``where``'s folder."""
    if name in md_names:
        return True
    relative = (REPO / where).parent / name
    return relative.resolve().is_relative_to(REPO) and relative.resolve().relative_to(REPO).as_posix() in md_names


def test_every_named_markdown_file_exists(lines: list[tuple[str, int, str]], md_names: set[str]) -> None:
    found = [
        f"{name}:{number}: {match}"
        for name, number, line in lines
        for match in MD_NAME.findall(line)
        if not known(match, name, md_names)
    ]
    assert found == [], "named *.md files the repository does not contain:\n" + "\n".join(found)


def test_every_section_reference_names_a_document_of_the_repository(
    lines: list[tuple[str, int, str]], md_names: set[str]
) -> None:
    """A ``§`` must follow, on its line, the name of a Markdown file the repository has (or sit in that very
    Markdown file, which then cites itself)."""
    found = []
    for name, number, line in lines:
        for sign in SECTION.finditer(line):
            before = MD_NAME.findall(line[: sign.start()])
            if not (before and known(before[-1], name, md_names)) and not name.endswith(".md"):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == [], "section references without a document of the repository:\n" + "\n".join(found)


def test_relative_markdown_links_resolve(files: list[Path]) -> None:
    found = []
    for path in files:
        if path.suffix != ".md":
            continue
        for match in MD_LINK.finditer(path.read_text(encoding="utf-8")):
            target = match.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # an anchor in the same file, or a URL
            if not (path.parent / target).exists():
                found.append(f"{path.relative_to(REPO).as_posix()}: ({match.group(1)})")
    assert found == [], "relative links that do not resolve:\n" + "\n".join(found)


#: A dotted name in backticks: a setting (``scheduler.record_cache``) when its prefix is a settings prefix.
DOTTED = re.compile(r"`{1,2}([a-z]+\.[a-z_][a-z0-9_.]*)`{1,2}")
#: File and host names that look like settings (``client.conf``, ``scheduler.json``, ``security.weibo.com``).
FILE_SUFFIXES = (
    *("conf", "toml", "json", "py", "md", "pem", "service", "xml", "example", "sqlite3", "png", "ice"),
    *("com", "cn", "net", "org"),
)


def test_every_setting_the_docs_name_exists(files: list[Path]) -> None:
    """A setting named in the Markdown docs is a key of ``default_settings`` or one a source declares (or the
    start of some keys)."""
    from icecrawler.settings import Settings

    known = Settings().include_sources().as_dict()
    prefixes = {key.split(".", 1)[0] for key in known}
    found = []
    for path in files:
        if path.suffix != ".md":
            continue
        for match in DOTTED.finditer(path.read_text(encoding="utf-8")):
            name = match.group(1).rstrip(".")
            if name.split(".", 1)[0] not in prefixes or name.rsplit(".", 1)[-1] in FILE_SUFFIXES:
                continue
            if name not in known and not any(key.startswith(name + ".") for key in known):
                found.append(f"{path.relative_to(REPO).as_posix()}: {name}")
    assert found == [], "settings the docs name that do not exist:\n" + "\n".join(found)


def test_the_checks_catch_what_they_look_for() -> None:
    """The patterns themselves, on made-up lines (so that an empty result above means something). The note names
    are made up too (``WIRE_NOTES``, ``GUIDE``, ``LAYOUTS``), with their digests standing in for the real ones."""
    whole, endings = {digest("wire_notes"), digest("guide"), digest("layouts")}, {digest("layouts")}

    def flags(line: str) -> list[str]:
        return list(outside_names(line, whole, endings))

    assert len(OUTSIDE_NOTE_DIGESTS) == 7 and OUTSIDE_ENDING_DIGESTS <= OUTSIDE_NOTE_DIGESTS
    assert flags("(CODING rule 3)") == ["CODING rule 3"]
    assert MD_NAME.findall("see LAYOUTS.md §2.5 and docs/ICE.md") == ["LAYOUTS.md", "docs/ICE.md"]
    assert MD_NAME.findall("files *.md in docs") == []
    outer, inner = OUTSIDE_FOLDERS
    assert flags(f"see {outer}/{inner}/x") and flags(f"(`{inner}/LAYOUTS.md`)")
    assert flags("see LAYOUTS.md §2.5") and not flags("see docs/SITE_RESPONSES.md §2.5")
    # a name that only ends like the outside note reads as a pointer to it as well
    assert flags("see docs/SITE_LAYOUTS.md §2.5")
    assert flags("WIRE_NOTES.md, section 3") and flags("see GUIDE.md") and flags("the OLD_WIRE_NOTES")
    assert not flags("https://docs.python.org/3/reference/datamodel.html")
    assert not flags("docs/GUIDE_BOOK.md and tests/fixtures_shared/x") and not flags("docs/GUIDE.md")
    assert not flags("a guide.md in lower case") and not flags("RATE_DAY_ANCHOR and MAX_ITEMS")
    assert MD_LINK.findall("[a](docs/A.md#x) and [b](https://x.org)") == ["docs/A.md#x", "https://x.org"]
    assert DOTTED.findall("`scheduler.record_cache` in ``client.conf``") == ["scheduler.record_cache", "client.conf"]


#: The step-by-step guides a newcomer follows to the letter: (document, section).
GUIDES = (
    ("CONTRIBUTING.md", "Adding a source"),
    ("CONTRIBUTING.md", "Adding an operation to the contract"),
    ("CONTRIBUTING.md", "Adding a setting"),
    ("CONTRIBUTING.md", "Adding a metric"),
    ("docs/ARCHITECTURE.md", "One task through the code"),
)
#: A fenced block (a shell session: not checked) and an inline code span.
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
#: A Python name, dotted or not (``_detect.check_http``, ``Review.id``, ``CASES``).
PY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
#: A module named without its package is looked for in these (``_detect``, ``rpc``, ``moves``, ``gateways``).
NAME_PACKAGES = (
    *("crawler_client.sources", "crawler_client", "scheduler_server", "storage_server"),
    *("icecrawler", "sandbox", "icecrawler_local", "shhd"),
)
#: A top-level definition: ``class X``, ``def x``, ``X = ...`` or ``X: T = ...``.
DEFINITION = re.compile(r"^(?:class|def)\s+(\w+)|^(\w+)\s*[:=]", re.M)
#: File kinds a guide names without their folder (``checks.py``, ``icecrawler-rules.test.yml``).
FILE_KINDS = (".py", ".yml", ".yaml", ".ice", ".json", ".md", ".toml")
#: What ``_member`` gives for a field declared without a value: it exists, and has no members of its own to look up.
DECLARED = object()


@dataclass(frozen=True)
class Checkout:
    """What the names a guide cites are checked against."""

    #: The base names of the tracked files.
    file_names: frozenset[str]
    #: Every tracked Python and Slice file, as one text.
    code: str
    #: The settings prefixes (``scheduler``, ``sources``...): a dotted name that starts with one is a setting.
    prefixes: frozenset[str]
    #: A top-level name -> the modules of the product packages (tests excluded) that define it.
    defined: dict[str, tuple[str, ...]]


def checkout_of(files: list[Path]) -> Checkout:
    from icecrawler.settings import Settings

    packages = {path.parts[0] for path in (p.relative_to(REPO) for p in files) if path.name == "__init__.py"}
    defined: dict[str, tuple[str, ...]] = {}
    texts = []
    for path in files:
        if path.suffix not in (".py", ".ice"):
            continue
        text = path.read_text(encoding="utf-8")
        texts.append(text)
        relative = path.relative_to(REPO).with_suffix("")
        if path.suffix != ".py" or relative.parts[0] not in packages - {"tests"}:
            continue
        module = ".".join(relative.parts[:-1] if relative.name == "__init__" else relative.parts)
        for match in DEFINITION.finditer(text):
            name = match.group(1) or match.group(2)
            defined[name] = (*defined.get(name, ()), module)
    return Checkout(
        file_names=frozenset(path.name for path in files),
        code="\n".join(texts),
        prefixes=frozenset(key.split(".", 1)[0] for key in Settings().include_sources().as_dict()),
        defined=defined,
    )


def guide_section(document: str, title: str) -> str:
    """The ``## title`` section of a Markdown document (up to the next ``## ``), without its fenced blocks."""
    text = (REPO / document).read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"{document} has no section {title!r}"
    return FENCE.sub("", match.group(1))


def _member(owner: object, name: str) -> object | None:
    """``owner``'s (a module's or class's) ``name``, or None: an attribute, a submodule, ``DECLARED`` for a field or
    class variable declared without a value (a dataclass's ``Review.id``, a protocol's ``name: ClassVar[str]``), or
    for a module a method of a class it defines (the walk-through's ``moves.end_lease``)."""
    import importlib
    import inspect

    if hasattr(owner, name):
        return getattr(owner, name)
    if inspect.ismodule(owner):
        try:
            return importlib.import_module(f"{owner.__name__}.{name}")
        except ModuleNotFoundError:
            classes = [value for value in vars(owner).values() if inspect.isclass(value)]
            own = [klass for klass in classes if klass.__module__ == owner.__name__]
            return next((getattr(klass, name) for klass in own if hasattr(klass, name)), None)
    declared = any(name in getattr(klass, "__annotations__", {}) for klass in getattr(owner, "__mro__", ()))
    return DECLARED if declared else None


def resolves(dotted: str, defined: dict[str, tuple[str, ...]]) -> bool:
    """Whether a dotted name of a guide names a module, class, function, method or field of the code: its first
    part is a package, a module of ``NAME_PACKAGES`` or a name a product module defines (``SchedulerCore.lease``)."""
    import importlib

    first, *rest = dotted.split(".")
    owners: list[object] = []
    top = [first] if (REPO / first / "__init__.py").is_file() else []
    for name in [*top, *(f"{package}.{first}" for package in NAME_PACKAGES)]:
        try:
            owners.append(importlib.import_module(name))
        except ModuleNotFoundError:
            continue
    owners += [getattr(importlib.import_module(module), first, None) for module in defined.get(first, ())]
    for owner in owners:
        found: object | None = owner
        for part in rest:
            found = None if found is None or found is DECLARED else _member(found, part)
        if found is not None:
            return True
    return False


def guide_problem(token: str, checkout: Checkout) -> str | None:
    """Why one code span of a guide names nothing the repository holds, or None: a path (placeholders such as
    ``<name>`` stand for any file of the folder they are in), a file by its bare name, an ``icecrawler`` subcommand,
    a ``make`` target, a dotted Python name (imported), or a bare one (it must occur in the code). Settings are left
    to ``test_every_setting_the_docs_name_exists``; values and placeholders are no names."""
    token = token.strip()
    if token.startswith(("icecrawler ", "make ")):
        command, word = token.split()[:2]
        if command == "make":
            makefile = (REPO / "Makefile").read_text(encoding="utf-8")
            return None if re.search(rf"^{re.escape(word)}:", makefile, re.M) else f"no make target {word!r}"
        module = REPO / "icecrawler_cli" / "commands" / f"{word}.py"
        return None if module.is_file() else f"no icecrawler subcommand {word!r}"
    if token.split(".", 1)[0] in checkout.prefixes or token.startswith("/"):
        return None  # a setting, or a path outside the checkout
    if "/" in token and ":" not in token:
        stem = re.split(r"[<*]", token, maxsplit=1)[0]
        if stem != token:  # a placeholder: the folder it stands in must exist
            folder = REPO / stem if stem.endswith("/") else (REPO / stem).parent
            return None if folder.is_dir() else f"no folder {folder.relative_to(REPO).as_posix()!r}"
        return None if (REPO / token).exists() else f"no path {token!r}"
    if token.endswith(FILE_KINDS) and " " not in token:
        return None if token in checkout.file_names else f"no tracked file named {token!r}"
    name = re.sub(r"\([^()]*\)", "", token).lstrip("@")
    if not PY_NAME.fullmatch(name):
        return None  # a value (``"form"``, ``100万+``), a header name, a placeholder
    if "." in name or (name.startswith("_") and resolves(name, checkout.defined)):  # ``_dates``: a sources module
        return None if resolves(name, checkout.defined) else f"{name!r} does not import"
    pattern = rf"{'' if name.startswith('_') else '(?<![A-Za-z0-9_])'}{re.escape(name)}(?![A-Za-z0-9_])"
    return None if re.search(pattern, checkout.code) else f"{name!r} occurs nowhere in the code"


@pytest.fixture(scope="module")
def checkout(files: list[Path]) -> Checkout:
    return checkout_of(files)


@pytest.mark.parametrize(("document", "title"), GUIDES)
def test_every_file_module_and_name_a_guide_cites_exists(checkout: Checkout, document: str, title: str) -> None:
    """A guide that names a file that moved, a helper that was renamed or a module that went away sends the newcomer
    who follows it astray: each code span of the guides must name something that is there (``guide_problem``)."""
    spans = CODE_SPAN.findall(guide_section(document, title))
    assert len(spans) >= 10, f"{title}: too few code spans found ({len(spans)})"
    found = [f"`{span}`: {why}" for span in spans if (why := guide_problem(span, checkout))]
    assert found == [], f"{document}, {title!r}, cites what the repository lacks:\n" + "\n".join(found)


def test_the_guide_check_flags_what_is_missing_and_passes_what_is_there(checkout: Checkout) -> None:
    code = "def check_http(page): ...\ndef make_site(context): ...\nCASES = []\nname_total = 1\n"
    made_up = Checkout(frozenset({"checks.py"}), code, frozenset({"sources", "scheduler"}), checkout.defined)
    for there in (
        *("crawler_client/sources/", "sandbox/sites/<name>.py", "tests/client/test_<name>.py", "checks.py"),
        *("_detect.check_http", "base.SavedPages", "Review.id", "Tally.ensure", "crawler_client.sources.base"),
        *("sandbox.web.OpenSite", "_dates", "CASES", "check_http", "_total", "make_site(context)", "@rpc.map_errors"),
        *("SchedulerCore.lease", "moves.end_lease", "daemon._work_loop", "shhd/fingerprint.py"),
        *("icecrawler parse --source <name> FILE", "make test", "sources.<name>.*", "/opt/x.py", '"form"'),
        *("100万+", "Retry-After"),
    ):
        assert guide_problem(there, made_up) is None, there
    for missing in (
        *("crawler_client/sources/gone.py", "sandbox/nowhere/<name>.py", "moved.py", "_detect.check_nothing"),
        *("base.NoSuchClass", "Review.no_such_field", "nosuchpkg.x", "renamed_helper", "icecrawler nosuchcmd"),
        *("make nosuchtarget", "SchedulerCore.renamed", "moves.renamed_move", "_no_such_module"),
    ):
        assert guide_problem(missing, made_up) is not None, missing


def test_the_metrics_endpoint_table_gives_the_settings_defaults() -> None:
    """docs/DEPLOY.md's table of each role's /metrics address, port and span is what ``default_settings`` says."""
    from icecrawler.settings.default_settings import DEFAULTS

    doc = (REPO / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    rows = re.findall(
        r"^\| (\w+) \| `metrics\.\1\.address`, `\.port`, `\.port_span` \| `([\d.]+):(\d+)`, span (\d+) \|", doc, re.M
    )
    assert {role for role, *_ in rows} == {"scheduler", "storage", "client"}, rows
    for role, address, port, span in rows:
        settings = (DEFAULTS[f"metrics.{role}.{key}"] for key in ("address", "port", "port_span"))
        assert (address, int(port), int(span)) == tuple(settings), role


def test_every_built_in_source_has_its_rows_in_the_docs() -> None:
    """CONTRIBUTING.md's "Adding a source" asks for a row in docs/SOURCES.md's table and one in docs/SANDBOX.md's
    table of prefixes; like the fuzz cases (``tests/client/test_fuzz.py``), a source without them is named here."""
    from icecrawler.sourcespec import SOURCE_PACKAGE, registry

    sources_doc = (REPO / "docs" / "SOURCES.md").read_text(encoding="utf-8")
    sandbox_doc = (REPO / "docs" / "SANDBOX.md").read_text(encoding="utf-8")
    built_in = {
        name: spec for name, spec in registry.items() if registry.module(name).__name__.startswith(SOURCE_PACKAGE)
    }
    missing = [f"docs/SOURCES.md: | `{name}` |" for name in sorted(built_in) if f"\n| `{name}` |" not in sources_doc]
    missing += [
        f"docs/SANDBOX.md: | `/{spec.sandbox_site}` |"
        for name, spec in sorted(built_in.items())
        if spec.sandbox_site and f"\n| `/{spec.sandbox_site}` |" not in sandbox_doc
    ]
    assert not missing, f"add the table rows that start with: {missing}"


#: A command line the docs show: ``icecrawler NAME`` and its words up to the end of the command (a pipe, ``;``,
#: ``&&``, a comment, a closing parenthesis); ``\`` line continuations are joined first. IceGrid's
#: ``server template instantiate icecrawler NODE ...`` names the application, not the command.
COMMAND_LINE = re.compile(
    r"(?<![\w/.-])(?<!instantiate )icecrawler +([a-z][a-z_-]*)((?:[ \t]+(?!icecrawler\b)[^\s|;&#)`]+)*)"
)
#: An option word on such a line (``--lift``, ``--traces-shop``, ``-c``); ``--Ice.*`` and its kin go to the
#: communicator.
OPTION_WORD = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w.-])")
#: Subcommands whose further words go to something else: a benchmark takes its own options (``bench NAME --help``).
PASS_THROUGH = frozenset({"bench"})


def code_of(text: str) -> Iterator[tuple[int, str]]:
    """(line number, code) of every fenced block line (continuations joined) and every inline code span."""
    lines = text.splitlines()
    fenced = False
    number = 0
    while number < len(lines):
        line, start = lines[number], number + 1
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            while line.endswith("\\") and number + 1 < len(lines):
                number += 1
                line = line[:-1] + " " + lines[number].strip()
            yield start, line
        else:
            yield from ((start, span) for span in CODE_SPAN.findall(line))
        number += 1


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of the subcommands under it (``certs issue --dns``)."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= options_of(child)
    return found


def command_problems(text: str, commands: dict[str, set[str]]) -> list[str]:
    """What the command lines in ``text`` name that ``commands`` (subcommand -> its options) lacks."""
    problems = []
    for number, code in code_of(text):
        for match in COMMAND_LINE.finditer(code):
            name, words = match.group(1), match.group(2)
            if name not in commands:
                problems.append(f"{number}: no subcommand `icecrawler {name}`")
                continue
            if name in PASS_THROUGH:
                continue
            problems.extend(
                f"{number}: `icecrawler {name}` has no {option}"
                for option in OPTION_WORD.findall(words)
                if option not in commands[name]
            )
    return problems


@pytest.fixture(scope="module")
def cli_options() -> dict[str, set[str]]:
    """Each subcommand of the ``icecrawler`` command with its options, from the parser itself."""
    from icecrawler_cli import cli

    parser = cli.build_parser(cli._load_commands())
    (sub,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return {name: options_of(child) for name, child in sub.choices.items()}


def test_every_command_and_option_the_docs_show_exists(files: list[Path], cli_options: dict[str, set[str]]) -> None:
    """A command line a newcomer or an operator copies from the docs names a subcommand and options that exist."""
    found: list[str] = []
    for path in files:
        if path.suffix == ".md":
            name = path.relative_to(REPO).as_posix()
            found += (
                f"{name}:{problem}" for problem in command_problems(path.read_text(encoding="utf-8"), cli_options)
            )
    assert found == [], "commands the docs show that the CLI lacks:\n" + "\n".join(found)


def test_the_command_check_flags_what_is_missing_and_passes_what_is_there() -> None:
    commands = {"hold": {"--for", "--lift", "--reason"}, "bench": {"--config"}, "seed": {"--file", "--listing", "-c"}}
    there = (
        "`icecrawler hold m.weibo.cn --for 6h --reason maintenance`, then `icecrawler hold m.weibo.cn --lift`\n"
        "```sh\nicecrawler seed jd:1 \\\n    --listing ecshop:1 -c a.toml --Ice.Config=c.conf  # --not-one\n```\n"
        "`icecrawler bench scheduler --server-threads 2`; `icecrawler tasks --ids | icecrawler seed --file -`\n"
        "icecrawler is a crawler (prose, not code); `icecrawler_cli.cli` is a module\n"
        '`icegridadmin -e "server template instantiate icecrawler node3 CrawlerClient index=3"`\n'
    )
    assert command_problems(there.replace("icecrawler tasks --ids | ", ""), commands) == []
    assert command_problems(there, commands) == ["6: no subcommand `icecrawler tasks`"]
    missing = (
        "`icecrawler hold HOST --for 1h --forever`\n```sh\nicecrawler seed jd:1 \\\n  --listing x --kind user -q\n```\n"
    )
    assert command_problems(missing, commands) == [
        "1: `icecrawler hold` has no --forever",
        "3: `icecrawler seed` has no --kind",
        "3: `icecrawler seed` has no -q",
    ]


#: A path into the repository in a code span (``sandbox/sites/<name>.py``, ``docs/bench/NAME.json``,
#: ``scheduler_server/integrity.backup_checked``: a module's name after its file), recognised by its first folder.
REPO_PATH = re.compile(r"[\w.-]+(?:/[\w.*<>-]+)+/?")
#: A placeholder in a path: ``<name>``, or a word in capitals (``NAME``, ``SOURCE``).
PLACEHOLDER = re.compile(r"<[^>]+>|\b[A-Z][A-Z_]+\b(?=[./]|$)")
#: CHANGELOG.md names files as they were when each change was made; the others describe the checkout as it is.
HISTORY = frozenset({"CHANGELOG.md"})


def read(name: str) -> str:
    """A tracked file's text, by its repository path."""
    return (REPO / name).read_text(encoding="utf-8")


def path_problem(token: str, folders: Set[str]) -> str | None:
    """Why ``token`` (a path whose first folder is one of ``folders``) names nothing in the checkout, or None."""
    if token.split("/", 1)[0] not in folders:
        return None
    pattern = PLACEHOLDER.sub("*", token)
    if pattern != token or "*" in token:
        return None if any(REPO.glob(pattern.rstrip("/"))) else f"nothing matches {token}"
    if (REPO / token).exists():
        return None
    module, _, name = token.rpartition(".")
    if module and (REPO / f"{module}.py").is_file():
        defined = re.search(
            rf"^\s*(?:def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\b", read(f"{module}.py"), re.M
        )
        return None if defined else f"{module}.py defines no {name}"
    return f"no {token}"


def test_every_repository_path_the_docs_name_exists(files: list[Path]) -> None:
    """A file or folder of the checkout that the Markdown docs name in a code span is there (a module's name after
    its file, ``scheduler_server/integrity.backup_checked``, is defined in it)."""
    folders = {path.relative_to(REPO).parts[0] for path in files if len(path.relative_to(REPO).parts) > 1}
    found = []
    for path in files:
        name = path.relative_to(REPO).as_posix()
        if path.suffix != ".md" or name in HISTORY:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for span in CODE_SPAN.findall(line):
                for word in span.split():
                    token = word.strip("(),;:'\"").split("::")[0]
                    if REPO_PATH.fullmatch(token) and (problem := path_problem(token, folders)):
                        found.append(f"{name}:{number}: {problem}")
    assert found == [], "paths the docs name that the checkout lacks:\n" + "\n".join(found)


def test_the_path_check_flags_what_is_missing_and_passes_what_is_there() -> None:
    folders = {"sandbox", "docs", "scheduler_server", "deploy"}
    for there in (
        *("sandbox/sites/<name>.py", "docs/bench/NAME.json", "scheduler_server/integrity.backup_checked"),
        *("deploy/systemd/", "deploy/*.conf", "var/hbase/lib", "/etc/icecrawler/client.conf", "sites/weibo.py"),
    ):
        assert path_problem(there, folders) is None, there
    for missing in ("sandbox/sites/gone.py", "docs/nowhere/NAME.json", "scheduler_server/integrity.renamed"):
        assert path_problem(missing, folders) is not None, missing


#: A setting the docs give with a value: ```scheduler.lease_s`, 120 s by default``, ```client.shutdown_grace_s` (20 s``;
#: the words before it, to tell a suggestion (``raise `scheduler.lease_s` (300 s)``) from a default, and after it.
SETTING_WITH_VALUE = re.compile(
    r"(?P<before>\b[\w.]+ )?`(?P<key>[a-z]+\.[a-z_][a-z0-9_.]*)`(?:, | \()(?P<number>\d[\d ]*(?:\.\d+)?)"
    r"(?: ?(?P<unit>ms|s|seconds?|min|minutes?|hours?|days?|B|KB|MB|GB))?\b(?P<after> by default| default)?"
)
#: Each unit the docs write a value in, as its dimension and its size in that dimension's base (seconds, bytes).
UNITS = {
    **{"ms": ("time", 0.001), "s": ("time", 1), "second": ("time", 1), "seconds": ("time", 1)},
    **{"min": ("time", 60), "minute": ("time", 60), "minutes": ("time", 60)},
    **{"hour": ("time", 3600), "hours": ("time", 3600), "day": ("time", 86400), "days": ("time", 86400)},
    **{"B": ("size", 1), "KB": ("size", 1000), "MB": ("size", 1_000_000), "GB": ("size", 1_000_000_000)},
}
#: A key named after its unit (``lease_s``, ``latency_ms``, ``heap_mb``, ``max_body_bytes``) holds a number of it.
KEY_UNITS = {"_s": "s", "_ms": "ms", "_mb": "MB", "_bytes": "B"}
#: A word before the setting that asks for another value than the default: the value after it is a suggestion.
CHANGE_WORDS = frozenset({"raise", "lower", "increase", "decrease", "reduce", "set", "try", "e.g."})


def values_problems(text: str, defaults: dict[str, object]) -> list[str]:
    """Where ``text`` gives a setting a value other than its default. The docs quote a default right after the
    setting, as ```key` (20 s)``, ```key`, 120 s by default`` or ``(`key`, 600 s)``: each is checked, in any of
    ``UNITS`` (a key named after a unit, ``heap_mb``, counts in that unit; one without, in seconds or bytes). A value
    after a word that asks for a change (``raise `scheduler.lease_s` (300 s) for slow sites``, ``CHANGE_WORDS``) is
    a suggestion and left alone, unless it says it is the default (``(300 s by default)``)."""
    problems = []
    for match in SETTING_WITH_VALUE.finditer(text):
        key, number, unit = match["key"], float(match["number"].replace(" ", "")), match["unit"] or ""
        before = (match["before"] or "").strip().lower()
        if key not in defaults or (before in CHANGE_WORDS and not match["after"]):
            continue
        default = defaults[key]
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            continue
        quote = text[match.start("key") - 1 : match.end()]
        key_unit = next((name for suffix, name in KEY_UNITS.items() if key.endswith(suffix)), "")
        if unit and key_unit and UNITS[unit][0] != UNITS[key_unit][0]:
            problems.append(f"{quote}: {key} takes no {unit}")
            continue
        value = number * (UNITS[unit][1] if unit else 1) / (UNITS[key_unit][1] if unit and key_unit else 1)
        if abs(value - float(default)) > 1e-9 * max(1.0, abs(float(default))):
            problems.append(f"{quote}: the default is {default}")
    return problems


def test_a_setting_s_value_the_docs_give_is_its_default(files: list[Path]) -> None:
    """A default the docs quote beside a setting (``scheduler.lease_s``, 120 s) is the one ``default_settings``
    has: a default changed in the code leaves no doc saying the old one. What reads as a default, and what as a
    suggested value left alone (``raise `scheduler.lease_s` (300 s)``), is said in ``values_problems``."""
    from icecrawler.settings import Settings

    defaults = Settings().include_sources().as_dict()
    found = [
        f"{path.relative_to(REPO).as_posix()}: {problem}"
        for path in files
        if path.suffix == ".md" and path.name not in HISTORY
        for problem in values_problems(path.read_text(encoding="utf-8"), defaults)
    ]
    assert found == [], "settings the docs quote with another value than their default:\n" + "\n".join(found)


def test_the_value_check_flags_another_value_and_passes_the_default() -> None:
    defaults: dict[str, object] = {"scheduler.lease_s": 120.0, "scheduler.done_retention_s": 604800.0, "x.on": True}
    quoted = "`scheduler.lease_s`, 120 s by default; `scheduler.done_retention_s` (7 days)"
    assert values_problems(quoted, defaults) == []
    assert values_problems("`x.on` (1), `jieba.lcut` 5.04, `scheduler.lease_s` (3 minutes)", defaults) == [
        "`scheduler.lease_s` (3 minutes: the default is 120.0"
    ]


@pytest.mark.parametrize(
    "quoted",
    [
        "`x.period_s` (1 hour)",
        "`x.period_s` (60 min)",
        "`x.grace_s` (2 min), then",
        "`x.period_s`, 1 hour by default",
        "`x.period_s` (3600 seconds)",
        "`x.retention_s` (1 day)",
        "`hbase.heap_mb` (1024 MB)",
        "`x.latency_ms` (250 ms)",
        "`x.grace_s` (120 000 ms)",
        "raise `scheduler.lease_s` (300 s) for slow sites",
        "lower `x.grace_s` (30 s) on a small machine",
    ],
)
def test_the_value_check_reads_units_and_passes_a_suggestion(quoted: str) -> None:
    """Harmless wordings the check misread: a singular unit (``1 hour``), ``min``, a value in the unit a key is
    named after (``heap_mb`` in MB), and a value the docs suggest rather than quote (``raise ... (300 s)``)."""
    defaults: dict[str, object] = {
        **{"x.period_s": 3600.0, "x.grace_s": 120.0, "x.retention_s": 86400.0, "hbase.heap_mb": 1024},
        **{"x.latency_ms": 250, "scheduler.lease_s": 120.0},
    }
    assert values_problems(quoted, defaults) == []


@pytest.mark.parametrize(
    "quoted",
    [
        "`x.period_s` (2 hours)",
        "`x.grace_s` (3 min), then",
        "`hbase.heap_mb` (2048 MB)",
        "`x.latency_ms` (1 s)",
        "raise `scheduler.lease_s` (300 s by default)",
        "`scheduler.lease_s`, 300 s by default",
    ],
)
def test_the_value_check_flags_another_default_in_any_unit(quoted: str) -> None:
    defaults: dict[str, object] = {"x.period_s": 3600.0, "x.grace_s": 120.0, "hbase.heap_mb": 1024}
    defaults |= {"x.latency_ms": 250, "scheduler.lease_s": 120.0}
    assert len(values_problems(quoted, defaults)) == 1, quoted


#: The packages whose every module docs/ARCHITECTURE.md's "Where the code lives" names in the package's row; the
#: sources and the sandbox's sites are named as ``<name>.py``, one per source, in docs/SOURCES.md.
MAPPED_PACKAGES = (
    *("icecrawler", "scheduler_server", "storage_server", "crawler_client", "shhd", "sandbox"),
    "icecrawler_local",
)
ONE_PER_SOURCE = ("crawler_client/sources/", "sandbox/sites/")


def test_the_code_map_names_every_module(files: list[Path]) -> None:
    """A newcomer finds a module by its package's row of docs/ARCHITECTURE.md's table: a module missing there
    (a role's ``metrics.py`` and ``observer.py``, ``sandbox/web.py``) is one they do not know to look for."""
    doc = read("docs/ARCHITECTURE.md")
    missing = []
    for package in MAPPED_PACKAGES:
        rows = re.findall(rf"^\| `{package}/` \|.*$", doc, re.M)
        assert len(rows) == 1, f"docs/ARCHITECTURE.md has no row for `{package}/`"
        for path in files:
            name = path.relative_to(REPO).as_posix()
            if path.suffix != ".py" or path.name == "__init__.py" or not name.startswith(f"{package}/"):
                continue
            if name.startswith(ONE_PER_SOURCE):
                continue
            if not re.search(rf"`(?:[\w/]+/)?{re.escape(path.name)}`|`{re.escape(path.stem)}[`.]", rows[0]):
                missing.append(name)
    assert missing == [], f"modules docs/ARCHITECTURE.md's table does not name: {missing}"


def test_the_docs_name_each_shared_module_beside_the_sources(files: list[Path]) -> None:
    """The code map leaves the folders of one module per source to docs/SOURCES.md's ``<name>.py``; the modules
    there that are no source's (``crawler_client/sources/base.py``, the ``_*.py`` helpers, the sandbox's shared
    Weibo markup and passport) are named in docs/ARCHITECTURE.md or docs/SOURCES.md, with their folder
    (``sources/_dates.py``: another project's ``extractor/weibo.py`` is not ``sites/weibo.py``), so a newcomer
    knows they exist."""
    from icecrawler.sourcespec import registry

    docs = read("docs/ARCHITECTURE.md") + read("docs/SOURCES.md")
    missing = [
        name
        for path in files
        if (name := path.relative_to(REPO).as_posix()).startswith(ONE_PER_SOURCE)
        and path.suffix == ".py"
        and path.stem not in {*registry, "__init__"}
        and not re.search(rf"`(?:[\w/]+/)?{re.escape(f'{path.parent.name}/{path.name}')}`", docs)
    ]
    assert missing == [], f"shared modules neither docs/ARCHITECTURE.md nor docs/SOURCES.md names: {missing}"


#: CONTRIBUTING.md's line count past which a module outside ``tests/`` is named, with its size, as an exception to
#: "small modules".
LONG_MODULE_LINES = 550


def test_contributing_names_every_module_over_the_small_size(files: list[Path]) -> None:
    """CONTRIBUTING.md lists the modules outside ``tests/`` over ``LONG_MODULE_LINES`` lines ("about N" each, within
    50 lines): ``crawler_client/sources/jd.py``, about 580, was left out of the list."""
    text = " ".join(read("CONTRIBUTING.md").split())
    problems = []
    for path in files:
        name = path.relative_to(REPO).as_posix()
        size = len(path.read_text(encoding="utf-8").splitlines()) if path.suffix == ".py" else 0
        if size <= LONG_MODULE_LINES or name.startswith("tests/"):
            continue
        said = re.search(rf"`{re.escape(name)}`, about (\d+)", text)
        if said is None or abs(int(said[1]) - size) > 50:
            problems.append(f"{name} ({size} lines)")
    assert problems == [], f"CONTRIBUTING.md's 'Small modules' does not give these as about their size: {problems}"


def test_the_ice_properties_docs_ice_md_lists_are_the_ones_the_code_sets() -> None:
    """docs/ICE.md, section 1: each property of its tables, with the value we set, is one ``rpc.BASE_PROPERTIES``
    (or the client's ``CLIENT_PROPERTIES``) sets, and the tables leave none of them out."""
    from crawler_client.gateways import CLIENT_PROPERTIES
    from icecrawler.rpc import BASE_PROPERTIES

    section = read("docs/ICE.md").split("\n## 2.", 1)[0]
    rows = dict(re.findall(r"^\| `([\w.]+)` \| [^|]+ \| (\d+)(?: \w+)? \|", section, re.M))
    assert rows == {**BASE_PROPERTIES, **CLIENT_PROPERTIES}
