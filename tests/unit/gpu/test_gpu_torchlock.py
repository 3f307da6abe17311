"""The torch NeMo-RL's uv.lock installs (issue 23, point 2), read from uv.lock's bytes as resolve gets them at the
locked commit. The uv.lock text is NeMo-RL 946862e7's, trimmed to its torch tables (tests/support/fake_upstreams.py says
where each value stands); the end-to-end check on real wheels is in tests/e2e/test_resolve_realwheel.py."""

from __future__ import annotations

import json

import pytest

from buildkit.errors import InputError, UpstreamMalformed, UpstreamMismatch
from buildkit.gpu.torchlock import MAX_UV_LOCK_BYTES, locked_torch, torch_of_uv_lock
from tests.support.fake_upstreams import NEMO_RL_SHA, NEMO_RL_TORCH_PYPI, NEMO_RL_UV_LOCK, NEMO_RL_UV_LOCK_HEADER


def test_the_cuda_build_of_946862e7_is_the_one_linux_installs(monkeypatch):
    monkeypatch.delenv("BUILDKIT_TORCH_INDEX", raising=False)
    torch = torch_of_uv_lock(NEMO_RL_UV_LOCK.encode(), "uv.lock", "x86_64")
    assert torch is not None
    assert (torch.version, torch.index, torch.size) == ("2.9.0+cu129", "https://download.pytorch.org/whl/cu129", None)
    assert torch.filename == "torch-2.9.0+cu129-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert (
        torch.url == "https://download.pytorch.org/whl/cu129/torch-2.9.0%2Bcu129-cp312-cp312-manylinux_2_28_x86_64.whl"
    )
    assert torch.sha256 == "6a2f119afeefe66eef75484f008b1a240952e45b24899d27d281961e8a395458"
    arm = torch_of_uv_lock(NEMO_RL_UV_LOCK.encode(), "uv.lock", "aarch64")
    assert arm is not None and arm.sha256 == "106f9619d43edbd7087bc89b5fd1e4d9f491d9ec8ce91e84378a79b0a7c2b586"


def test_the_torch_index_is_moved(monkeypatch):
    monkeypatch.setenv("BUILDKIT_TORCH_INDEX", "http://127.0.0.1:9/mirror/")
    cu = torch_of_uv_lock(NEMO_RL_UV_LOCK.encode(), "uv.lock", "x86_64")
    assert (
        cu is not None
        and cu.url == "http://127.0.0.1:9/mirror/torch-2.9.0%2Bcu129-cp312-cp312-manylinux_2_28_x86_64.whl"
    )
    pypi = torch_of_uv_lock((NEMO_RL_UV_LOCK_HEADER + NEMO_RL_TORCH_PYPI).encode(), "uv.lock", "x86_64")
    assert (
        pypi is not None and pypi.url == "http://127.0.0.1:9/mirror/torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    )
    assert pypi.size == 899738273
    monkeypatch.setenv("BUILDKIT_TORCH_INDEX", "http://mirror.example/")  # plain http off loopback
    with pytest.raises(InputError, match=r"^\$BUILDKIT_TORCH_INDEX: plain http:// is allowed only for loopback"):
        torch_of_uv_lock(NEMO_RL_UV_LOCK.encode(), "uv.lock", "x86_64")


def test_no_torch_and_no_file(tmp_path):
    assert torch_of_uv_lock(b'version = 1\n\n[[package]]\nname = "numpy"\nversion = "2.0.0"\n', "u", "x86_64") is None
    assert locked_torch(tmp_path / "missing.lock", "x86_64") is None
    with pytest.raises(UpstreamMismatch, match="torch has no wheel for cp312 linux riscv64"):
        torch_of_uv_lock(NEMO_RL_UV_LOCK.encode(), "uv.lock", "riscv64")


@pytest.mark.parametrize(
    "text,needle",
    [
        ("version = [", "not a readable uv.lock"),
        ("package = 3", "`package` is not a list"),
        (NEMO_RL_UV_LOCK.replace("https://download.pytorch.org/whl/cu129/torch", "ftp://x/torch"), "not an https://"),
    ],
)
def test_hostile_uv_locks(text, needle):
    with pytest.raises(UpstreamMalformed, match=needle):
        torch_of_uv_lock(text.encode(), "uv.lock", "x86_64")


def test_entries_that_cannot_be_torchs_are_passed_over():
    # A hash that is not sha256 hex, a version no index publishes: not a wheel to download.
    bad = NEMO_RL_UV_LOCK.replace('"sha256:6a2f', '"md5:6a2f').replace('"2.9.0"', '"2.9.0; rm -rf /"')
    with pytest.raises(UpstreamMismatch, match="no wheel"):
        torch_of_uv_lock(bad.encode(), "uv.lock", "x86_64")
    with pytest.raises(UpstreamMalformed, match="more than"):
        torch_of_uv_lock(b" " * (MAX_UV_LOCK_BYTES + 1), "uv.lock", "x86_64")


# Through resolve, on the loopback GitHub (which serves the uv.lock above at the pinned commit) and the test index's
# wheel, whose minimal ELF needs nothing from torch: uv.lock is read, no torch is downloaded.


def test_resolve_reads_uv_lock_at_the_locked_commit(project, upstreams):
    root, cli = project
    result = cli("resolve", "--json", env={"GITHUB_TOKEN": "ghp_test_token_for_the_api_only"})
    assert result.code == 0, result.output
    abi = json.loads(result.stdout)["gpu"]["abi"]
    assert abi == {
        "against": ["torch 2.9.0+cu129 (torch-2.9.0+cu129-cp312-cp312-manylinux_2_28_x86_64.whl, NeMo-RL's uv.lock)"],
        "checked": 0,
        "unresolved_count": 0,
        "unresolved": [],
    }
    asked = [(p, h) for m, p, h in upstreams.github.log if "/contents/" in p]
    assert sorted(p for p, _h in asked if "/RL/" in p) == [
        f"/repos/NVIDIA-NeMo/RL/contents/{name}?ref={NEMO_RL_SHA}" for name in ("pyproject.toml", "uv.lock")
    ], asked
    asked = [(p, h) for p, h in asked if "/RL/" in p]  # (vLLM's setup.py at the wheel commit is read too)
    assert asked[0][1]["Accept"] == "application/vnd.github.raw+json"
    assert asked[0][1]["Authorization"] == "Bearer ghp_test_token_for_the_api_only"
    assert all("Authorization" not in h for _m, _p, h in upstreams.wheels.log)  # the token stays with the API


def test_resolve_without_uv_lock_says_the_abi_was_not_checked_and_why(project, upstreams):
    """GitHub's 404 cannot tell a missing uv.lock from one this token may not read: the reason names the answer,
    recorded in the lock (gpu.not_checked) for the report, bump and the SLSA statement, and said on stderr."""
    from tests.support.fake_upstreams import Fault

    root, cli = project
    url = f"{upstreams.github.url}/repos/NVIDIA-NeMo/RL/contents/uv.lock?ref={NEMO_RL_SHA}"
    upstreams.github.files.clear()
    # After the 404, git is asked (issue 41): github.com here is a loopback port nothing listens on.
    cli.env.update(
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0="url.http://127.0.0.1:9/.insteadOf",
        GIT_CONFIG_VALUE_0="https://github.com/",
    )
    result = cli("resolve")
    assert result.code == 0, result.output
    said = json.loads((root / "pins.lock").read_text())["gpu"]["not_checked"]["abi"]
    why = (
        f"could not read NeMo-RL's uv.lock at 946862e7755f: NVIDIA-NeMo/RL uv.lock at 946862e7755f: not found "
        f"on GitHub (404 from {url}); with git: {said.partition('; with git: ')[2]}"
    )
    assert "127.0.0.1" in said.partition("; with git: ")[2], said
    assert f"ABI not checked: {why}" in result.stderr
    lock = json.loads((root / "pins.lock").read_text())
    assert lock["gpu"]["not_checked"]["abi"] == why
    record = json.loads((root / "build" / "resolve.json").read_text())
    assert f"ABI not checked: {why}" in record["notes"]

    # Another answer (GitHub down, after the retries): said as it was, not as a missing file.
    upstreams.github.files[("NVIDIA-NeMo/RL", NEMO_RL_SHA, "uv.lock")] = NEMO_RL_UV_LOCK.encode()
    upstreams.github.faults.append(Fault("/repos/NVIDIA-NeMo/RL/contents/", 502, count=99))
    result = cli("resolve")
    assert result.code == 0, result.output
    abi = json.loads((root / "pins.lock").read_text())["gpu"]["not_checked"]["abi"]
    assert (
        abi == f"could not read NeMo-RL's uv.lock at 946862e7755f: GET {url.split('?')[0]}: HTTP 502 Bad "
        f"Gateway (host {upstreams.github.netloc}, 3 attempts)"
    ), abi
    assert "no uv.lock" not in result.stderr
