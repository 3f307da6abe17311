"""The report as a checked artifact (issue 41, point 3): what tests/e2e/test_report_truth.py and the engine's
two-platform test hold a report to. Every row of its tables and every figure it states is re-derived from the
records and from the files they name (each sha256 recomputed from the bytes, each count recounted), never read
back from buildkit's own models. The cases, and what each recomputes, are in tests/e2e/test_report_truth.py."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.fake_upstreams import VLLM_SHA
from tests.support.gitserver import git
from tests.support.nemo_repo import use_remote
from tests.support.paths import REPO_ROOT

RESULTS = ("pass", "fail", "not applicable", "not run yet", "could not check")
FIRST_SCREEN = 45  # lines
EM_AARCH64 = 183  # elf.h
HEX64 = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
HEX40 = re.compile(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the report as a reader reads it -------------------------------------------------------------------------------

_ESCAPED = re.compile(r"\\([\\`*_\[\]<>|~#+=.!(){}-])")
_CODE = re.compile(r"(`+)(.+?)\1")


def plain(markdown: str) -> str:
    """Markdown as it reads rendered: a code span's text as it is, escapes undone outside code, no bold."""
    out, last = [], 0
    for span in _CODE.finditer(markdown):
        out += [_ESCAPED.sub(r"\1", markdown[last : span.start()]).replace("**", ""), span[2].strip(" ")]
        last = span.end()
    out.append(_ESCAPED.sub(r"\1", markdown[last:]).replace("**", ""))
    return "".join(out)


def cells(line: str) -> list[str]:
    """A table row's cells as read (a `|` inside a code cell is written `\\|`)."""
    return [plain(part.strip().replace("\\|", "|")) for part in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def table(text: str, header: str) -> list[list[str]]:
    """The rows of the first table whose header line starts with `header`."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(header))
    assert set(lines[at + 1].replace("|", "")) <= {"-"}, lines[at + 1]
    rows = []
    for line in lines[at + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return rows


def headed(text: str, level: int) -> list[tuple[str, str]]:
    """(title, body) of each heading of `level`, fenced code left out of the search."""
    out: list[tuple[str, list[str]]] = []
    fence = ""
    for line in text.splitlines():
        opening = re.match(r"(`{3,}|~{3,})", line)
        if not fence and opening:
            fence = opening[1]
        elif fence and line.strip() == fence:
            fence = ""
        elif not fence and re.match(rf"#{{1,{level}}} ", line):
            title = line.split(" ", 1)[1] if line.startswith("#" * level + " ") else None
            out.append((title or "", []))
            continue
        if out:
            out[-1][1].append(line)
    return [(title, "\n".join(body)) for title, body in out if title]


def section(text: str, title: str, level: int = 2) -> str:
    found = [body for name, body in headed(text, level) if name == title]
    assert len(found) == 1, (title, [name for name, _ in headed(text, level)])
    return found[0]


def fenced_after(text: str, marker: str) -> str:
    """The body of the first fenced block after `marker`."""
    rest = text[text.index(marker) :]
    found = re.search(r"^(`{3,})[a-z]*\n(.*?)\n\1$", rest, re.MULTILINE | re.DOTALL)
    assert found, marker
    return found[2]


def level(text: str) -> int:
    """The level of a report's sections: 2, or 3 in a platform's report within the report of several."""
    return 2 if text.startswith("# Provenance") else 3


def human(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size} B"


# -- what the report should say, from the records and the files --------------------------------------------------


@dataclass
class Platform:
    """One platform's build folder and what lies there: the records as JSON (None: not there)."""

    name: str
    build_dir: Path
    lock: dict  # the platform's facts: the lock's own, or its other_platforms entry over them
    smoke: bool = False  # whether the newest build record is a smoke build's (the report reads its records)
    records: dict[str, dict | None] = field(default_factory=dict)

    def load(self) -> Platform:
        build = self.build_dir
        found = [json.loads(p.read_text()) for p in (build / "record.json", build / "smoke-record.json") if p.exists()]
        newest = max(found, key=lambda record: record["ended"]) if found else None
        self.smoke = bool(newest and newest["smoke"])
        out = build / "smoke" if self.smoke else build
        for name, path in (
            ("record", build / ("smoke-record.json" if self.smoke else "record.json")),
            ("render", out / "render.json"),
            ("verify", build / "verify.json"),
            ("provenance", build / "provenance-verify.json"),
            ("squashfs", out / "squashfs.json"),
            ("attest", out / "attest.json"),
            ("prepare", build / "prepare.json"),
        ):
            self.records[name] = json.loads(path.read_text()) if path.exists() else None
        return self


def platform_facts(lock: dict, platform: str) -> dict:
    other = (lock.get("other_platforms") or {}).get(platform)
    if other is None:
        return lock
    build = {**lock["build"], "platform": platform, **lock["build"]["platforms"][platform]}
    return {**lock, **other, "build": build}


def skip_kind(reason: str, smoke: bool) -> str:
    """A skip of `buildkit verify`, by its documented reasons: what cannot apply to a smoke image, the GPU probe
    not asked for (which cannot apply to a smoke image either: it has no torch), what needs `buildkit resolve`."""
    if reason.startswith("a smoke image has no"):
        return "not applicable"
    if "(--gpus)" in reason:
        return "not applicable" if smoke else "not run yet"
    if "run `buildkit" in reason:
        return "not run yet"
    return "could not check"


def expected_verdict(p: Platform) -> dict[str, str | dict[str, int]]:
    """Each check's result, derived from the platform's lock facts and records (the verify row: its counts)."""
    lock, r = p.lock, p.records
    record, verify, render = r["record"], r["verify"], r["render"]
    image = record is not None and record["outcome"] == "succeeded"
    smoke = bool(record and record["smoke"])
    gpu = (verify or {}).get("gpu") or lock.get("gpu")
    wheel_read = bool(lock["wheel"].get("sha256"))
    before_check = "not run yet" if wheel_read else "could not check"  # a lock older than the check, or no bytes
    out: dict[str, str | dict[str, int]] = {
        "build": "not run yet" if record is None else ("pass" if image else "fail"),
        "drift": "not run yet" if render is None else ("fail" if render["drift"] else "pass"),
        "CUDA": "pass" if lock["cuda"]["outcome"] == "match" else "could not check",
    }
    torch = lock.get("torch")
    out["torch"] = before_check if torch is None else "could not check" if torch["outcome"] == "not checked" else "pass"
    if gpu is None:
        out["kernels"] = out["ABI"] = out["glibc"] = before_check
    else:
        loads = [v for lib in gpu["libraries"] if lib["required"] for v in lib["loads"].values()]
        out["kernels"] = (
            "fail"
            if any(v.startswith(("none", "missing")) for v in loads)
            else "could not check"
            if any(v.startswith("unknown") for v in loads)
            else "pass"
        )
        abi = gpu.get("abi") or {"against": [], "checked": 0, "unresolved_count": 0}
        for name, torch_side in (("ABI", True), ("glibc", False)):
            used = [a for a in abi["against"] if a.startswith("torch ") == torch_side]
            out[name] = (
                "could not check"
                if not used or abi["checked"] == 0  # nothing looked up is nothing judged
                else "fail"
                if abi["unresolved_count"]
                else "pass"
            )
    no_image = "not run yet" if record is None else None if image else "could not check"
    out["content address"] = (
        "pass" if lock["wheel"].get("sha256") and lock["wheel"]["content_addressed"] else "could not check"
    )
    driver = ((verify or {}).get("gpu") or {}).get("driver")
    judged = [why.split(":", 1)[0] for why in (driver or {}).get("drivers", {}).values()]
    out["driver"] = (
        "not applicable"
        if smoke
        else no_image
        or (
            "not run yet"  # verify not run, or run with no --driver to judge
            if verify is None or (driver is not None and not judged)
            else "could not check"
            if driver is None
            else "fail"
            if any(j in ("no", "unknown") for j in judged)
            else "pass"
        )
    )
    repro = (record or {}).get("reproducibility")
    out["reproducibility"] = no_image or ("not run yet" if repro is None else "pass" if repro["identical"] else "fail")
    pushed = record is not None and any(
        "push=true" in a.split(",") for a in record["argv"] if a.startswith("type=image")
    )
    provenance = r["provenance"]
    out["provenance"] = no_image or (
        ("not run yet" if pushed else "could not check")
        if provenance is None
        else "fail"
        if any(x["status"] == "fail" for x in provenance["results"])
        else "pass"
    )
    if verify is None:
        out["verify"] = no_image or "not run yet"
    else:
        kinds = [
            x["status"] if x["status"] != "skip" else skip_kind(x["reason"], verify["smoke"]) for x in verify["results"]
        ]
        out["verify"] = {k: kinds.count(k) for k in RESULTS if kinds.count(k)}
    attest = r["attest"]
    out["SLSA attestation"] = no_image or (
        "not run yet"
        if attest is None or not attest["signed"]
        else "pass"
        if attest.get("attached_to")
        else "could not check"
    )
    out["squashfs export"] = no_image or ("not run yet" if r["squashfs"] is None else "pass")
    return out


def as_cell(result: str | dict[str, int]) -> str:
    if isinstance(result, str):
        return "FAIL" if result == "fail" else result
    return ", ".join(f"{n} FAIL" if kind == "fail" else f"{n} {kind}" for kind, n in result.items())


def recount(column: list[str]) -> dict[str, int]:
    """The results a verdict column states, counted: a cell of one result is one check, a cell that sums several
    ("4 pass, 3 not applicable") is as many."""
    found = dict.fromkeys(RESULTS, 0)
    for cell in column:
        if cell.lower() in found:
            found[cell.lower()] += 1
            continue
        for n, kind in re.findall(r"(\d+) ([a-zA-Z ]+?)(?:,|$)", cell):
            found[kind.lower()] += int(n)
    return found


# -- the checks ---------------------------------------------------------------------------------------------------


@dataclass
class Files:
    """What the files the records name hold, recomputed here (None: not on this machine; the records say it)."""

    lock_bytes: bytes
    upstream_dockerfile: bytes | None = None  # docker/Dockerfile at the locked commit, from the repository
    patched_before: dict[str, bytes] = field(default_factory=dict)  # path -> bytes at the locked commit
    patched_after: dict[str, bytes] = field(default_factory=dict)  # path -> bytes in the prepared tree
    patches: dict[str, bytes] = field(default_factory=dict)  # patches/<file> -> bytes
    wheels: dict[str, bytes] = field(default_factory=dict)  # wheel filename -> bytes from the index
    registry: dict[str, bytes] = field(default_factory=dict)  # sha256:<hex> -> the blob the registry serves
    commits: set[str] = field(default_factory=set)  # every commit the upstreams hold
    recorded_only: dict[str, str] = field(default_factory=dict)  # sha256 hex -> which record alone holds it


def check_verdict(text: str, p: Platform, level: int) -> None:
    """The platform's verdict table: every row re-derived, the count line recounted, every result one of five."""
    verdict = section(text, "Verdict", level)
    rows = table(verdict, "| Check |")
    header = cells(
        verdict.splitlines()[next(i for i, x in enumerate(verdict.splitlines()) if x.startswith("| Check |"))]
    )
    assert header == ["Check", p.name, "Detail"], header
    expected = expected_verdict(p)
    assert [row[0] for row in rows] == list(
        ["build", "drift", "CUDA", "torch", "kernels", "ABI", "glibc", "driver", "content address"]
        + ["reproducibility", "provenance", "verify", "SLSA attestation", "squashfs export"]
    )
    for name, cell, detail in rows:
        assert cell == as_cell(expected[name]), (p.name, name, cell, expected[name], detail)
        if cell == "not run yet":
            assert re.search(r"run buildkit [a-z]", detail), (name, detail)  # the command that runs it
        elif cell in ("not applicable", "could not check"):
            assert detail, name  # and why
    stated = re.search(r"^Checks: (.*?)\. ", verdict, re.MULTILINE)
    assert stated is not None
    said = {kind: int(n) for n, kind in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)", stated[1])}
    assert said == recount([row[1] for row in rows]), (said, rows)
    assert "not checked" not in [row[1] for row in rows]
    if p.records["verify"] is not None:
        verification = section(text, "Verification", level)
        vrows = table(verification, "| Check | Result | Reason |")
        results = p.records["verify"]["results"]
        assert [row[0] for row in vrows] == [x["name"] for x in results]
        smoke = p.records["verify"]["smoke"]
        for row, x in zip(vrows, results, strict=True):
            kind = x["status"] if x["status"] != "skip" else skip_kind(x["reason"], smoke)
            assert row[1] == as_cell(kind) and x["reason"].replace(" (--gpus)", "") in row[2], (row, x)


def check_statements(text: str, p: Platform, files: Files, root: Path) -> None:
    """Every sha256 and count the platform's report states, against the files and the records."""
    lock, r = p.lock, p.records
    record, render, prepare = r["record"], r["render"], r["prepare"]
    read = plain(text)
    whole = sha256(files.lock_bytes)
    assert f"pins.lock sha256:{whole}" in read or f"lock sha256:{whole}" in read, "the lock's sha256"
    known = {whole: "the lock file"}

    # The rendered Dockerfile: named as the file it is, with that file's sha256.
    if render is not None:
        folder = p.build_dir / "smoke" if p.smoke else p.build_dir
        path = folder / render["dockerfile"]
        shown = str(path.relative_to(root))
        stated = re.search(
            r"^(\S+) as render wrote it from the lock \(sha256 ([0-9a-f]{64})\) against (\S+) at ([0-9a-f]{40}) "
            r"\(sha256 ([0-9a-f]{64})\)",
            read,
            re.MULTILINE,
        )
        assert stated is not None, "the Dockerfile's line"
        assert stated[1] == shown and stated[2] == render["dockerfile_sha256"]
        if path.exists():
            assert sha256(path.read_bytes()) == stated[2], f"{shown} is not the file whose sha256 the report gives"
            if files.upstream_dockerfile is not None:  # the record's diff is the diff of those two files
                again = "".join(
                    difflib.unified_diff(
                        files.upstream_dockerfile.decode().splitlines(keepends=True),
                        path.read_text().splitlines(keepends=True),
                        "upstream docker/Dockerfile",
                        "build/Dockerfile",
                    )
                )
                assert again == render["diff"]
        else:
            files.recorded_only.setdefault(stated[2], "the recorded render's Dockerfile (not kept with the records)")
        assert stated[4] == lock["nemo_rl"]["commit"]
        if files.upstream_dockerfile is not None:
            assert stated[5] == sha256(files.upstream_dockerfile), "upstream's Dockerfile"
        known[stated[2]] = known[stated[5]] = "the Dockerfiles"
        lines = re.search(r"<summary>The diff \((\d+) lines\)</summary>", text)
        assert lines is not None and int(lines[1]) == len(render["diff"].splitlines())
        # What the build left out, said as it happened: --no-syntax only where a release render ran with it.
        left = section(text, "Verdict", level(text))
        if not render["syntax"]:
            assert ("a smoke build renders its Dockerfile without it" in plain(left)) == bool(render["smoke_base"])
            assert ("render ran with --no-syntax" in plain(left)) == (not render["smoke_base"])
        else:
            assert "the # syntax= frontend image" not in plain(left)

    # The patches: each file's sha256, and the patched files before and after.
    for patch in lock["patches"]:
        data = files.patches[patch["file"]]
        assert patch["sha256"] == sha256(data)
        if prepare is not None:  # applied: its sha256 said beside the diff
            assert f"Patch sha256 {sha256(data)}" in read
        else:  # declared, not applied here: its diff shown, as the file is the one the lock pins
            assert "no longer matches the lock's sha256" not in read and data.decode().splitlines()[0] in read
        known[sha256(data)] = patch["file"]
    for target in [t for patch in (prepare or {}).get("patches", []) for t in patch["targets"]]:
        before, after = sha256(files.patched_before[target["path"]]), sha256(files.patched_after[target["path"]])
        assert f"{target['path']}: sha256 {before} before, {after} after" in read
        known[before] = known[after] = target["path"]

    # The wheel: its sha256 and size, from its bytes where the index serves them.
    wheel = lock["wheel"]
    wheel_bytes = files.wheels.get(wheel["filename"])
    if wheel_bytes is not None:
        assert wheel["sha256"] == sha256(wheel_bytes) and wheel["size"] == len(wheel_bytes)
    else:
        files.recorded_only.setdefault(
            wheel["sha256"], "the recorded build's wheel (its index stood in on that machine)"
        )
    assert f"Content-addressed: sha256 {wheel['sha256']}" in read
    assert f"Size {wheel['size']} bytes ({wheel['size'] / 2**20:,.1f} MiB)" in read
    known[wheel["sha256"]] = "the wheel"

    # The base image: its index, manifest and config, from the blobs the registry serves.
    base = lock["base_image"]
    for key in ("index_digest", "manifest_digest", "config_digest"):
        digest = base.get(key)
        if not digest:
            continue
        if digest in files.registry:
            assert "sha256:" + sha256(files.registry[digest]) == digest, key
            if key == "index_digest":
                index = json.loads(files.registry[digest])
                arch = base["platform"].split("/")[1]
                listed = [m["digest"] for m in index["manifests"] if m["platform"]["architecture"] == arch]
                assert listed == [base["manifest_digest"]]
            if key == "manifest_digest":
                assert json.loads(files.registry[digest])["config"]["digest"] == base["config_digest"]
        else:
            files.recorded_only.setdefault(digest.removeprefix("sha256:"), f"the recorded build's base image ({key})")
        known[digest.removeprefix("sha256:")] = f"the base image's {key}"
    assert f"{base['platform']} manifest digest: {base['manifest_digest']}" in read

    # The image and what was made of it: only the recorded build saw them.
    if record is not None:
        image = record["image"]
        for key in ("digest", "config_digest", "id"):
            if image.get(key):
                files.recorded_only.setdefault(image[key].removeprefix("sha256:"), f"the build record's image {key}")
        table_rows = dict((row[0], row[1]) for row in table(section(text, "Image", level(text)), "| | |"))
        if image["layers"] is None:  # pushed, not loaded: Docker never described it, and the advice is a pull
            size = "unknown" if image["size"] is None else f"{image['size'] / 2**20:,.1f} MiB"
            assert (table_rows["Layers"], table_rows["Size"]) == ("unknown", size), table_rows
            assert f"docker pull {image['tag'].rsplit(':', 1)[0]}@{image['digest']}" in read
            assert "docker save" not in section(text, "Image", level(text))
        else:
            check_layers(text, table_rows, image)
        assert table_rows["Digest"] == image["digest"] and table_rows["Config digest"] == image["config_digest"]
        if image["labels"]:  # what Docker said of a loaded image; a pushed one's record has none, and none is said
            assert dict((k, v) for k, v in table(text, "| Label | Value |")) == image["labels"]
        else:
            assert "| Label | Value |" not in section(text, "Image", level(text))
        steps = record["steps"]
        assert record["steps_total"] == len(steps) and record["steps_cached"] == sum(s["cached"] for s in steps)
        instructions = {s["name"] for s in steps if re.match(r"\[\S+ \d+/\d+\] (?!FROM )", s["name"])}
        cached = {s["name"] for s in steps if s["cached"] and s["name"] in instructions}
        assert (record["instructions_total"], record["instructions_cached"]) == (len(instructions), len(cached))
        assert (
            f"Dockerfile steps: {len(cached)} of {len(instructions)} from the cache "
            f"({record['steps_cached']} of {len(steps)} BuildKit steps" in read
        )
        repro = record.get("reproducibility")
        if repro:
            for digest in (repro["manifest_digest"], repro["config_digest"]):
                files.recorded_only.setdefault(digest.removeprefix("sha256:"), "the reproducibility check's rebuild")
    squashfs = r["squashfs"]
    if squashfs is not None:
        files.recorded_only.setdefault(squashfs["sha256"], "the export record (the .sqsh is not kept with the records)")
        files.recorded_only.setdefault(squashfs["config_digest"].removeprefix("sha256:"), "the export record's image")
        published = re.search(r"@sha256-([0-9a-f]{64})\.sqsh$", squashfs["path"])
        if published:  # export --to names the file by the platform manifest's digest (the test holds it to the index)
            files.recorded_only.setdefault(published.group(1), "the published file's name")
        rows = dict((row[0], row[1]) for row in table(section(text, "Slurm (enroot/pyxis)", level(text)), "| | |"))
        assert rows["Size"] == f"{squashfs['size']} bytes ({squashfs['size'] / 2**20:,.1f} MiB)"

    # No other sha256 than those: each recomputed above, or held by a record alone (said where).
    for found in set(HEX64.findall(text)):
        assert found in known or found in files.recorded_only, f"a sha256 the report states unaccounted for: {found}"
    # Every commit it names is one the upstreams or the lock's own texts hold.
    texts = files.lock_bytes.decode() + "".join(x.decode() for x in files.patches.values())
    for found in set(HEX40.findall(text)):
        assert found in files.commits or found in texts, f"a commit the report states unaccounted for: {found}"

    # The stages' times, as their records say; the stated count of unpinned inputs, recounted.
    timings = {row[0]: row[1] for row in table(text, "| Stage | Time |")}
    for stage, rec in (
        ("prepare", prepare),
        ("render", render),
        ("build", record),
        ("verify", r["verify"]),
        ("export", squashfs),
    ):
        if rec is not None and rec.get("seconds") is not None:
            assert timings[stage].startswith(f"{rec['seconds']:.1f} s"), (stage, timings[stage])
        else:
            assert timings[stage] == "not recorded", stage
    if render is not None:
        stated = re.search(r"Still unpinned: (\d+) input\(s\)", read)
        assert (int(stated[1]) if stated else 0) == len(render["unpinned"])

    # The components: every row the lock's.
    components = {row[0]: row for row in table(text, "| Component |")}
    assert (
        components["NeMo-RL"][2] == lock["nemo_rl"]["commit"]
        and components["vLLM (custom)"][2] == lock["vllm"]["commit"]
    )
    assert (
        components["Precompiled vLLM wheel"][2] == wheel["filename"] and components["Base image"][2] == base["pinned"]
    )
    wheel_commit = (lock.get("vllm_wheel") or {}).get("commit", lock["vllm"]["commit"])
    assert f"the wheel of {wheel_commit}" in components["Precompiled vLLM wheel"][3]

    # The by-hand script: as many commands as it says (a heredoc's lines are its command's).
    script = fenced_after(text, "<summary>The script (")
    commands, tag = 0, None
    for line in script.splitlines():
        if tag is not None:
            tag = None if line == tag else tag
            continue
        commands += 1
        opened = re.search(r"<<'([A-Z_0-9]+)'$", line)
        tag = opened[1] if opened else None
    stated_commands = re.search(r"<summary>The script \((\d+) commands\)</summary>", text)
    assert stated_commands is not None and int(stated_commands[1]) == commands


def check_layers(text: str, table_rows: dict[str, str], image: dict) -> None:
    """A loaded image's layers: one count, said the same way in the table and the summary; each layer's size."""
    content = [h for h in image["history"] if h["size"] > 0]
    empty = image["layers"] - len(content)
    count = f"{image['layers']} layers, {empty or 'none'} empty"
    assert table_rows["Layers"] == count and table_rows["Size"] == f"{image['size'] / 2**20:,.1f} MiB"
    summary = re.search(r"<summary>(.*?) layers, (.*?) empty, (.*?) in all</summary>", text)
    assert summary is not None and f"{summary[1]} layers, {summary[2]} empty" == count  # one count, said once way
    assert summary[3] == human(sum(h["size"] for h in content))
    listed = table(text[text.index(summary[0]) :], "| Size | Instruction |")
    assert len(listed) == len(content) and [row[0] for row in listed] == [
        human(h["size"]) for h in sorted(content, key=lambda h: -h["size"])
    ]


def check_reproduction(text: str, p: Platform, smoke: bool) -> None:
    """What reproducing it needs: a smoke build's needs, a release build's; the free space build's preflight asks."""
    needs = plain(section(text, "Reproduction", level(text)))
    # build's preflight asks --min-free-gb, whose default its --help says (docs/reference/cli.md, which
    # tests/unit/suite/test_docs.py holds to the code): 100, 1 with --smoke.
    cli_page = (REPO_ROOT / "docs" / "reference" / "cli.md").read_text()
    default = re.search(r"Free space the builder needs \[default: (\d+); (\d+) with --smoke\]", cli_page)
    assert default is not None
    release_gb, smoke_gb = default.groups()
    if smoke:
        assert f"asks {smoke_gb} GB free for a smoke build" in needs and "100 GB" not in needs
        assert "No GPU:" in needs and "NVIDIA GPUs" not in needs
        render = p.records["render"]
        if render is not None:
            assert render["smoke_base"] in needs
        assert f"the wheel ({p.lock['wheel']['size'] / 2**20:,.1f} MiB)" in needs
    else:
        assert f"about {release_gb} GB free" in needs and "NVIDIA GPUs" in needs


def check_overview(text: str, p: Platform, smoke: bool) -> None:
    overview = " ".join(plain(section(text, "Overview", level(text))).split())
    lock = p.lock
    wheel_commit = (lock.get("vllm_wheel") or {}).get("commit", lock["vllm"]["commit"])
    if smoke:  # the wheel fetched is its commit's, named as such
        assert f"with the precompiled wheel of {wheel_commit}" in overview
        assert f"the wheel for vLLM {lock['vllm']['commit']}" not in overview
    if wheel_commit != lock["vllm"]["commit"]:
        assert f"its kernels from the wheel of {wheel_commit[:12]}" in overview


def check_first_screen(text: str) -> None:
    """The verdict's table of checks ends within the first screen."""
    lines = text.splitlines()
    end = max(i for i, line in enumerate(lines[:200]) if line.startswith("| squashfs export |"))
    assert end < FIRST_SCREEN, f"the verdict's last row is line {end + 1}"


def check_one(text: str, p: Platform, files: Files, root: Path, level: int = 2) -> None:
    smoke = p.smoke
    assert smoke == bool(p.records["record"] and p.records["record"]["smoke"])
    check_verdict(text, p, level)
    check_statements(text, p, files, root)
    check_reproduction(text, p, smoke)
    check_overview(text, p, smoke)


def check_several(text: str, platforms: list[Platform], files: dict[str, Files], root: Path) -> None:
    """The first screen is the verdict matrix, one column per platform; each column is that platform's own
    verdict, re-derived; each platform's report, folded below, checked as one report."""
    lines = text.splitlines()
    names = [p.name for p in platforms]
    assert lines[0] == f"# NeMo-RL image for {len(names)} platforms: {', '.join(names)}"
    matrix = section(text, "Verdict", 2)
    header = next(line for line in matrix.splitlines() if line.startswith("| |"))
    assert cells(header) == ["", *names]
    rows = table(matrix, "| |")
    end = lines.index(next(line for line in lines if line.startswith("| Checks |")))
    assert end < FIRST_SCREEN, f"the matrix ends at line {end + 1}"
    by_name = {row[0]: row[1:] for row in rows}
    for column, p in enumerate(platforms):
        expected = expected_verdict(p)
        for name, result in expected.items():
            assert by_name[name][column] == as_cell(result), (p.name, name)
        counted = recount([by_name[name][column] for name in expected])
        assert by_name["Checks"][column] == ", ".join(f"{n} {kind}" for kind, n in counted.items())
        record = p.records["record"]
        built = by_name["Built"][column]
        assert built == (
            f"{record['image']['tag']} ({'smoke' if record['smoke'] else 'release'}): {record['outcome']}"
            if record
            else "nothing built yet: run buildkit build"
        )
        assert by_name["Digest"][column] == (record["image"]["digest"] if record else "no image")
    # What differs: each platform's wheel and its sha256 recomputed from its bytes where served.
    differs = {row[0]: row[1:] for row in table(section(text, "What differs between the platforms"), "| fact |")}
    for column, p in enumerate(platforms):
        assert differs["vLLM wheel"][column] == p.lock["wheel"]["filename"]
        data = files[p.name].wheels.get(p.lock["wheel"]["filename"])
        assert differs["wheel sha256"][column] == (sha256(data) if data is not None else p.lock["wheel"]["sha256"])
    # Each platform's own report, folded under its heading, is true as one report is (its headings one down).
    starts = [text.index(f"\n# {p.name}\n") + 1 for p in platforms]
    for p, start, end in zip(platforms, starts, [*starts[1:], len(text)], strict=True):
        part = text[start:end]
        folded = re.search(
            r"<details>\n<summary>The report of (\S+) \((\d+) lines\)[^<]*</summary>\n\n(.*)\n\n</details>\n?$",
            part,
            re.DOTALL,
        )
        assert folded is not None and folded[1] == p.name
        body = folded[3]
        assert int(folded[2]) == len(body.splitlines())
        check_one(body, p, files[p.name], root, level=3)


# -- the cases ----------------------------------------------------------------------------------------------------


def git_show(work: Path, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "show", f"{commit}:{path}"], cwd=work, capture_output=True, check=True).stdout


def upstream_files(upstreams, remote, root: Path, lock: dict, build_dir: Path) -> Files:
    """What the stand-ins serve for this lock (upstream's files at its commit, the wheels' bytes, the base image's
    blobs, the commits) and the files on disk the records name (the lock, the patches, the prepared tree)."""
    commit = lock["nemo_rl"]["commit"]
    out = Files(lock_bytes=(root / "pins.lock").read_bytes())
    out.upstream_dockerfile = git_show(remote.work, commit, "docker/Dockerfile")
    out.patches = {p["file"]: (root / p["file"]).read_bytes() for p in lock["patches"]}
    prepare = build_dir / "prepare.json"
    if prepare.exists():
        prepared = json.loads(prepare.read_text())
        for target in [t for patch in prepared["patches"] for t in patch["targets"]]:
            out.patched_before[target["path"]] = git_show(remote.work, commit, target["path"])
            out.patched_after[target["path"]] = (Path(prepared["tree"]) / target["path"]).read_bytes()
    if upstreams is not None:
        out.wheels = {path.rsplit("/", 1)[1]: wheel.data() for path, wheel in upstreams.wheels.files.items()}
        out.registry = {digest: body for digest, (_media, body) in upstreams.registry.blobs.items()}
        out.commits = {sha for shas in upstreams.github.commits.values() for sha in shas}
    out.commits |= {remote.commit, remote.submodule_commit, VLLM_SHA}
    return out


def recorded_files(remote, root: Path, lock: dict, tmp_path: Path, build_dir: Path) -> Files:
    """The smoke build recorded in tests/fixtures/report/: its NeMo-RL is the served repository's commit (made the
    same way: tests/support/nemo_repo.py), so upstream's Dockerfile and the patched file are recomputed from it, the
    patched file after by applying the patch again. Its wheel and base image were the recording machine's: their
    hashes are the records'."""
    commit = lock["nemo_rl"]["commit"]
    assert commit == remote.commit, "the recorded build's NeMo-RL is the served repository's commit"
    out = upstream_files(None, remote, root, lock, tmp_path / "no build")
    clone = tmp_path / "again"
    if not clone.exists():
        git("clone", "-q", str(remote.work), str(clone), cwd=tmp_path)
        git("checkout", "-q", "--detach", commit, cwd=clone)
        for patch in lock["patches"]:
            git("apply", str(root / patch["file"]), cwd=clone)
    prepare = build_dir / "prepare.json"
    prepared = json.loads(prepare.read_text()) if prepare.exists() else {"patches": []}
    for target in [t for patch in prepared["patches"] for t in patch["targets"]]:
        out.patched_before[target["path"]] = git_show(remote.work, commit, target["path"])
        out.patched_after[target["path"]] = (clone / target["path"]).read_bytes()
    return out


def report(cli, *args: str) -> str:
    result = cli("report", *args)
    assert result.code == 0, result.output
    return result.stdout


def rendered(project, remote) -> tuple[Path, object, dict]:
    root, cli = use_remote(project, remote)
    done = cli("render")
    assert done.code == 0, done.output
    return root, cli, json.loads((root / "pins.lock").read_text())
