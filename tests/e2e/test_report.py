"""`buildkit report`: a golden test on recorded inputs, the reference report's facts for the reference pins, and
bad input. The fixtures in tests/fixtures/report/ are the lock and records of a real smoke build on the engine
(`tests/fixtures/report/README.md` says how they were made).

Regenerate the expected outputs after an intended change with BUILDKIT_REGEN_GOLDEN=1, and read the diff."""

from __future__ import annotations

import json
import os
import re
import shutil

from tests.support.goldens import machine_neutral
from tests.support.nemo_repo import use_remote
from tests.support.paths import REPO_ROOT
from tests.support.projects import golden_project

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "report"


def check_golden(name: str, text: str) -> None:
    """`text` against the golden `name`, both without the recording machine's ports, host and versions."""
    path = FIXTURES / name
    text = machine_neutral(text)
    if os.environ.get("BUILDKIT_REGEN_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; regenerate with BUILDKIT_REGEN_GOLDEN=1 and review the diff"


def test_golden_markdown_and_json(cli, tmp_path):
    project = golden_project(tmp_path)
    args = ["--pins", str(project / "pins.yaml"), "--record", str(project / "build" / "smoke-record.json")]
    markdown = cli("report", *args, "--results", str(project / "results.yaml"))
    assert markdown.code == 0, markdown.output
    check_golden("expected.md", markdown.stdout)
    as_json = cli("report", *args, "--format", "json", "--results", str(project / "results.yaml"))
    assert as_json.code == 0, as_json.output
    check_golden("expected.json", as_json.stdout)
    # The same inputs give the same bytes, also through -o.
    out = tmp_path / "report.md"
    assert cli("report", *args, "--results", str(project / "results.yaml"), "-o", str(out)).code == 0
    assert out.read_text() == markdown.stdout


def test_report_facts_come_from_the_records(cli, tmp_path):
    project = golden_project(tmp_path)
    result = cli(
        "report",
        "--pins",
        str(project / "pins.yaml"),
        "--record",
        str(project / "build/smoke-record.json"),
        "--format",
        "json",
    )
    data = json.loads(result.stdout)
    lock = json.loads((project / "pins.lock").read_text())
    record = json.loads((project / "build/smoke-record.json").read_text())
    verify = json.loads((project / "build/verify.json").read_text())
    assert data["commits"]["vllm"]["commit"] == lock["vllm"]["commit"]
    assert data["wheel"]["url"] == lock["wheel"]["url"] and data["base_image"]["pinned"] == lock["base_image"]["pinned"]
    assert data["image"]["digest"] == record["image"]["digest"] and data["build"]["command"] == record["command"]
    assert data["verification"]["results"] == verify["results"]
    prepared = json.loads((project / "build/prepare.json").read_text())
    assert data["modifications"][0]["diff"] == prepared["patches"][0]["diff"]


def test_csv_results(cli, tmp_path):
    project = golden_project(tmp_path)
    result = cli("report", "--pins", str(project / "pins.yaml"), "--results", str(project / "results.csv"))
    assert result.code == 0, result.output
    assert "| Metric | Step 1 | Step 2 | Step 3 |" in result.stdout
    assert "| E2E Tokens/sec (total) | 2488 | 2564 | 2555 |" in result.stdout


def test_bad_report_input(cli, tmp_path):
    project = golden_project(tmp_path)
    pins = ["--pins", str(project / "pins.yaml")]
    assert cli("report", *pins, "--format", "html").code == 2
    (project / "bad.yaml").write_text("metrics:\n  Loss: [1, 2]\n  Reward: [1]\n")
    bad = cli("report", *pins, "--results", str(project / "bad.yaml"))
    assert bad.code == 2 and "metric 'Reward' needs one value per step (2)" in bad.stderr
    missing = cli("report", *pins, "--record", str(project / "nope.json"))
    assert missing.code == 2 and "no such build record" in missing.stderr


def test_the_reference_reports_facts_for_the_reference_pins(project, upstreams):
    """Every fact of ../shared/reference/reproduction-report.md that buildkit can know appears in our report.

    The reference pins are resolved against the loopback stand-ins of GitHub, the wheel index and the registry;
    the stand-ins' addresses are then mapped back to the real hosts they stand in for."""
    from tests.support.fake_upstreams import WHEEL_SIZE

    root, cli = project
    # The wheel at its real size: resolve downloads and hashes all 452,718,563 bytes, as it would the real one.
    # The fake makes them as it sends them, and this one test pays about 2 s for it (the rest serve 256 KiB):
    # a smaller stand-in would leave the size in the report a number the test chose, not the reference's.
    for wheel in upstreams.wheels.files.values():
        wheel.size = WHEEL_SIZE
    assert cli("resolve").code == 0, "resolve"
    lock_text = (root / "pins.lock").read_text()
    lock_text = lock_text.replace(upstreams.wheels.url, "https://wheels.vllm.ai")
    lock_text = lock_text.replace(upstreams.github.url, "https://api.github.com")
    lock_text = lock_text.replace(upstreams.registry.netloc, "nvcr.io").replace("http://nvcr.io", "https://nvcr.io")
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace(upstreams.registry.netloc, "nvcr.io"))
    from buildkit.models.pins import load_pins

    lock = json.loads(lock_text)
    lock["pins_sha256"] = load_pins(root / "pins.yaml").sha256()  # the pins now name nvcr.io too
    (root / "pins.lock").write_text(json.dumps(lock))

    # The lock now names the real hosts: so does the environment the report runs in.
    result = cli("report", env={"BUILDKIT_WHEEL_INDEX": "https://wheels.vllm.ai"})
    assert result.code == 0, result.output
    report = re.sub(r"\\([\\`*_\[\]<>|~])", r"\1", result.stdout)  # as a reader sees it: markdown escapes undone
    assert "**Nothing has been built yet**" in report
    for fact in [
        # Source components
        "https://github.com/NVIDIA-NeMo/RL.git",
        "https://github.com/vllm-project/vllm.git",
        "https://wheels.vllm.ai",
        "nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04",
        # Commit provenance
        "946862e7 docs: add release runs to front page readme for 0.5 (#1879)",
        "946862e7755f74833d866c2a3a87ddbefae089c1",
        "4a5299c93ff97c26def537b92562df5ada530fea",
        "[PR #24322](https://github.com/vllm-project/vllm/pull/24322)",
        '"feat: spec decode with draft models", merged 2026-01-19',
        "https://wheels.vllm.ai/4a5299c93ff97c26def537b92562df5ada530fea/"
        "vllm-0.14.0rc2.dev156%2Bg4a5299c93-cp38-abi3-manylinux_2_31_x86_64.whl",
        "verified with `GET`",
        f"Size {WHEEL_SIZE} bytes",
        # Local modifications
        "-GIT_REF=${2:-cc99baf14dacc2497d0c5ed84e076ef2c37f6a4d}",
        "+GIT_REF=${2:-4a5299c93ff97c26def537b92562df5ada530fea}",
        "-VLLM_WHEEL_COMMIT=${3:-862f2ef893d9751db0a92bd2d4ae0e3d9677872f}",
        "+VLLM_WHEEL_COMMIT=${3:-4a5299c93ff97c26def537b92562df5ada530fea}",
        "vllm-1.0.0.dev-cp38-abi3-manylinux1_x86_64.whl",
        "${VLLM_PRECOMPILED_WHEEL_LOCATION:-https://wheels.vllm.ai/${VLLM_WHEEL_COMMIT}/vllm-0.14.0rc2.dev156%2Bg4a5299c93",
        # (the sglang sync render drops is shown once rendered: test_render's 946862e7 test)
        "DeepGEMM at 54f99a8af537b3c6eb4819b69907ccbe2b600792",
        # The build command
        "docker buildx build",
        "--build-arg BUILD_CUSTOM_VLLM=1",
        "--target release",
        "--build-context nemo-rl=nemo-rl",  # the tree the by-hand script clones, relative: no home or cache
        "--tag nemo-rl:v0.5.0-spec-decode",
        "git -C nemo-rl submodule update --init --recursive --depth 1",
        # GPUs, save/load, run
        "Hopper (H100, H20)",
        "about 100 GB free",
        "docker run --gpus all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864",
        # Known issues
        "**sglang extra is disabled**",
        "**Async scheduling disabled with draft model spec decode**",
        "**min_p, logit_bias, min_tokens unsupported with spec decode**",
    ]:
        assert fact in report, fact


def test_the_markdown_parses_cleanly():
    """Tables and fences as a GitHub-flavoured parser sees them (markdown-it-py, which rich already brings)."""
    from markdown_it import MarkdownIt

    text = (FIXTURES / "expected.md").read_text()
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    tables = [t for t in tokens if t.type == "table_open"]
    fences = [t for t in tokens if t.type == "fence"]
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open" and t.tag == "h2"]
    assert headings == [
        "Verdict",
        "Build timeline",
        "Stage timings",
        "Image layers",
        "Overview",
        "Source components",
        "Commit provenance",
        "Local modifications",
        "Build",
        "Image",
        "Slurm (enroot/pyxis)",
        "Reproducibility",
        "Verification",
        "Reproduction",
        "Verified results",
        "Known issues",
    ]
    # verdict, its checks, stage timings, layers, components, image, labels, squashfs, verification, results
    assert len(tables) == 10
    assert any(
        f.info == "diff" and "+GIT_REF=${2:-4a5299c93ff97c26def537b92562df5ada530fea}" in f.content for f in fences
    )
    # Every row of every table has as many cells as the table's header.
    widths: list[list[int]] = []
    for token in tokens:
        if token.type == "table_open":
            widths.append([])
        elif token.type == "tr_open":
            widths[-1].append(0)
        elif token.type in ("th_open", "td_open"):
            widths[-1][-1] += 1
    assert len(widths) == 10 and all(len(set(table)) == 1 and len(table) > 1 for table in widths), widths


def test_report_is_a_pure_function_of_the_records(project, remote):
    """What the report shows of upstream's Dockerfile comes from build/render.json, written by render: with the
    source cache gone (another machine, a cleaned cache) the report is the same, byte for byte."""
    import hashlib

    root, cli = use_remote(project, remote)
    assert cli("render").code == 0
    rendered = json.loads((root / "build" / "render.json").read_text())
    upstream = (remote.work / "docker" / "Dockerfile").read_bytes()
    assert rendered["upstream_sha256"] == hashlib.sha256(upstream).hexdigest()
    dockerfile = (root / "build" / "Dockerfile").read_bytes()
    assert rendered["dockerfile_sha256"] == hashlib.sha256(dockerfile).hexdigest() and rendered["drift"] == []
    first = cli("report")
    assert first.code == 0, first.output
    assert "````diff\n--- upstream docker/Dockerfile" in first.stdout and "Drift: none" in first.stdout
    shutil.rmtree(root / "cache")
    second = cli("report")
    assert second.code == 0 and second.stdout == first.stdout


def _html(text: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(text)


def _outside_code(html: str) -> str:
    """The HTML a reader sees as text: code spans and blocks taken out."""
    return re.sub(r"<(code|pre)>.*?</\1>", "", html, flags=re.DOTALL)


def test_the_rendered_smoke_report_describes_the_smoke_build(cli, tmp_path):
    """Read as rendered HTML (issue 32): the smoke image and target, no run line for an image never made, code spans
    where buildkit means code and no backslash before a backtick, the long parts folded."""
    project = golden_project(tmp_path)
    render = project / "build" / "smoke" / "render.json"
    recorded = json.loads(render.read_text())
    recorded["unpinned"] = ["`git clone` from `https://github.com/vllm-project/vllm.git` on build day (line 3)"]
    render.write_text(json.dumps(recorded))
    result = cli("report", "--pins", str(project / "pins.yaml"))
    assert result.code == 0, result.output
    html = _html(result.stdout)
    assert "<h1>Provenance report: nemo-rl:v0.5.0-spec-decode-smoke</h1>" in html
    assert "docker run" not in html and "nemo-rl:v0.5.0-spec-decode</code>" not in html
    assert "(target <code>smoke</code>, linux/amd64)" in html
    assert "<li><code>git clone</code> from <code>https://github.com/vllm-project/vllm.git</code> on build" in html
    assert "upstream's <code>'# syntax=docker/dockerfile:1'</code> replaced by the header" in html
    assert "\\`" not in html and "`" not in _outside_code(html)
    # The first screen is the verdict; the layer list, the Dockerfile diff and the by-hand script fold.
    folded = re.findall(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", html, re.DOTALL)
    assert [summary for summary, _ in folded] == [
        "6 layers, 1 empty, 1.9 MiB in all",  # the image's 6, of which the history gives 1 size 0 (issue 41)
        "The diff (157 lines)",
        "The script (8 commands)",
    ]
    assert "<td>COPY busybox" in folded[0][1] or "<code>COPY busybox /bin/busybox # buildkit</code>" in folded[0][1]
    assert 'class="language-diff"' in folded[1][1] and "docker buildx build" in folded[2][1]
    verdict = html.split("<h2>Verdict</h2>", 1)[1].split("<h2>", 1)[0]
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", verdict, re.DOTALL)
    checks = {name: status for name, status in rows}
    results = ("pass", "<strong>FAIL</strong>", "not applicable", "not run yet", "could not check")
    for known in (
        "CUDA",
        "torch",
        "kernels",
        "ABI",
        "glibc",
        "driver",
        "content address",
        "reproducibility",
        "provenance",
    ):
        assert checks[known] in results, known
    assert "not checked" not in checks.values()
    # Nobody passed --no-syntax: the smoke render left the line out (issue 41), and the report says so.
    assert "render ran with --no-syntax" not in verdict
    assert (
        "the <code># syntax=</code> frontend image: a smoke build renders its Dockerfile without it unless given "
        "--syntax" in verdict
    )


def test_a_release_report_runs_the_built_tag_and_says_when_submodules_were_skipped(cli, tmp_path):
    project = golden_project(tmp_path)
    build = project / "build"
    record = json.loads((build / "smoke-record.json").read_text())
    record["smoke"] = False
    record["image"]["tag"] = "registry.example/nemo-rl:built-today"
    (build / "smoke-record.json").write_text(json.dumps(record))
    prepared = json.loads((build / "prepare.json").read_text())
    prepared["submodules"] = None
    (build / "prepare.json").write_text(json.dumps(prepared))
    result = cli("report", "--pins", str(project / "pins.yaml"), "--record", str(build / "smoke-record.json"))
    assert result.code == 0, result.output
    html = _html(result.stdout)
    assert "-it registry.example/nemo-rl:built-today bash" in html
    assert "NeMo-RL's submodules: not fetched (prepare ran with --no-submodules or BUILDKIT_SUBMODULES=0)" in html
    assert "git -C nemo-rl submodule update" not in html  # the by-hand script skips them too
