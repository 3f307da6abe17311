"""The settings a build takes from several places (the pins, the command line, the environment), each with where it
came from, so that doctor, `build --dry-run` and the build say the same thing: `platform linux/arm64 (from
pins.yaml build.platform)`. Pure: the caller reads the files and the command line."""

from __future__ import annotations

from typing import NamedTuple

from buildkit.models.pins import Build, Pins

DEFAULT_PLATFORM = "linux/amd64"
SMOKE_TARGET = "smoke"


class Setting(NamedTuple):
    name: str
    value: str
    source: str  # in words: "--platform", "pins.yaml build.platform", "BUILDKIT_SUBMODULES=0", "default"

    def line(self) -> str:
        said = self.source if self.source.startswith("default") else f"from {self.source}"
        return f"{self.name} {self.value} ({said})"


def _from_pins(pins: Pins | None, pins_name: str, key: str, given: str | None, flag: str, default: str) -> Setting:
    """A build.<key> setting: the flag when given, else the pins (said whether the file sets it), else the default."""
    if given is not None:
        return Setting(key, given, flag)
    if pins is None:
        return Setting(key, default, f"default: no {pins_name} found")
    value = str(getattr(pins.build, key))
    set_there = key in pins.build.model_fields_set
    return Setting(key, value, f"{pins_name} build.{key}" if set_there else f"default: {pins_name} sets no build.{key}")


def platform_setting(pins: Pins | None, pins_name: str, given: str | None = None) -> Setting:
    """build.platform, or every platform of build.platforms (as buildx names several: comma-separated)."""
    if given is None and pins is not None and pins.build.platforms is not None:
        return Setting("platform", ",".join(p for p, _ in pins.build.targets()), f"{pins_name} build.platforms")
    return _from_pins(pins, pins_name, "platform", given, "--platform", DEFAULT_PLATFORM)


def target_setting(pins: Pins | None, pins_name: str, smoke: bool = False) -> Setting:
    default = str(Build.model_fields["target"].default)
    return _from_pins(pins, pins_name, "target", SMOKE_TARGET if smoke else None, "--smoke", default)


def submodules_setting(on: bool, source: str) -> Setting:
    """source: the flag or the environment variable that set it (the CLI knows which), or "default"."""
    return Setting("submodules", "checked out" if on else "skipped", source)


def settings_warning(settings: list[Setting]) -> str | None:
    """The warning these settings call for (a real target without submodules), if any."""
    by_name = {s.name: s for s in settings}
    return release_without_submodules(by_name["target"], by_name["submodules"])


def release_without_submodules(target: Setting, submodules: Setting) -> str | None:
    """The warning for a build of a real target without NeMo-RL's submodules. A warning, not a refusal: skipping
    them was asked for by name (the flag or the variable, which the warning repeats), and a target of the user's own
    may not need them; but the image would lack Megatron-LM, Megatron-Bridge, Automodel and Gym, so it is said loudly,
    dry run included, and before the long stages."""
    if target.value == SMOKE_TARGET or submodules.value != "skipped":
        return None
    source = submodules.source
    undo = f"drop {source}" if source.startswith("--") else f"unset {source.split('=')[0]}"
    return (
        f"building the {target.value} target without NeMo-RL's submodules ({source}): the image lacks Megatron-LM, "
        "Megatron-Bridge, Automodel and Gym, and the build may fail where uv installs them; for a real image, "
        f"{undo} (or build --smoke to try the pipeline)"
    )
