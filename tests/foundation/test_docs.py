"""The repository stands on its own: no tracked file points at a document the repository does not contain.

Checked over every tracked text file: names of the developers' notes kept outside the repository
(docs/ARCHITECTURE.md, "Where the facts live", says where their facts are written instead), numbered rules of a
style guide the repository does not have, ``§`` section references whose document is missing, ``*.md`` names
that match no tracked file, and relative Markdown links that do not resolve."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Iterator, Set
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
