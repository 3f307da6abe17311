"""Issue 41, point 5: resolve's GPU checks (25 s with real wheels) say what they read as they go, as the rest of
resolve does: a line when they start, when torch's symbols are read and when they are done; each shared object on a
terminal's row. The checks tell (wheel_check's on_step), download.gpu_progress makes them events of the display the
download shows in, and the command's display prints them on stderr (stdout, and so --json, never hears of them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.commands.resolve import WheelProgress
from buildkit.gpu.check import Step, wheel_check
from buildkit.gpu.dynsym import DynamicSymbols, Symbol
from buildkit.gpu.torchlock import LockedTorch
from buildkit.models.pins import Build
from buildkit.stages.resolve.download import DownloadEvent, gpu_progress
from tests.support.fake_upstreams import WHEEL_X86, wheel_bytes

BUILD = Build.model_validate({"cuda_arch_list": "9.0", "tag": "nemo-rl:t"})


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    path = tmp_path / WHEEL_X86
    path.write_bytes(wheel_bytes(4096))  # the stand-in index's wheel: vllm/_C.abi3.so with sm_90 kernels
    return path


def test_the_checks_say_when_they_start_each_shared_object_and_when_they_are_done(wheel):
    steps: list[Step] = []
    gpu, _notes = wheel_check(wheel, WHEEL_X86, BUILD, on_step=steps.append)
    assert gpu.libraries  # the checks ran as before
    first, *read, last = steps
    assert first == Step(f"reading {WHEEL_X86}'s shared objects: kernels for sm_90, and vLLM's symbols", True)
    assert read and [s.line for s in read] == [False] * len(read)
    assert [s.libraries for s in read] == list(range(1, len(read) + 1))
    assert read[0].text == "read vllm/_C.abi3.so"
    assert last.line and last.text.startswith("done in ") and last.libraries == len(read)
    assert f"{len(read)} shared objects read, every required kernel found, ABI not checked" in last.text


def test_reading_torchs_symbols_is_said_before_it_starts(wheel, monkeypatch):
    """torch's symbols may mean a 900 MB download: said before it starts, not after (a wheel whose vLLM module needs
    a symbol of torch's: the stand-in index's needs none)."""
    from buildkit.gpu import check

    wants = DynamicSymbols(
        needed=[], defined=[], undefined=[Symbol("_ZN3c104cuda", None, None, False)], version_defs=[]
    )
    monkeypatch.setattr(check, "wheel_libraries", lambda *a, **k: iter([("vllm/_C.abi3.so", [], wants)]))
    monkeypatch.setattr(check, "check_required", lambda rows, what: None)
    steps: list[Step] = []
    torch = LockedTorch(
        version="2.9.0+cu129",
        filename="torch-2.9.0+cu129-cp312-cp312-manylinux_2_28_x86_64.whl",
        url="https://download.pytorch.org/whl/cu129/torch-2.9.0%2Bcu129-cp312-cp312-manylinux_2_28_x86_64.whl",
        sha256="0" * 64,
        size=900 << 20,
        index="https://download.pytorch.org/whl/cu129",
    )

    def torch_symbols(locked: LockedTorch) -> str:
        assert steps[-1].text.startswith("reading torch 2.9.0+cu129's symbols (torch-2.9.0+cu129-")
        return "not checked: a stand-in"

    wheel_check(wheel, WHEEL_X86, BUILD, torch, torch_symbols, on_step=steps.append)
    assert [s.text.split(" ", 2)[:2] for s in steps if s.line] == [
        ["reading", f"{WHEEL_X86}'s"],
        ["reading", "torch"],
        ["done", "in"],
    ]


def test_without_a_listener_nothing_is_asked(wheel):
    assert gpu_progress(None, WHEEL_X86) is None
    wheel_check(wheel, WHEEL_X86, BUILD, on_step=None)  # as every caller before it


def test_the_steps_become_events_of_the_download_display():
    events: list[DownloadEvent] = []
    said = gpu_progress(events.append, WHEEL_X86)
    assert said is not None
    said(Step("reading it", True))
    said(Step("read vllm/_C.abi3.so", False, 1))
    assert events == [
        DownloadEvent("gpu", WHEEL_X86, 0, None, step="reading it"),
        DownloadEvent("gpu_read", WHEEL_X86, 1, None, step="read vllm/_C.abi3.so"),
    ]


def test_the_display_says_the_lines_on_stderr_and_never_on_stdout(capsys):
    """Without a terminal (as here): the lines only, never each shared object; another platform's are named and
    held back, as its download's lines are, until every lookup succeeded."""
    with WheelProgress("resolving pins") as progress:
        progress(DownloadEvent("gpu", "linux/arm64: x.whl", 0, None, step="reading arm64's"))
        assert capsys.readouterr().err == ""  # held: a lookup may still fail
        progress(DownloadEvent("resolved", WHEEL_X86, 0, None))
        progress(DownloadEvent("gpu", WHEEL_X86, 0, None, step="reading the wheel's [bold]shared[/] objects"))
        progress(DownloadEvent("gpu_read", WHEEL_X86, 1, None, step="read vllm/_C.abi3.so"))
        progress(DownloadEvent("gpu", WHEEL_X86, 1, None, step="done in 0.1s"))
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "GPU checks linux/arm64: reading arm64's",
        "GPU checks: reading the wheel's [bold]shared[/] objects",  # words from outside stay words
        "GPU checks: done in 0.1s",
    ]
