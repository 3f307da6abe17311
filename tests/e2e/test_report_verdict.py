"""The report a reviewer reads top-down (issue 21): the verdict first, the build as a Mermaid chart (checked with
Mermaid's own parser), stage timings and layers, and only the records of the build it describes (a foreign record
of each kind is left out). The by-hand reproduction runs as written from an empty directory."""

from __future__ import annotations

import json
import os
import re
import subprocess

from buildkit.models.records import header
from tests.support.mermaid_check import mermaid_parse
from tests.support.projects import golden_project, smoke_project

OTHER = "sha256:" + "e" * 64


def _report(cli, project, *args):
    result = cli("report", "--pins", str(project / "pins.yaml"), "--format", "json", *args)
    assert result.code == 0, result.output
    return json.loads(result.stdout), result.stderr


def _with_header(path, kind, image, lock_sha256=None, smoke=True):
    data = json.loads(path.read_text())
    lock_sha256 = lock_sha256 or data.get("lock_sha256") or data["header"]["lock_sha256"]
    data["header"] = header(kind, image, lock_sha256, smoke).model_dump()
    path.write_text(json.dumps(data))
    return data


def test_records_of_another_build_are_left_out_kind_by_kind(cli, tmp_path):
    project = golden_project(tmp_path)
    build = project / "build"
    record = json.loads((build / "smoke-record.json").read_text())
    image_id, lock = record["image"]["id"], record["lock_sha256"]
    # This build's records, with headers: all taken; the provenance check is a record of its own beside verify's.
    _with_header(build / "verify.json", "verify", image_id)
    provenance = json.loads((build / "verify.json").read_text())
    provenance["results"] = [{"name": "BuildKit provenance: lock sha256", "status": "pass", "reason": "as locked"}]
    provenance["image_id"] = record["image"]["digest"]
    (build / "provenance-verify.json").write_text(json.dumps(provenance))
    _with_header(build / "provenance-verify.json", "provenance-verify", record["image"]["digest"])
    _with_header(build / "smoke" / "squashfs.json", "squashfs", image_id)
    _with_header(build / "smoke" / "render.json", "render", None)
    (build / "smoke" / "attest.json").write_text(
        json.dumps(
            {
                "statement": "provenance.intoto.json",
                "statement_sha256": "a" * 64,
                "subject": "nemo-rl@" + record["image"]["digest"],
                "signed": False,
                "attested_at": "2026-11-24T00:00:00Z",
            }
        )
    )
    _with_header(build / "smoke" / "attest.json", "attest", record["image"]["digest"], lock)
    data, _ = _report(cli, project)
    assert data["verification"] and data["provenance_verification"] and data["slurm"] and data["dockerfile"]
    assert data["attestation"]["statement"] == "provenance.intoto.json"
    names = [c["check"] for c in data["verdict"]["checks"]]
    assert "verify: labels match the lock" in names
    # The provenance check's results are summed up in the known check "provenance", each listed once beside it.
    assert {"check": "provenance", "status": "pass", "detail": "1 of 1 provenance checks pass"} in data["verdict"][
        "checks"
    ]
    assert [c["check"] for c in data["verdict"]["provenance_checks"]] == [
        "provenance: BuildKit provenance: lock sha256"
    ]

    # A foreign record of each kind: another image, or another lock, or the release build's render.
    foreign = {
        "verify.json": ("verify", OTHER, None, True),
        "provenance-verify.json": ("provenance-verify", OTHER, None, True),
        "smoke/squashfs.json": ("squashfs", OTHER, None, True),
        "smoke/render.json": ("render", None, "f" * 64, True),
        "smoke/attest.json": ("attest", OTHER, None, True),
    }
    for name, (kind, image, lock_sha256, smoke) in foreign.items():
        _with_header(build / name, kind, image, lock_sha256, smoke)
    data, notes = _report(cli, project)
    assert data["verification"] is None and data["provenance_verification"] is None
    assert data["slurm"] is None and data["dockerfile"] is None and data["attestation"] is None
    for name in foreign:
        assert f"{build / name}: a record of another build; left out" in notes
    assert data["verdict"]["unpinned"] is None  # not from another render
    # A release render is not the smoke build's, even of the same lock.
    _with_header(build / "smoke" / "render.json", "render", None, lock, smoke=False)
    assert _report(cli, project)[0]["dockerfile"] is None

    # A record written before headers is judged by what it has: another image ID is another image.
    legacy = json.loads((build / "verify.json").read_text())
    legacy.pop("header")
    legacy["image_id"] = OTHER
    (build / "verify.json").write_text(json.dumps(legacy))
    assert _report(cli, project)[0]["verification"] is None

    # A build record of another lock: left out when found, refused when named.
    (build / "smoke-record.json").write_text(json.dumps({**record, "lock_sha256": "f" * 64}))
    data, notes = _report(cli, project)
    assert data["build"] is None and "a build of another lock; left out" in notes
    named = cli("report", "--pins", str(project / "pins.yaml"), "--record", str(build / "smoke-record.json"))
    assert named.code == 2 and "a build of another lock" in named.stderr


def test_the_verdict_comes_first(cli, tmp_path):
    project = golden_project(tmp_path)
    result = cli("report", "--pins", str(project / "pins.yaml"))
    assert result.code == 0, result.output
    headings = re.findall(r"^## (.+)$", result.stdout, re.MULTILINE)
    assert headings[:4] == ["Verdict", "Build timeline", "Stage timings", "Image layers"], headings
    verdict = result.stdout.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert "| Built | `nemo-rl:v0.5.0-spec-decode-smoke` (smoke" in verdict and "**succeeded**" in verdict
    assert "| Target | `smoke` |" in verdict and "Checks: " in verdict and "Still unpinned" in verdict
    diff = result.stdout.split("### The Dockerfile against upstream's", 1)[1]
    assert diff.index("<details>") < diff.index("```diff") < diff.index("</details>")


def test_a_smoke_build_reported_top_down_and_reproduced_by_hand(project, remote, engine, tmp_path):
    root, cli = smoke_project(project, remote)
    built = cli("build", "--smoke", "--builder", engine, "--progress", "plain", "--json", timeout=600)
    assert built.code == 0, built.output
    # --json: the build record on stdout, and nothing else there.
    assert json.loads(built.stdout) == json.loads((root / "build" / "smoke-record.json").read_text())
    result = cli("report")
    assert result.code == 0, result.output
    text = result.stdout
    assert re.findall(r"^## (.+)$", text, re.MULTILINE)[:4] == [
        "Verdict",
        "Build timeline",
        "Stage timings",
        "Image layers",
    ]
    stages_chart, chart = re.findall(r"^```mermaid\n(.*?)\n```$", text, re.MULTILINE | re.DOTALL)
    assert mermaid_parse(stages_chart) == {"ok": True, "type": "gantt"}, stages_chart
    assert mermaid_parse(chart) == {"ok": True, "type": "gantt"}, chart
    assert "section stage smoke" in chart
    # The parser is the judge: a step name with a line break, left as it is, would break the chart.
    assert not mermaid_parse(chart + "\n    RUN echo a\n    && b :s99, 0, 1")["ok"]
    layers = text.split("## Image layers", 1)[1].split("\n## ", 1)[0]
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    sizes = [
        float(n.replace(",", "")) * scale[u]
        for n, u in re.findall(r"^\| ([0-9.,]+) (B|KiB|MiB|GiB) \|", layers, re.MULTILINE)
    ]
    assert len(sizes) >= 3 and sizes == sorted(sizes, reverse=True)
    # The smoke report's unpinned inputs are the smoke render's, and said to be the smoke target's.
    render = json.loads((root / "build" / "smoke" / "render.json").read_text())
    data = json.loads(cli("report", "--format", "json").stdout)
    assert data["verdict"]["unpinned"] == {"target": "smoke", "items": render["unpinned"]}
    assert {s["stage"]: s["seconds"] is not None for s in data["stages"]} == {
        "resolve": True,
        "prepare": True,
        "render": True,
        "build": True,
        "verify": False,
        "export": False,
    }

    # By hand, from an empty directory, with nothing of buildkit's: the script as the report gives it. Without
    # internet the submodule comes from the mirror git's own insteadOf names (README "No internet").
    script = "\n".join(data["reproduction"]["manual"])
    # (This machine's home, unless it is /root: that is the image's home too, which upstream's Dockerfile names.)
    home = os.path.expanduser("~")
    for place in (str(root), str(cli.env["BUILDKIT_CACHE_DIR"]), *([home] if home != "/root" else [])):
        assert place not in script, [line for line in script.splitlines() if place in line]
    empty = tmp_path / "by-hand"
    empty.mkdir()
    env = {
        **cli.env,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{remote.daemon.url}test/.insteadOf",
        "GIT_CONFIG_VALUE_0": "https://github.com/test/",
        "BUILDX_BUILDER": engine,
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=empty, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    made = empty / "nemo-rl-build"
    assert (made / "Dockerfile").read_bytes() == (root / "build" / "smoke" / "Dockerfile").read_bytes()
    assert json.loads((made / "metadata.json").read_text())["containerimage.config.digest"]


def test_a_failed_build_reports_the_failing_step_and_its_output(cli, tmp_path):
    project = golden_project(tmp_path)
    path = project / "build" / "smoke-record.json"
    record = json.loads(path.read_text())
    output = ["compiling", "```", "## not a heading", "unable to find user root: no matching entries in passwd file"]
    record.update(
        outcome="failed",
        exit_code=1,
        failed_step="[smoke 3/5] RUN make",
        failed_output=output,
        error='process "/bin/sh -c make" did not complete successfully: exit code: 2',
    )
    path.write_text(json.dumps(record))
    result = cli("report", "--pins", str(project / "pins.yaml"))
    assert result.code == 0, result.output
    verdict = result.stdout.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert "**failed**" in verdict and "| build | **FAIL** | \\[smoke 3/5\\] RUN make process" in verdict
    assert "- Failed at `[smoke 3/5] RUN make`; the last lines of its output:" in result.stdout
    assert "\n````\ncompiling\n```\n## not a heading\nunable to find user root" in result.stdout  # fenced, longer
    assert "\n## not a heading" not in result.stdout.replace("\n```\n## not a heading", "")


def test_every_stage_gets_its_figure_and_resolve_reads_its_record(project, remote):
    """resolve's time comes from build/resolve.json (what a real resolve wrote); a missing, broken or foreign
    record leaves it "not recorded" with a note, and the report still succeeds."""
    from tests.support.nemo_repo import use_remote

    root, cli = use_remote(project, remote)  # a real resolve against the loopback upstreams
    assert cli("render").code == 0
    record = json.loads((root / "build" / "resolve.json").read_text())
    assert record["seconds"] > 0
    data, _ = _report(cli, root)
    stages = {s["stage"]: s["seconds"] for s in data["stages"]}
    assert stages["resolve"] == record["seconds"] and stages["prepare"] is not None and stages["render"] is not None
    chart = data["stages_chart"]
    assert mermaid_parse(chart) == {"ok": True, "type": "gantt"}, chart
    assert re.search(r"^    - resolve [0-9.]+ s :t1, 0, [0-9]+$", chart, re.MULTILINE), chart
    markdown = cli("report").stdout
    assert re.search(r"^\| resolve \| [0-9.]+ s \|$", markdown, re.MULTILINE), markdown
    assert "```mermaid\ngantt\n    title buildkit's stages" in markdown

    path = root / "build" / "resolve.json"
    for text, why in (
        (json.dumps({**record, "lock_sha256": "f" * 64}), "a record of another lock"),
        ("{not json", "not a valid record"),
        (json.dumps({**record, "started_at": 7}), "not a valid record"),
        (None, None),
    ):
        if text is None:
            path.unlink()
        else:
            path.write_text(text)
        data, notes = _report(cli, root)
        assert {s["stage"]: s["seconds"] for s in data["stages"]}["resolve"] is None
        assert data["overview"]["resolved_at"] is None  # nor its times: they belong to that record
        if why:
            assert f"{path}: {why}" in notes and "resolve's times left out" in notes, notes
        result = cli("report")
        assert result.code == 0 and "| resolve | not recorded |" in result.stdout


def test_with_each_record_every_stage_has_a_figure(cli, tmp_path):
    """The golden build's records (prepare, render, build, verify, export) and a resolve record of its lock: all
    six stages timed. An older record without `seconds` is timed by its start and end."""
    from buildkit.models.records.resolve import ResolveRecord, write_record

    project = golden_project(tmp_path)
    data, _ = _report(cli, project)
    assert [s["stage"] for s in data["stages"] if s["seconds"] is None] == ["resolve"]
    lock = json.loads((project / "pins.lock").read_text())
    started, finished = "2026-11-24T16:29:12Z", lock["resolved_at"]  # the lock's own time of the end: 16:29:16Z
    write_record(
        project / "build" / "resolve.json",
        ResolveRecord(
            lock_sha256=data["lock_sha256"],
            started_at=started,
            finished_at=finished,
            read_at={},
            notes=[],
        ),
    )
    data, _ = _report(cli, project)
    assert all(s["seconds"] is not None for s in data["stages"]), data["stages"]
    assert data["stages"][0] == {"stage": "resolve", "seconds": 4.0, "detail": ""}
    assert data["stages_chart"].count(" :t") == 6 and mermaid_parse(data["stages_chart"])["ok"]
