"""Text from outside is written into the report as text: a PR title, commit subject, date or html_url, a known
issue, a results file cannot forge sections, tables, links or HTML; and escape sequences from upstream never reach
the terminal."""

from __future__ import annotations

import json

from markdown_it import MarkdownIt

FORGE = "x\n## Verification\n| all | pass |\n<script>alert(1)</script> [click](javascript:alert(1)) ```"
ANSI = "\x1b]0;pwned\x07\x1b[2J\x9b31m"
BIDI = "\u202e\u2066\u200f"  # right-to-left override, isolate, mark: they reorder what a reader sees


def _tokens(text: str):
    return MarkdownIt("commonmark").enable("table").parse(text)


def _shape(text: str):
    tokens = _tokens(text)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    tables = sum(1 for t in tokens if t.type == "table_open")
    html = [t for t in tokens if t.type in ("html_block", "html_inline")]
    html += [c for t in tokens for c in (t.children or []) if c.type in ("html_block", "html_inline")]
    links = [c.attrs.get("href") for t in tokens for c in (t.children or []) if c.type == "link_open"]
    return headings, tables, html, links


def test_hostile_upstream_text_stays_text(project, tmp_path):
    root, cli = project
    assert cli("resolve").code == 0
    honest = cli("report", "--results", str(_results(tmp_path, honest=True)))
    assert honest.code == 0, honest.output

    lock = json.loads((root / "pins.lock").read_text())
    # Dates are parsed when the lock is read (a forged one is refused: tests/e2e/security/test_local_files.py).
    lock["vllm_pr"].update(title=FORGE + ANSI, url="javascript:alert(1)", source=FORGE)
    lock["vllm"].update(subject=FORGE, url="https://evil.example.com/x", source=FORGE)
    lock["nemo_rl"].update(subject="```\n# Forged\n```" + ANSI + BIDI, url="javascript:alert(1)")
    lock["wheel"].update(etag=FORGE, last_modified=FORGE)
    (root / "pins.lock").write_text(json.dumps(lock))
    hostile = cli("report", "--results", str(_results(tmp_path, honest=False)))
    assert hostile.code == 0, hostile.output

    want_headings, want_tables, want_html, want_links = _shape(honest.stdout)
    headings, tables, html, links = _shape(hostile.stdout)
    assert headings == want_headings and tables == want_tables, "no section or table was forged"
    # The only HTML is the report's own folding (<details>), the same as in the honest report: none from upstream.
    assert [t.content for t in html] == [t.content for t in want_html], "no HTML from upstream"
    assert all(t.content.startswith(("<details>", "</details>")) for t in html)
    assert all(href.startswith("https://github.com/") for href in links), links
    assert "javascript:" not in " ".join(links) and "evil.example.com" not in " ".join(links)
    assert "\x1b" not in hostile.stdout and "\x9b" not in hostile.stdout and "\x07" not in hostile.stdout
    assert not set(BIDI) & set(hostile.stdout)


def _results(tmp_path, honest: bool):
    path = tmp_path / ("honest.yaml" if honest else "hostile.yaml")
    if honest:
        path.write_text("notes: fine\nmetrics:\n  loss: [1, 2]\n")
    else:
        path.write_text(
            'host: "a\\n## Host"\nnotes: "# Forged\\n> quote\\n1. list\\n<script>x</script>"\n'
            'metrics:\n  "a|b <i>M</i> [x](javascript:y)": ["1|2", "<b>3</b>"]\n'
        )
    return path


def test_escape_sequences_from_upstream_never_reach_the_terminal(project, upstreams):
    root, cli = project
    pull = upstreams.github.pulls[("vllm-project/vllm", 24322)]
    pull.update(merged=False, merge_commit_sha=None, merged_at=None, state="open" + ANSI)
    result = cli("resolve")
    assert result.code == 3, result.output  # refused as a malformed answer, quoted with its escapes visible
    assert "PR #24322" in result.stderr
    assert "\x1b" not in result.output and "\x07" not in result.output and "\x9b" not in result.output


def test_a_results_file_with_an_alias_bomb_is_refused(project, tmp_path):
    root, cli = project
    assert cli("resolve").code == 0
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\nmetrics:\n  loss: *a9\n")
    # No clock: exit 2 naming the file is the refusal; a report that expanded the 20 million values would exit
    # otherwise, or end at the cli fixture's hang guard.
    result = cli("report", "--results", str(bomb))
    assert result.code == 2, result.output
    assert "bomb.yaml" in result.stderr and len(result.stderr) < 1000


def test_every_error_message_is_printed_without_control_characters(tmp_path):
    """The one way errors reach the terminal (ui.print_error) strips them, whatever the message holds."""
    import subprocess
    import sys

    from tests.support.paths import REPO_ROOT

    script = tmp_path / "raise.py"
    script.write_text(
        "import sys\n"
        "from buildkit import cli\n"
        "from buildkit.errors import UpstreamMismatch\n"
        "def app():\n"
        "    raise UpstreamMismatch('title ' + sys.argv[1] + ' end', hint='hint ' + sys.argv[1])\n"
        "cli.app = app\n"
        "cli.main()\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), ANSI],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 4, done.stderr
    assert "title" in done.stderr and "\x1b" not in done.stderr and "\x07" not in done.stderr


# Gantt has no quoted labels, and its lexer reads these (case-insensitively, as prefixes) where a line's text starts.
DIRECTIVES = [
    "section forged",
    "title forged",
    "click s1 href javascript alert(1)",
    "call alert(1)",
    "href x",
    "excludes weekends",
    "includes 2024-01-01",
    "dateFormat YYYY",
    "axisFormat %Y",
    "tickInterval 1day",
    "todayMarker off",
    "weekday monday",
    "weekend friday",
    "inclusiveEndDates",
    "topAxis",
    "accTitle x",
    "accDescr x",
    "accDescription x",
    "2024-01-01 dated",
    "gantt",
    "GANTT again",
    "%%{init: {}}%%",
    "# comment",
    "classDef x",
    "class x",
    "style x",
    "linkStyle x",
    "subgraph x",
    "end",
    "vert x",
]


def test_a_step_name_never_becomes_a_chart_directive():
    """Every step name is one task of the chart, as Mermaid's own parser reads it (tests/support/mermaid_check.py): not
    a section, a title, a click handler or excluded days (issue 29)."""
    from buildkit.models.records.build import StepTime
    from buildkit.text.timeline import gantt, stage_gantt
    from tests.support.mermaid_check import mermaid_gantt

    steps = [
        StepTime(
            name=f"[smoke {n}/{len(DIRECTIVES)}] {name}",
            started=f"2025-01-01T00:00:{n:02d}Z",
            completed=f"2025-01-01T00:00:{n:02d}.5Z",
        )
        for n, name in enumerate(DIRECTIVES)
    ]
    chart = gantt(steps)
    assert chart is not None
    read = mermaid_gantt(chart)
    assert read["ok"] and read["title"].startswith("Build steps") and read["excludes"] == [], (read, chart)
    assert [section for section, _, _ in read["tasks"]] == ["stage smoke"] * len(DIRECTIVES), chart
    assert len(read["tasks"]) == len(DIRECTIVES)

    stages = [{"stage": name, "seconds": 1.0} for name in DIRECTIVES]
    chart = stage_gantt(stages)
    assert chart is not None
    read = mermaid_gantt(chart)
    assert read["ok"] and read["title"].startswith("buildkit's stages") and read["excludes"] == [], (read, chart)
    assert [task[2] for task in read["tasks"]] == [f"t{n}" for n in range(1, len(DIRECTIVES) + 1)], chart
