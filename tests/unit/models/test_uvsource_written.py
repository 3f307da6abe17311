"""Writing NeMo-RL's uv-source mode from the pins (vllm.install: uv-source; models/uvsource.py `dist_metadata` and
`written_pyproject`, stages/resolve/install.py): on what the real upstreams publish, copied as it stands (where
each was published, beside it), and what cannot be theirs refused."""

from __future__ import annotations

import tomllib

import pytest

from buildkit.errors import UpstreamMalformed, UpstreamMismatch
from buildkit.models.lock import CommitFact, SourceComparison
from buildkit.models.lock.facts import ChangeKind, VllmInstall
from buildkit.models.pins import Vllm
from buildkit.models.uvsource import DistMetadata, WriteUvSource, dist_metadata, uv_source, written_pyproject
from buildkit.stages.resolve.install import install_of

# vLLM 0.14.0's PyPI wheel (vllm-0.14.0-cp38-abi3-manylinux_2_31_x86_64.whl), vllm-0.14.0.dist-info/METADATA: its
# first headers, some of its 73 Requires-Dist lines as they stand (a marker, an extra's), a Provides-Extra, the body.
METADATA = b"""Metadata-Version: 2.4
Name: vllm
Version: 0.14.0
Summary: A high-throughput and memory-efficient inference and serving engine for LLMs
Requires-Python: <3.14,>=3.10
Requires-Dist: regex
Requires-Dist: transformers<5,>=4.56.0
Requires-Dist: llguidance<1.4.0,>=1.3.0; platform_machine == "x86_64" or platform_machine == "arm64" or platform_machine == "aarch64" or platform_machine == "s390x" or platform_machine == "ppc64le"
Requires-Dist: six>=1.16.0; python_version > "3.11"
Requires-Dist: torch==2.9.1
Requires-Dist: pandas; extra == "bench"
Provides-Extra: bench
Provides-Extra: petit-kernel

vLLM is a fast and easy-to-use library for LLM inference and serving.
Requires-Dist: not-a-header
"""  # noqa: E501

# NVIDIA-NeMo/RL 7ea279ab (main), pyproject.toml: lines 1-3, the vllm extra (lines 138-156), the end of
# [tool.uv.sources] (lines 284-287) and the start of [tool.uv] (lines 317-320), as they stand.
MAIN_PYPROJECT = """[build-system]
requires = ["setuptools>=78.1.1", "wheel>=0.46.2"]
build-backend = "setuptools.build_meta"

[project]
name = "nemo-rl"

[project.optional-dependencies]
vllm = [
  "cuda-python",
  "deep_gemm @ git+https://github.com/deepseek-ai/DeepGEMM.git@67fc64863d43521080bf2005e6528d0fceee9510",
  # Default wheels on GitHub are cu130. See v0.25.1 release assets:
  # https://github.com/vllm-project/vllm/releases/tag/v0.25.1
  "vllm @ https://github.com/vllm-project/vllm/releases/download/v0.25.1/vllm-0.25.1-cp38-abi3-manylinux_2_28_aarch64.whl ; sys_platform == 'linux' and platform_machine == 'aarch64'",
  "vllm @ https://github.com/vllm-project/vllm/releases/download/v0.25.1/vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl ; sys_platform == 'linux' and platform_machine == 'x86_64'",
  "vllm==0.25.1 ; sys_platform != 'linux' or (platform_machine != 'aarch64' and platform_machine != 'x86_64')",
  "num2words>=0.5.14",
  "flashinfer-python==0.6.13",
]

[tool.uv.sources]
nvidia-modelopt = { git = "https://github.com/NVIDIA/Model-Optimizer", rev = "c3b913b9cc1d82d5a0af9fa77b4db87829e6f158" }
nvidia-resiliency-ext = { git = "https://github.com/NVIDIA/nvidia-resiliency-ext.git", tag = "v0.6.0" }
flashinfer-jit-cache = { index = "flashinfer-cu130" }

[tool.uv]
managed = true
preview = true # Enable preview features like extra-build-dependencies
"""  # noqa: E501
FORK, HEAD, WHEEL = "https://github.com/alice/vllm.git", "a" * 40, "b" * 40


def test_the_wheels_core_metadata_is_read_as_uv_needs_it():
    meta = dist_metadata(METADATA, "vllm-0.14.0 METADATA", 1000)
    assert meta.version == "0.14.0" and meta.provides_extra == ("bench", "petit-kernel")
    assert meta.requires_dist[0] == "regex" and meta.requires_dist[-1] == 'pandas; extra == "bench"'
    assert meta.requires_dist[3] == 'six>=1.16.0; python_version > "3.11"'  # packaging's spelling of the line
    assert len(meta.requires_dist) == 6  # the body's line is no header


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"Name: vllm\nName: vllm\nVersion: 1.0\n", "not the core metadata of one vllm version"),
        (b"Name: torch\nVersion: 2.9.1\n", "not the core metadata of one vllm version"),
        (b"Name: vllm\nVersion: not-a-version\n", "Invalid version"),
        (b"Name: vllm\nVersion: 1.0\nRequires-Dist: torch==\n", "Expected semicolon"),
        (
            b"Name: vllm\nVersion: 1.0\n" + b"Requires-Dist: regex\n" * 3,
            "3 Requires-Dist and 0 Provides-Extra lines, more than 2",
        ),
        (b"Name: vllm\nVersion: 1.0\nProvides-Extra: ../x\n", "a Provides-Extra that is no extra name"),
    ],
)
def test_core_metadata_that_cannot_be_a_wheels_is_refused(raw, message):
    with pytest.raises(UpstreamMalformed, match=message.replace("(", r"\(")):
        dist_metadata(raw, "METADATA", 2)


def write(text: str = MAIN_PYPROJECT) -> str:
    meta = dist_metadata(METADATA, "METADATA", 1000)
    return written_pyproject(text, "7ea279ab", WriteUvSource(FORK, HEAD, WHEEL, meta))


def test_mains_pyproject_gets_the_release_branches_mode_and_keeps_the_rest():
    text = write()
    doc = tomllib.loads(text)
    uv = doc["tool"]["uv"]
    assert doc["project"]["optional-dependencies"]["vllm"] == [
        "cuda-python",
        "deep_gemm @ git+https://github.com/deepseek-ai/DeepGEMM.git@67fc64863d43521080bf2005e6528d0fceee9510",
        "num2words>=0.5.14",
        "flashinfer-python==0.6.13",
        "vllm",  # main's three vllm lines (by URL per arch, by version elsewhere) dropped: the source is the fork
    ]
    assert uv["sources"]["vllm"] == {"git": FORK, "rev": HEAD, "extra": "vllm"}
    assert uv["sources"]["flashinfer-jit-cache"] == {"index": "flashinfer-cu130"}
    assert uv["extra-build-variables"]["vllm"] == {
        "VLLM_USE_PRECOMPILED": "1",
        "VLLM_PRECOMPILED_WHEEL_COMMIT": WHEEL,
        "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VLLM": "0.14.0",
        "SETUPTOOLS_SCM_PRETEND_VERSION": "0.14.0",
    }
    [entry] = uv["dependency-metadata"]
    assert entry["version"] == "0.14.0" and len(entry["requires-dist"]) == 6
    assert entry["provides-extra"] == ["bench", "petit-kernel"]
    assert (uv["managed"], uv["preview"]) == (True, True)
    assert "# Default wheels on GitHub are cu130. See v0.25.1 release assets:" in text  # comments kept
    # Read back as resolve reads NeMo-RL's own mode, with the uv.lock line uv writes for a rev (uv 0.13.9, e2e).
    lock = f'[[package]]\nname = "vllm"\nversion = "0.14.0"\nsource = {{ git = "{FORK}?rev={HEAD}#{HEAD}" }}\n'
    found = uv_source(text.encode(), lambda: lock.encode(), "written", 1 << 20)
    assert found is not None and (found.commit, found.wheel_commit, found.precompiled) == (HEAD, WHEEL, True)
    assert write(text) == text  # written again: the same bytes (an earlier vllm entry replaced, not added to)


def test_a_pyproject_without_a_vllm_extra_cannot_take_the_mode():
    with pytest.raises(UpstreamMismatch, match="has no `vllm` extra") as caught:
        write('[project]\nname = "nemo-rl"\n')
    assert caught.value.exit_code == 4 and "remove vllm.install" in (caught.value.hint or "")
    with pytest.raises(UpstreamMalformed, match="the vllm extra's 'vllm >='"):
        write('[project.optional-dependencies]\nvllm = ["vllm >="]\n')


SOURCE = CommitFact(
    repo=FORK, ref="draft-tp", commit=HEAD, date="2026-08-22T09:00:00Z", subject="draft model TP", source="git"
)


def compare(changed: dict[str, ChangeKind] | None, paths: int) -> SourceComparison:
    return SourceComparison(method="git diff", source="git diff", paths=paths, compiled=[], changed=changed)


def test_resolve_refuses_a_source_that_changes_vllms_packaging_and_keeps_nemo_rls_own_mode():
    changed: dict[str, ChangeKind] = {"vllm/draft.py": "added", "requirements/common.txt": "modified"}
    with pytest.raises(UpstreamMismatch, match=r"changes vLLM's packaging .*\(requirements/common.txt\)"):
        install_of("uv-source", None, SOURCE, WHEEL, compare(changed, 2), None, "c" * 40)
    with pytest.raises(UpstreamMismatch, match=r"\(3 path\(s\) not listed\)"):
        install_of("uv-source", None, SOURCE, WHEEL, compare(None, 3), None, "c" * 40)
    unread = install_of("uv-source", None, SOURCE, WHEEL, compare({"vllm/draft.py": "added"}, 1), None, "c" * 40)
    assert unread is not None and unread.written and unread.version is None  # resolve --check reads no bytes
    own = VllmInstall(
        mode="uv-source", repo=FORK, ref=None, commit=HEAD, locked=f"{FORK}#{HEAD}", wheel_commit=WHEEL,
        precompiled=True, source="pyproject.toml and uv.lock",
    )  # fmt: skip
    assert install_of("uv-source", own, SOURCE, WHEEL, compare(None, 0), None, "c" * 40) is own
    assert install_of(None, own, SOURCE, WHEEL, compare(None, 0), None, "c" * 40) is own
    with pytest.raises(UpstreamMismatch, match="not with build-custom-vllm.sh"):
        install_of("script", own, SOURCE, WHEEL, compare(None, 0), None, "c" * 40)
    assert install_of("script", None, SOURCE, WHEEL, compare(None, 0), None, "c" * 40) is None


def test_the_lock_holds_metadata_only_for_a_written_mode():
    with pytest.raises(ValueError, match="only with a written uv-source mode"):
        VllmInstall(
            mode="uv-source", repo=FORK, ref=None, commit=HEAD, locked=f"{FORK}#{HEAD}", wheel_commit=WHEEL,
            precompiled=True, source="s", version="0.14.0", requires_dist=[],
        )  # fmt: skip


@pytest.mark.parametrize("repo", ["git://127.0.0.1:9418/vllm.git", "http://127.0.0.1:8080/vllm.git"])
def test_uv_source_needs_a_repository_uv_fetches(repo):
    with pytest.raises(ValueError, match="uv fetches https:// and file://"):
        Vllm(repo=repo, ref="main", install="uv-source")
    assert Vllm(repo=repo, ref="main").install is None
    assert Vllm(repo="https://github.com/alice/vllm.git", ref="main", install="uv-source").install == "uv-source"
    assert DistMetadata("1", (), ()).requires_dist == ()


def test_uncommon_layouts_are_written_where_uv_reads_them_or_refused():
    """vLLM's extras survive (its version, URL and marker chose the release wheel); an inline array of dependency
    metadata gets an inline entry; a dotted `uv.*` key under [tool], where tomlkit would write beside [tool.uv], and a
    [tool] that is no table are refused before uv runs (exit 3, UpstreamMalformed)."""
    extras = tomllib.loads(
        write("[project.optional-dependencies]\nvllm = [\"vllm[audio]==0.25.1 ; sys_platform == 'linux'\"]\n")
    )
    assert extras["project"]["optional-dependencies"]["vllm"] == ["vllm[audio]"]
    inline = tomllib.loads(write(MAIN_PYPROJECT + 'dependency-metadata = [{ name = "foo", version = "2" }]\n'))
    assert [e["name"] for e in inline["tool"]["uv"]["dependency-metadata"]] == ["foo", "vllm"]
    extra = '[project.optional-dependencies]\nvllm = ["vllm"]\n'
    for layout in (extra + "[tool]\nuv.package = true\n", "tool = 1\n" + extra):
        with pytest.raises(UpstreamMalformed, match="pyproject.toml at 7ea279ab: "):
            write(layout)


@pytest.mark.parametrize("ending", ["no newline at the end", "a U+2028 in a comment"])
def test_the_recorded_diff_applies_with_git(tmp_path, ending):
    """The diff prepare records, which the report's by-hand steps `git apply`: as git writes it."""
    import subprocess

    from buildkit.stages.prepare.uvsource import _diff

    before = (
        MAIN_PYPROJECT.rstrip("\n") if ending.startswith("no") else MAIN_PYPROJECT.replace("cu130.", "cu130.\u2028")
    )
    (tmp_path / "pyproject.toml").write_text(before)
    diff = _diff(before.encode(), write(before).encode())
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply"], cwd=tmp_path, input=diff.encode(), check=True)
    assert (tmp_path / "pyproject.toml").read_text() == write(before)


def test_a_uv_lock_written_by_another_uv_than_the_dockerfiles_is_drift():
    """Upstream's Dockerfile installs the uv that reads the written uv.lock (`uv sync --frozen`): NeMo-RL main's
    `ARG UV_VERSION=0.11.28` (tests/fixtures/nemo-rl-later-shape.Dockerfile, line 34, as at 7ea279ab)."""
    from buildkit.models.drift import uv_drift
    from tests.support.nemo_repo import LATER_SHAPE

    upstream = LATER_SHAPE.read_text()
    assert uv_drift(upstream, "0.11.28") == [] and uv_drift(upstream, None) == []
    [said] = uv_drift(upstream, "0.13.9")
    assert said.startswith("uv.lock was written by uv 0.13.9 (vllm.install: uv-source), and upstream's Dockerfile")
    assert said.endswith("install uv 0.11.28 (`pip install uv==0.11.28`), then run `buildkit prepare` again")
    assert uv_drift("ARG UV_VERSION\n", "0.13.9") == []  # no default: nothing to hold it to
