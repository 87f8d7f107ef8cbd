"""Every relative link in README.md and docs/ leads somewhere: the file exists, and a
`#fragment` names a heading (or an explicit anchor) of that file, as GitHub renders it.

Links to web addresses are not followed. Links inside code (fenced blocks, `inline code`)
are not links."""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
                    *(ROOT / "wheels").glob("*.md")])

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and [text](target "title"); images (![..](..)) too.
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with inline code blanked."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, INLINE_CODE.sub("", line)


def slug(heading):
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation other than
    '-' and '_' removed, each space a '-'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)   # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    kept = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(path, cache={}):
    """Every fragment a link may name in `path`."""
    if path not in cache:
        found = set()
        seen = {}
        fenced = False
        for line in path.read_text(encoding="utf-8").splitlines():
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            found.update(ANCHOR.findall(line))
            match = HEADING.match(line)
            if match:
                base = slug(match.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
        cache[path] = found
    return cache[path]


def links(path):
    """(line number, target) of every relative link in `path`."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        targets = LINK.findall(line)
        reference = REFERENCE.match(line)
        if reference:
            targets.append(reference.group(1))
        for target in targets:
            if not EXTERNAL.match(target):
                yield number, target


def broken(path, target):
    """Why `target`, linked from `path`, leads nowhere; None when it resolves."""
    file_part, _, fragment = target.partition("#")
    destination = (path.parent / file_part).resolve() if file_part else path
    if not destination.exists():
        return f"{file_part} does not exist"
    if fragment:
        if destination.is_dir() or destination.suffix != ".md":
            return f"#{fragment} points into {file_part}, which is not a Markdown file"
        if fragment not in anchors(destination):
            return f"{destination.relative_to(ROOT)} has no heading or anchor #{fragment}"
    return None


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document):
    problems = [f"{document.relative_to(ROOT)}:{number}: ({target}) {reason}"
                for number, target in links(document)
                if (reason := broken(document, target)) is not None]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_slugs_follow_github():
    assert slug("kraftcore's extension: BrokerEpoch") == "kraftcores-extension-brokerepoch"
    assert slug("Start-up (embedded)") == "start-up-embedded"
    assert slug("Raft storage and snapshots (`kraftcore.runtime.raft_storage`, "
                "`kraftcore.log.snapshots`)") == \
        "raft-storage-and-snapshots-kraftcoreruntimeraft_storage-kraftcorelogsnapshots"
    assert slug("1. Write the config") == "1-write-the-config"


def test_the_architecture_page_states_the_layers_and_maps_every_module():
    """docs/architecture.md's layer block is pyproject.toml's import contract, line for
    line, and its package map names every package and top-level module."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c["type"] == "layers")
    layers = [" | ".join(name.strip().removeprefix("kraftcore.") for name in line.split("|"))
              for line in contract["layers"]]
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"^## The layers$.*?^```\n(.*?)^```$", page, re.M | re.S)
    assert block, "docs/architecture.md has no layer block under '## The layers'"
    assert block.group(1).splitlines() == layers

    package = ROOT / "src" / "kraftcore"
    names = {p.name + "/" for p in package.iterdir()
             if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    mapped = set(re.findall(r"^\| `([^`]+)`", page, re.M))
    mapped |= {name.strip("` ") for row in re.findall(r"^\| (`[^|]+)\|", page, re.M)
               for name in row.split(",")}
    assert sorted(names - mapped) == []
