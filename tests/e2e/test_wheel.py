"""buildkit as `pip install .` (or pipx) installs it: a wheel built from the checkout, installed into a fresh venv
outside the checkout, runs the pipeline's commands with its templates shipped inside the package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.nemo_repo import point_pins_at
from tests.support.paths import REPO_ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """bin/ of a fresh venv holding the wheel. Its dependencies come from the test venv's site-packages through a
    .pth line (no network needed); buildkit itself only from the wheel: the checkout is not on its path."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    [wheel] = work.glob("buildkit-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # A plain path line: the test venv's packages are importable, but its .pth files (the editable install of the
    # checkout) are not run.
    Path(site, "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    where = subprocess.run(
        [str(python), "-c", "import buildkit; print(buildkit.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=work,
        env={"PATH": os.environ["PATH"]},
    ).stdout.strip()
    assert where.startswith(site), f"buildkit imported from {where}, not the installed wheel"
    script = venv / "bin" / "buildkit"
    script.write_text(f"#!{python}\nfrom buildkit.cli import main\nmain()\n")
    script.chmod(0o755)
    return venv / "bin"


def test_the_installed_wheel_runs_the_pipeline(installed, project, remote, tmp_path):
    root, cli = project
    env = {**cli.env}
    env.pop("PYTHONPATH", None)

    def run(*args: str):
        done = subprocess.run(
            [str(installed / "buildkit"), *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    from buildkit import __version__

    assert run("--version").stdout == f"buildkit {__version__}\n"
    assert "pins valid; no lock" in run("resolve", "--offline").stderr
    point_pins_at(root, remote)
    run("resolve")
    run("resolve", "--offline")
    run("render")
    assert (root / "build" / "Dockerfile").read_text().startswith("# syntax=docker/dockerfile:")
    assert json.loads((root / "build" / "render.json").read_text())["drift"] == []
    report = run("report").stdout
    assert "## Source components" in report and "````diff\n--- upstream docker/Dockerfile" in report


@pytest.mark.e2e  # builds a wheel: seconds
def test_the_wheel_ships_py_typed(installed):
    """PEP 561: a user's type checker reads buildkit's hints only when the installed package carries py.typed."""
    where = subprocess.run(
        [str(installed / "python"), "-c", "import buildkit; print(buildkit.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=installed,
        env={"PATH": os.environ["PATH"]},
    ).stdout.strip()
    assert (Path(where).parent / "py.typed").is_file()
