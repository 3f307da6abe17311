"""doctor, `build --dry-run` and the build take the platform, the target and the submodule setting from the pins,
the command line and the environment, and say where each came from (issue 32, point 5); a real target without
submodules is warned about, dry run included."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.nemo_repo import use_remote

NO_DOCKER = "unix:///nonexistent/docker.sock"  # doctor's engine checks fail at once; its settings are still said


def no_engine(tmp_path: Path) -> dict[str, str]:
    """No engine at DOCKER_HOST, and a DOCKER_CONFIG of the test's own: buildx records its selected builder per
    engine address there, and another address in the real one would unselect the engine's builder for every later
    test."""
    return {"DOCKER_HOST": NO_DOCKER, "DOCKER_CONFIG": str(tmp_path / "docker-config")}


def _arm64(root: Path) -> None:
    text = (root / "pins.yaml").read_text()
    assert "platform: linux/amd64" in text and "arch: x86_64" in text
    (root / "pins.yaml").write_text(
        text.replace("platform: linux/amd64", "platform: linux/arm64").replace("arch: x86_64", "arch: aarch64")
    )


def _settings(result) -> dict[str, tuple[str, str]]:
    return {s["name"]: (s["value"], s["source"]) for s in json.loads(result.stdout)["settings"]}


def test_doctor_checks_the_platform_the_pins_name_and_says_so(project, tmp_path):
    root, cli = project
    _arm64(root)
    env = no_engine(tmp_path)
    doctor = cli("doctor", "--json", env=env)
    assert doctor.code == 1, doctor.output  # no engine here
    assert _settings(doctor)["platform"] == ("linux/arm64", "pins.yaml build.platform")
    assert _settings(doctor)["target"] == ("release", "pins.yaml build.target")
    assert _settings(doctor)["submodules"] == ("checked out", "default")
    assert "platform linux/arm64 (from pins.yaml build.platform)" in doctor.stderr
    assert "warning" not in doctor.stderr
    # --platform still wins, and says so.
    given = cli("doctor", "--json", "--platform", "linux/amd64", env=env)
    assert _settings(given)["platform"] == ("linux/amd64", "--platform")
    # Found above the working directory, as the other commands find it.
    below = root / "sub"
    below.mkdir()
    (root / ".git").mkdir()  # the search stops at the repository's top
    from tests.conftest import Cli

    found = Cli(below, cli.env)("doctor", "--json", env=env)
    assert _settings(found)["platform"] == ("linux/arm64", f"{root / 'pins.yaml'} build.platform")


def test_doctor_without_pins_says_the_default(cli, tmp_path):
    doctor = cli("doctor", "--json", env=no_engine(tmp_path))
    assert _settings(doctor)["platform"] == ("linux/amd64", "default: no pins.yaml found")
    assert "platform linux/amd64 (default: no pins.yaml found)" in doctor.stderr


def test_a_setting_the_pins_leave_out_is_said_to_be_the_default(project, tmp_path):
    root, cli = project
    text = (root / "pins.yaml").read_text()
    assert "  target: release\n" in text
    (root / "pins.yaml").write_text(text.replace("  target: release\n", ""))
    doctor = cli("doctor", "--json", env=no_engine(tmp_path))
    assert _settings(doctor)["target"] == ("release", "default: pins.yaml sets no build.target")


def test_the_dry_run_says_each_setting_and_warns_of_a_release_without_submodules(project):
    root, cli = project
    _arm64(root)
    plan = cli("build", "--dry-run")
    assert plan.code == 0, plan.output
    assert "platform linux/arm64 (from pins.yaml build.platform)" in plan.stderr
    assert "target release (from pins.yaml build.target)" in plan.stderr
    assert "submodules checked out (default)" in plan.stderr and "warning" not in plan.stderr
    by_env = cli("build", "--dry-run", env={"BUILDKIT_SUBMODULES": "0"})
    assert by_env.code == 0, by_env.output
    assert "submodules skipped (from BUILDKIT_SUBMODULES=0)" in by_env.stderr
    warning = by_env.stderr.split("warning: ", 1)[1]
    assert warning.startswith("building the release target without NeMo-RL's submodules (BUILDKIT_SUBMODULES=0)")
    assert "unset BUILDKIT_SUBMODULES" in warning and "--no-submodules" not in by_env.stderr
    by_flag = cli("build", "--dry-run", "--no-submodules")
    assert "submodules skipped (from --no-submodules)" in by_flag.stderr
    assert "(--no-submodules): the image lacks Megatron-LM" in by_flag.stderr and "drop --no-submodules" in (
        by_flag.stderr
    )
    # The smoke target needs no submodules: said, not warned about.
    smoke = cli("build", "--dry-run", "--smoke", env={"BUILDKIT_SUBMODULES": "0"})
    assert "target smoke (from --smoke)" in smoke.stderr and "warning" not in smoke.stderr, smoke.output


def test_prepare_names_what_skipped_the_submodules(project, remote):
    root, cli = use_remote(project, remote)
    assert cli("resolve").code == 0
    by_env = cli("prepare", env={"BUILDKIT_SUBMODULES": "0"})
    assert by_env.code == 0, by_env.output
    assert "submodules skipped (BUILDKIT_SUBMODULES=0)" in by_env.stderr and "--no-submodules" not in by_env.stderr
    by_flag = cli("prepare", "--no-submodules")
    assert "submodules skipped (--no-submodules)" in by_flag.stderr
