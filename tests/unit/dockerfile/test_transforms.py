"""drop_extras on the forms upstream syncs extras in, each result checked by BuildKit's parser and by `bash -n`.

The render tests cover the two real upstream shapes end to end; these cover the forms between them: a multi-extra
sync, `--all-extras`, `--extra=NAME`, a RUN without a heredoc, a sync among other commands, an `if` block."""

from __future__ import annotations

import dataclasses
import subprocess

import dockerfile
import pytest

from buildkit.dockerfile.text import apply_edits, is_heredoc, parse
from buildkit.dockerfile.transforms import Inputs, TransformationFailed, custom_vllm, drop_extras

REASON = "sgl-kernel fetches a DeepGEMM commit that no longer exists"


def blocks(name: str, *args: str) -> list[str]:
    # The one macro drop_extras uses, as templates/Dockerfile.j2 words it (render's tests use the template itself).
    assert name == "dropped_extra"
    return [f"# buildkit: dropped by pins (build.drop_extras): {args[0]}"]


def inputs(*dropped: str) -> Inputs:
    return Inputs(
        commit="0" * 40,
        nemo_rl_repo="https://github.com/NVIDIA-NeMo/RL.git",
        base_image="nvcr.io/nvidia/cuda-dl-base@sha256:" + "1" * 64,
        cuda_arch_list="9.0",
        drop_extras={name: REASON for name in dropped},
        target="release",
        wheel_dir="/opt/wheel",
        wheel_path="/opt/wheel/vllm.whl",
        vllm_repo="https://github.com/vllm-project/vllm.git",
        vllm_commit="2" * 40,
        syntax=True,
        script_text=None,
    )


def drop(text: str, *dropped: str) -> tuple[str, str]:
    """The Dockerfile with the extras dropped, and the transformation's summary; the result must parse, and every
    RUN script in it must be valid bash."""
    doc = parse(text, "test Dockerfile")
    change = drop_extras(doc, inputs(*dropped), blocks)
    out = apply_edits(doc, change.edits, [], []).text
    parsed = parse(out, "rendered")
    for ins in parsed.instructions:
        if ins.cmd == "RUN":
            script = "\n".join(line for _, line in parsed.body(ins)) if is_heredoc(ins) else ins.value[0]
            checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
            assert checked.returncode == 0, (script, checked.stderr)
    assert dockerfile.parse_string(out)
    return out, change.summary


HEREDOC = """FROM base AS release
RUN <<"EOF" bash -exu
{body}
EOF
"""


def test_a_multi_extra_sync_keeps_the_other_extras():
    out, summary = drop(HEREDOC.format(body="uv sync --locked --extra vllm --extra sglang --extra mcore"), "sglang")
    assert "\nuv sync --locked --extra vllm --extra mcore\n" in out
    assert "sglang" not in out
    assert (
        summary == "dropped sglang at line 3 ('uv sync --locked --extra vllm --extra sglang --extra mcore'): "
        "taken out of the sync"
    )


def test_two_extras_of_one_sync_dropped_at_once():
    out, summary = drop(
        HEREDOC.format(body="uv sync --frozen --extra sglang --extra=trtllm --extra vllm"), "sglang", "trtllm"
    )
    assert "\nuv sync --frozen --extra vllm\n" in out
    assert summary.startswith("dropped sglang at line 3 (") and "; trtllm at line 3 (" in summary


def test_all_extras_becomes_no_extra():
    out, summary = drop(HEREDOC.format(body="uv sync --all-extras --frozen && uv pip list"), "sglang")
    assert "\nuv sync --all-extras --no-extra sglang --frozen && uv pip list\n" in out
    assert summary.endswith(": excluded with --no-extra")


def test_the_equals_form_alone_is_commented_out_with_the_reason():
    out, summary = drop(HEREDOC.format(body="uv sync --frozen --extra=sglang | tee /tmp/sync.log"), "sglang")
    assert f"\n# buildkit: dropped by pins (build.drop_extras): {REASON}\n# uv sync --frozen --extra=sglang" in out
    assert summary.endswith(": commented out")


def test_a_run_without_a_heredoc():
    text = "FROM base AS release\nRUN uv venv && uv sync --locked --extra sglang --no-install-project && echo ok\n"
    out, summary = drop(text, "sglang")
    assert out.endswith("\nRUN uv venv && true && echo ok\n")
    assert summary.endswith(": replaced by `true`")


def test_a_run_without_a_heredoc_over_continuation_lines():
    text = "FROM base AS release\nRUN uv venv && \\\n    uv sync --extra sglang --no-install-project && \\\n    true\n"
    out, _ = drop(text, "sglang")
    assert "\n    true && \\\n    true\n" in out


def test_a_sync_among_other_commands_in_a_heredoc_keeps_the_reason_above():
    out, _ = drop(HEREDOC.format(body="cd /opt && uv sync --extra sglang && cd -"), "sglang")
    assert f"# buildkit: dropped by pins (build.drop_extras): {REASON}\ncd /opt && true && cd -\n" in out


def test_a_sync_alone_in_an_if_block_leaves_a_placeholder():
    body = 'if [[ -z "${SKIP_SGLANG_BUILD:-}" ]]; then\n    uv sync --frozen --extra sglang\nfi'
    out, _ = drop(HEREDOC.format(body=body), "sglang")
    assert "    # uv sync --frozen --extra sglang\n    true\nfi\n" in out


def test_an_extra_with_a_longer_name_is_not_taken_for_it():
    with pytest.raises(TransformationFailed, match=r"found none \(upstream syncs: sglang-extras\)"):
        drop(HEREDOC.format(body="uv sync --extra sglang-extras"), "sglang")


def test_a_commented_out_sync_is_not_a_target():
    with pytest.raises(TransformationFailed, match="transformation drop_extras"):
        drop(HEREDOC.format(body="# uv sync --extra sglang\nuv sync --extra vllm"), "sglang")


def test_two_syncs_of_dropped_extras_on_one_line_are_refused_not_half_made():
    with pytest.raises(TransformationFailed, match="line 3 holds several syncs of dropped extras"):
        drop(HEREDOC.format(body="uv sync --extra sglang && uv sync --extra sglang --extra vllm"), "sglang")


def test_with_a_uv_git_source_the_sync_that_builds_vllm_is_found_by_its_own_extras():
    """NeMo-RL's uv-source way: the RUN whose `uv sync` names `--extra vllm` gets the wheel; a sync of another extra
    followed on its line by a command that merely prints `--extra vllm` is not that RUN."""
    text = HEREDOC.format(body='uv sync --frozen --extra mcore && echo "--extra vllm next"') + HEREDOC.format(
        body="UV_LINK_MODE=hardlink uv sync --frozen --extra vllm --no-install-project"
    ).replace("FROM base AS release\n", "")
    doc = parse(text, "test Dockerfile")
    uv_inputs = dataclasses.replace(inputs(), uv_source=True)
    change = custom_vllm(doc, uv_inputs, lambda name, *args: [f"# {name}"])
    assert change.summary.startswith("RUN at line 5 (uv sync --extra vllm) mounts the wheel stage")
