"""CLI cold start: `buildkit --help` against `python -c "import typer"`, measured alternately in the same run.

    python bench/cold_start.py [--repeat 15]

Goal (issue 2): ratio <= 1.3. The docker SDK, requests, pydantic and jinja2 are imported only by the commands
that use them, so --help pays for typer (and the rich help screen) only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    script = Path(sys.executable).with_name("buildkit")
    cli = [str(script), "--help"] if script.exists() else [sys.executable, "-m", "buildkit.cli", "--help"]
    baseline = [sys.executable, "-c", "import typer"]
    os.environ["COLUMNS"] = "100"
    for argv in (cli, baseline):  # warm the OS file cache, as for any second start
        run(argv)
    ours, base = [], []
    for _ in range(args.repeat):
        ours.append(run(cli))
        base.append(run(baseline))
    m_ours, m_base = statistics.median(ours), statistics.median(base)
    print(f"median of {args.repeat} alternating runs")
    print(f"  python -c 'import typer' (baseline): {m_base * 1000:7.1f} ms")
    print(f"  {' '.join(Path(cli[0]).name if i == 0 else a for i, a in enumerate(cli))}: {m_ours * 1000:7.1f} ms")
    print(f"  ratio: {m_ours / m_base:.2f}  (goal: <= 1.3)")


if __name__ == "__main__":
    main()
