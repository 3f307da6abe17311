"""Issue 41, point 5: what `buildkit resolve` prints where no terminal reads it. To a pipe with no COLUMNS, the
table of the lock has every value whole (rich would cut it at 80 columns: `127.0.0.1:180…`), and `--json` stays
the lock alone; the GPU checks say on stderr what they read (tests/unit/gpu/test_gpu_progress.py, without the CLI)."""

from __future__ import annotations

import json

from tests.conftest import Cli
from tests.support.fake_upstreams import WHEEL_X86
from tests.support.projects import use_base

# A tag as long as real ones get (a date, a CUDA, a distribution and a flavour): with it the table is wider than 80.
LONG_TAG = "25.05-cuda12.9-devel-ubuntu24.04-with-the-rest-of-a-long-tag"


def test_a_pipe_gets_the_whole_table_with_no_columns(project, upstreams):
    root, cli = project
    use_base(root, upstreams, LONG_TAG)
    piped = Cli(root, {k: v for k, v in cli.env.items() if k != "COLUMNS"})  # stdout and stderr are pipes here
    result = piped("resolve")
    assert result.code == 0, result.output
    assert "…" not in result.stdout, result.stdout
    (row,) = [line for line in result.stdout.splitlines() if line.lstrip().startswith("base_image")]
    assert LONG_TAG in row and row.rstrip().endswith(upstreams.registry.netloc), row
    assert max(len(line) for line in result.stdout.splitlines()) > 80  # wider than rich's default, and whole

    narrow = piped("resolve", env={"COLUMNS": "80"})  # COLUMNS given: the width asked for, as on a terminal
    assert narrow.code == 0 and "127.0…" in narrow.stdout, narrow.stdout

    as_json = piped("resolve", "--json")
    assert as_json.code == 0 and json.loads(as_json.stdout)["base_image"]["tag"] == LONG_TAG


def test_the_gpu_checks_say_what_they_read_and_json_stays_clean(project):
    root, cli = project
    result = cli("resolve")
    assert result.code == 0, result.output
    lines = result.stderr.splitlines()
    said = [line for line in lines if line.startswith("GPU checks")]
    assert said[0] == f"GPU checks: reading {WHEEL_X86}'s shared objects: kernels for sm_90, and vLLM's symbols"
    assert said[-1].startswith("GPU checks: done in ") and said[-1].endswith(
        ": 2 shared objects read, every required kernel found, ABI checked in part"
    )
    downloaded = next(i for i, line in enumerate(lines) if line.startswith("wheel: downloaded"))
    assert downloaded < lines.index(said[0]) < lines.index(said[-1]) < lines.index("wrote pins.lock")
    assert "GPU checks" not in result.stdout

    as_json = cli("resolve", "--json")  # the wheel from the cache now: the checks read it again, and say so
    assert as_json.code == 0 and json.loads(as_json.stdout)["wheel"]["filename"] == WHEEL_X86
    assert "GPU checks: done in " in as_json.stderr
