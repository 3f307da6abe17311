"""The report's "not pinned by the lock" list, found in the Dockerfile (and the vLLM build script) it describes."""

from __future__ import annotations

from buildkit.dockerfile.text import parse
from buildkit.dockerfile.unpinned import unpinned_inputs
from tests.support.nemo_repo import LATER_SHAPE, SHAPE

SHA = "0123456789abcdef0123456789abcdef01234567"


def found(text: str, target: str = "release", script: str | None = None) -> list[str]:
    return unpinned_inputs(parse(text, "Dockerfile"), target, script)


def test_each_kind_of_build_day_fetch_is_named_with_its_line():
    text = f"""FROM scratch AS src
ARG REF={SHA}
ADD https://github.com/o/r.git#${{REF}} /
FROM ubuntu@sha256:{"1" * 64} AS release
ARG TOOL_VERSION=1.2.3
RUN apt-get update && apt-get install -y --no-install-recommends curl=8.5.0-2 git \\
    jq && rm -rf /var/lib/apt/lists/*
RUN curl -fsSL http://example.com/tool-${{TOOL_VERSION}}.tgz -o /tmp/t.tgz
RUN wget -qO- https://get.example.com/install.sh | bash
RUN pip install torch==2.9.0 && uv pip install --require-hashes -r req.txt
RUN uv lock && uv sync --frozen && uv run --locked x.py && UV_LINK_MODE=copy uv sync
RUN apt-key adv --fetch-keys http://keys.example.com/key.pub
ADD https://example.com/data.bin /data.bin
ADD --checksum=sha256:{"2" * 64} https://example.com/checked.bin /checked.bin
COPY --from=src / /src
"""
    assert found(text) == [
        "apt packages (git, jq) at whatever versions `apt-get update` finds (Dockerfile line 6)",
        "`http://example.com/tool-1.2.3.tgz` downloaded with no checksum check (Dockerfile line 8)",
        "an installer script from `https://get.example.com/install.sh` run by a shell, unchecked (Dockerfile line 9)",
        "Python packages from `pip install torch==2.9.0`, by version, no hashes (Dockerfile line 10)",
        "`uv lock` re-resolves Python packages on build day (Dockerfile line 11)",
        "`uv sync` without --locked or --frozen may re-resolve uv.lock (Dockerfile line 11)",
        "a package signing key fetched over plain HTTP from `http://keys.example.com/key.pub` (Dockerfile line 12)",
        "`ADD https://example.com/data.bin` with no checksum or commit (Dockerfile line 13)",
    ]


def test_a_checksum_in_the_same_script_counts_as_checked():
    text = "FROM ubuntu AS release\nRUN curl -o t.tgz https://e.example/t.tgz && echo 'x  t.tgz' | sha256sum -c\n"
    assert found(text) == []


def test_only_the_stages_the_target_is_built_from():
    text = f"""FROM ubuntu@sha256:{"1" * 64} AS tools
RUN pip install black
FROM ubuntu@sha256:{"1" * 64} AS release
RUN --mount=type=bind,from=tools,target=/t true
FROM release AS extra
RUN pip install ruff
"""
    assert found(text) == ["Python packages from `pip install black`, by version, no hashes (Dockerfile line 2)"]
    assert found(text, target="extra")[-1].startswith("Python packages from `pip install ruff`")
    assert found(text, target="missing") == []


def test_the_vllm_build_script_is_read_where_a_run_calls_it():
    text = "FROM ubuntu AS release\nRUN <<EOF\nbash tools/build-custom-vllm.sh\nEOF\n"
    script = (
        "#!/bin/bash\ngit clone https://github.com/vllm-project/vllm.git /v\nuv pip install torch==2.9.0 \\\n"
        "  --index-url https://download.pytorch.org/whl/cu129\nuv lock\n"
    )
    where = "tools/build-custom-vllm.sh (run at Dockerfile line 2)"
    assert found(text, script=script) == [
        f"`git clone` from `https://github.com/vllm-project/vllm.git` on build day, not a build input BuildKit sees "
        f"({where} line 2)",
        "Python packages from `uv pip install torch==2.9.0 --index-url https://download.pytorch.org/whl/cu129`, "
        f"by version, no hashes ({where} line 3)",
        f"`uv lock` re-resolves Python packages on build day ({where} line 5)",
    ]


def test_both_upstream_shapes():
    # Upstream's files as they are (render's tests check the rendered ones, where the source ADD names a commit).
    for shape in (SHAPE, LATER_SHAPE):
        items = found(shape.read_text())
        assert items[0].startswith("`ADD https://github.com/NVIDIA-NeMo/RL.git#main` with no checksum or commit")
        assert any(i.startswith("an installer script from `https://astral.sh/uv/") for i in items)
        assert any(i.startswith("`git fetch --unshallow` from the clone's remote") for i in items)
    assert "apt packages (jq, git) at" in found(SHAPE.read_text())[1]
    assert "apt packages (jq, ccache) at" in found(LATER_SHAPE.read_text())[1]  # `apt-get remove` is not an install


def test_a_stage_that_only_checksums_the_vllm_script_takes_none_of_its_inputs():
    """The smoke target checks tools/build-custom-vllm.sh's sha256 and never runs it: its git clone is not an input
    of that target (issue 32). The release target runs it, so its findings are listed there."""
    script = "#!/bin/bash\ngit clone https://github.com/vllm-project/vllm.git\n"
    text = f"""FROM ubuntu@sha256:{"1" * 64} AS release
RUN bash -x tools/build-custom-vllm.sh "$URL" "$REF"
FROM ubuntu@sha256:{"1" * 64} AS smoke
RUN printf '%s  tools/build-custom-vllm.sh\\n' abc | sha256sum -c - && echo tools/build-custom-vllm.sh
"""
    assert found(text, "smoke", script) == []
    assert found(text, "release", script) == [
        "`git clone` from `https://github.com/vllm-project/vllm.git` on build day, not a build input BuildKit sees "
        "(tools/build-custom-vllm.sh (run at Dockerfile line 2) line 2)"
    ]
    runs_it = ("./tools/build-custom-vllm.sh", "VAR=1 bash tools/build-custom-vllm.sh", ". tools/build-custom-vllm.sh")
    for runs in runs_it:
        assert found(text.replace('bash -x tools/build-custom-vllm.sh "$URL" "$REF"', runs), "release", script), runs
