"""The README and the docs pages say, rendered, what their Markdown says: each is parsed with a CommonMark parser
(markdown-it, with GitHub's tables and strikethrough) and held to three rules. Every fence is closed where its
author closed it (a stray fence turns the prose after it into code, as README.md's "## The main job" once was);
every `#`-heading line outside the fences is a heading; and no text is raw HTML except the few elements a page
means, so a placeholder written as <user> outside a code span, which a browser swallows, fails here. The two
pictures, the pipeline (docs/index.md) and the layers (docs/explanation/architecture.md), are held to the stage
registry and to test_layers.py's layer table, and to Mermaid's own parser."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from tests.support.paths import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]

# A fence line: up to three spaces, three or more backticks or tildes, then the info string (a closing fence has none).
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*(.*?)\s*$")
HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")

# The raw HTML a page may mean: a comment, an anchor to link to, a fold, a line break. Anything else is text the
# renderer would swallow as an unknown element.
ALLOWED_HTML = re.compile(
    r"""<!--.*?-->\s*|<a id="[\w-]+">|</a>|</?details>|<details open>|</?summary>|<br ?/?>""", re.DOTALL
)


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _name(page: Path) -> str:
    return str(page.relative_to(REPO_ROOT))


@dataclass
class Fences:
    """The fences as the source's author wrote them, read line by line: `inside` holds the 0-based lines within a
    fence (its fence lines included); `problems` the fences that do not close where they should."""

    inside: set[int]
    problems: list[str]


def _authored_fences(lines: list[str]) -> Fences:
    """A fence line with an info string (```bash) can only open a fence, so one met inside a fence means the fence
    opened before it was a stray: the lines after the stray are prose, and it is a problem. A fence still open at
    the end of the page is one too."""
    inside: set[int] = set()
    problems: list[str] = []
    opened: tuple[int, str] | None = None  # the line and marker of the open fence
    for number, line in enumerate(lines):
        match = FENCE.match(line)
        if not match:
            continue
        marker, info = match.groups()
        if opened is None:
            opened = (number, marker)
        elif not info and marker[0] == opened[1][0] and len(marker) >= len(opened[1]):
            inside.update(range(opened[0], number + 1))
            opened = None
        elif info and "`" not in info:
            problems.append(
                f"line {opened[0] + 1}: a fence that line {number + 1} ({line.strip()!r}) shows was never meant"
            )
            opened = (number, marker)
    if opened is not None:
        problems.append(f"line {opened[0] + 1}: a fence never closed")
    return Fences(inside, problems)


def _tokens(tokens: list[Token]) -> list[Token]:
    """Every token, inline children included."""
    out: list[Token] = []
    for token in tokens:
        out.append(token)
        out.extend(_tokens(token.children or []))
    return out


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_fence_closes_where_its_author_closed_it(page):
    lines = page.read_text().splitlines()
    problems = _authored_fences(lines).problems
    # The parser's view agrees: each fence it sees ends on a closing fence line, not at the end of the page.
    for token in _parser().parse(page.read_text()):
        if token.type == "fence" and token.map is not None:
            first, end = token.map
            closing = FENCE.match(lines[end - 1]) if end - 1 > first else None
            if closing is None or closing.group(2):
                problems.append(f"line {first + 1}: a fence the renderer runs to line {end}, unclosed")
    assert not problems, f"{_name(page)}: " + "; ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_heading_outside_the_fences_renders_as_a_heading(page):
    text = page.read_text()
    lines = text.splitlines()
    authored = _authored_fences(lines).inside
    headings = {token.map[0] for token in _parser().parse(text) if token.type == "heading_open" and token.map}
    lost = [
        f"line {number + 1}: {line.strip()!r}"
        for number, line in enumerate(lines)
        if number not in authored and HEADING.match(line) and number not in headings
    ]
    assert not lost, f"{_name(page)}: headings that do not render as headings: " + "; ".join(lost)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_text_renders_as_raw_html(page):
    swallowed = []
    for token in _tokens(_parser().parse(page.read_text())):
        if token.type in ("html_inline", "html_block") and not ALLOWED_HTML.fullmatch(token.content):
            swallowed.append(token.content.strip())
    assert not swallowed, (
        f"{_name(page)}: text a browser takes for HTML and does not show (write it in a code span, or as &lt;...&gt;):"
        f" {swallowed}"
    )


def test_the_rules_catch_what_they_are_for():
    """A stray fence after a closed one, a heading it swallows, and a placeholder outside code, each caught."""
    stray = "```\npipeline\n```\n```\n\n## The main job\n\nprose\n\n```bash\nrun\n```\n"
    fences = _authored_fences(stray.splitlines())
    assert fences.problems == ["line 4: a fence that line 10 ('```bash') shows was never meant"]
    assert 5 not in fences.inside  # "## The main job" is prose in the author's intent...
    headings = {token.map[0] for token in _parser().parse(stray) if token.type == "heading_open" and token.map}
    assert 5 not in headings  # ...and code as rendered
    html = [t.content for t in _tokens(_parser().parse("at <head> from `<user>`\n")) if t.type == "html_inline"]
    assert html == ["<head>"]
    assert ALLOWED_HTML.fullmatch("<!-- a comment -->\n") and not ALLOWED_HTML.fullmatch("<commit>")


# The pictures: each is held to the code it draws, so that it cannot drift from it.

# One statement a line: a node (a stage drawn rounded, `id(["label"])`; an artifact, `id["label"]`, an input
# `id[/"label"/]` or a store `id[("label")]`) or an edge (`a --> b`; `a -.-> b`, dotted).
NODE = re.compile(r'^\s*(\w+)(?:\((\[)"(.*)"\]\)|\["(.*)"\]|\[/"(.*)"/\]|\[\("(.*)"\)\])\s*$')
EDGE = re.compile(r"^\s*(\w+) (-->|-\.->) (\w+)\s*$")


@dataclass
class Flowchart:
    """A Mermaid flowchart: each node's label, the stages in the order drawn, the edges (solid and dotted)."""

    labels: dict[str, str]
    stages: list[str]
    edges: list[tuple[str, str]]
    dotted: list[tuple[str, str]]


def _flowchart(page: Path, direction: str) -> Flowchart:
    fences = [t for t in _parser().parse(page.read_text()) if t.type == "fence" and t.info.strip() == "mermaid"]
    charts = [t.content for t in fences if t.content.startswith(f"flowchart {direction}\n")]
    assert len(charts) == 1, f"{_name(page)}: one `flowchart {direction}` picture, found {len(charts)}"
    chart = Flowchart({}, [], [], [])
    for line in charts[0].splitlines()[1:]:
        node, edge = NODE.match(line), EDGE.match(line)
        assert node or edge, f"{_name(page)}: a line this test cannot read: {line!r}"
        if node:
            assert node[1] not in chart.labels, f"{_name(page)}: {node[1]} drawn twice"
            label = next(text for text in node.groups()[2:] if text is not None)
            chart.labels[node[1]] = label.replace("#lt;", "<").replace("#gt;", ">")
            if node[2]:
                chart.stages.append(node[1])
        elif edge:
            assert edge[1] in chart.labels and edge[3] in chart.labels, f"{_name(page)}: an edge of no node: {line!r}"
            (chart.edges if edge[2] == "-->" else chart.dotted).append((edge[1], edge[3]))
    return chart


# What a stage reads, as the registry names it, and the artifact of the picture that is (named in full by the stage
# that writes it). "the records" is the store every record feeds.
READ_AS = {
    "prepare.json": "build/prepare.json",
    "Dockerfile": "build/Dockerfile",
    "prepared tree": "NeMo-RL tree (cache)",
    "build record": "build/record.json",
}


def test_the_pipeline_picture_is_the_registry():
    from buildkit.stages.pipeline import STAGES

    chart = _flowchart(REPO_ROOT / "docs" / "index.md", "TB")
    assert [chart.labels[stage] for stage in chart.stages] == [entry.name for entry in STAGES.values()]
    assert chart.stages == [entry.name for entry in STAGES.values()]  # the ids are the names: the edges below use them
    for entry in STAGES.values():
        writes = [chart.labels[to] for source, to in chart.edges if source == entry.name]
        assert ", ".join(writes) == entry.writes, f"{entry.name} writes {entry.writes!r}, the picture {writes}"
        reads = sorted(chart.labels[source] for source, to in chart.edges if to == entry.name)
        wanted = sorted(READ_AS.get(read, read) for read in entry.reads.split(", "))
        assert reads == wanted, f"{entry.name} reads {entry.reads!r}, the picture {reads}"
    # The records: every build/*.json a stage writes but the SLSA statement, each drawn into the store once.
    written = {chart.labels[to] for source, to in chart.edges if source in chart.stages}
    records = {label for label in written if re.fullmatch(r"build/[\w.]+\.json", label)}
    records -= {"build/provenance.intoto.json"}
    assert len(records) >= 5
    assert sorted(chart.labels[source] for source, _ in chart.dotted) == sorted(records)
    assert {chart.labels[to] for _, to in chart.dotted} == {"the records"}
    # Every node is on an edge.
    assert set(chart.labels) == {end for edge in chart.edges + chart.dotted for end in edge}


def _layer_table() -> tuple[dict[str, str], dict[str, int]]:
    """test_layers.py's LAYER and RANK, read from its source (a test module imports no other)."""
    found: dict[str, dict] = {}
    for node in ast.parse((REPO_ROOT / "tests" / "unit" / "suite" / "test_layers.py").read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(name := node.targets[0], ast.Name):
            if name.id in ("LAYER", "RANK"):
                found[name.id] = ast.literal_eval(node.value)
    return found["LAYER"], found["RANK"]


def test_the_layers_picture_is_the_layer_table():
    layer_of, rank = _layer_table()
    chart = _flowchart(REPO_ROOT / "docs" / "explanation" / "architecture.md", "TB")
    assert set(chart.labels) == set(rank)
    # Each layer points at each layer of the rank below it, and nothing else.
    wanted = {(upper, lower) for upper in rank for lower in rank if rank[lower] == rank[upper] - 1}
    assert sorted(chart.edges) == sorted(wanted)
    # Each layer's label is its name and its files and folders under buildkit/, as they are on disk.
    for layer, label in chart.labels.items():
        shown = label.split("<br>")
        files: set[str] = set()
        for package, owner in layer_of.items():
            last = package.removeprefix("buildkit").removeprefix(".")
            if owner == layer and last not in ("", "_version"):  # the package itself, and its stamped version
                files.add(f"{last}/" if (REPO_ROOT / "buildkit" / last).is_dir() else f"{last}.py")
        assert shown[0] == layer and set(shown[1].split(", ")) == files, f"{label!r}: {sorted(files)}"


@pytest.mark.e2e
@pytest.mark.parametrize("page", ["index.md", "explanation/architecture.md"])
def test_the_pictures_parse_as_mermaid(page):
    """Mermaid's own parser (Node, tests/support/mermaid_check.py) reads each picture as the flowchart it is."""
    from tests.support.mermaid_check import mermaid_parse

    fences = [t for t in _parser().parse((REPO_ROOT / "docs" / page).read_text()) if t.info.strip() == "mermaid"]
    assert fences
    for fence in fences:
        assert mermaid_parse(fence.content) == {"ok": True, "type": "flowchart-v2"}, fence.content
