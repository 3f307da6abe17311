"""Where every artifact lives: the defaults are computed here and nowhere else. It names paths and writes nothing
(the cache directory's default reads the environment); the one thing it looks at on disk is what the folders below
the build folder are: `Paths.of` and `for_platform` refuse a symlink there (files.check_folders), as build/ itself
is refused (discovery.check_build_dir), so that no record is ever written through a link planted in build/."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple


def default_cache_dir() -> Path:
    explicit = os.environ.get("BUILDKIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "buildkit"


def prepared_tree(cache_dir: Path, commit: str) -> Path:
    """The NeMo-RL tree prepare keeps for a commit (and the build uses as its named context)."""
    return cache_dir / "src" / f"nemo-rl-{commit[:12]}"


def pins_stem(pins: Path) -> str:
    """The pins file's name without .yaml/.yml: what its lock and build folder are named after. A name with
    another suffix is kept whole, so the lock can never be the pins file itself (`x.lock` -> `x.lock.lock`)."""
    for suffix in (".yaml", ".yml"):
        if pins.name.endswith(suffix) and len(pins.name) > len(suffix):
            return pins.name[: -len(suffix)]
    return pins.name


def default_lock(pins: Path) -> Path:
    """One pins file, one lock: `pins.yaml` -> `pins.lock`, `pins-gb200.yaml` -> `pins-gb200.lock`, beside it."""
    return pins.with_name(pins_stem(pins) + ".lock")


def default_build_dir(pins: Path) -> Path:
    """One pins file, one build folder: `build/` for `pins.yaml` (`pins.yml`), `build-<stem>/` beside it for any
    other (`pins-gb200.yaml` -> `build-pins-gb200/`). A sibling, not a folder inside build/: a pins file named
    `smoke.yaml` or `logs.yaml` cannot collide with build/'s own smoke/ and logs/, and removing one build folder
    never removes another pins file's records."""
    stem = pins_stem(pins)
    return pins.parent / ("build" if stem == "pins" else f"build-{stem}")


def platform_folder(platform: str) -> str:
    """The build folder of one platform of several: `linux/arm64` -> `linux-arm64`."""
    return platform.replace("/", "-")


class Paths(NamedTuple):
    """Where every artifact lives. Smoke builds keep their Dockerfile, render record, metadata and the files made
    from them in build/smoke/ and their record in build/smoke-record.json, so a smoke build never overwrites a real
    one.

    A lock of several platforms (build.platforms) builds each in a folder of its own (`for_platform`:
    build/linux-arm64/, with the same layout inside), so no record, Dockerfile or squashfs of one platform can be
    taken for another's; the lock, the resolve record and the image index record stay at the top (`top_dir`)."""

    pins: Path
    lock: Path
    build_dir: Path
    cache_dir: Path
    platform: str | None = None  # set by for_platform: these are one platform's paths of a multi-platform lock

    @classmethod
    def of(
        cls, pins: Path, lock: Path | None = None, build_dir: Path | None = None, cache_dir: Path | None = None
    ) -> Paths:
        """The paths of a pins file, with the folders below its build folder checked (`check_folders`)."""
        paths = cls.named(pins, lock, build_dir, cache_dir)
        paths.check_folders()
        return paths

    @classmethod
    def named(
        cls, pins: Path, lock: Path | None = None, build_dir: Path | None = None, cache_dir: Path | None = None
    ) -> Paths:
        """The paths, named only (nothing on disk looked at): for a plan shown, never run."""
        return cls(
            pins=pins,
            lock=lock or default_lock(pins),
            build_dir=build_dir or default_build_dir(pins),
            cache_dir=cache_dir or default_cache_dir(),
        )

    @property
    def project_dir(self) -> Path:
        return self.pins.parent

    def for_platform(self, platform: str) -> Paths:
        """One platform's paths of a multi-platform lock: its own folder under the top build folder, checked
        (`check_folders`). Every command makes each platform's paths before it runs any stage, so a planted link
        stops it before anything is written, for every platform."""
        paths = self._replace(build_dir=self.top_dir / platform_folder(platform), platform=platform)
        paths.check_folders()
        return paths

    @property
    def folders(self) -> list[Path]:
        """The folders below the top build folder that these paths write into: this platform's folder, its logs/,
        smoke/ and the reproducibility checks' repro/ folders (the top folder itself: discovery.check_build_dir)."""
        return [self.build_dir, self.logs, self.out_dir(True), self.repro_dir(False), self.repro_dir(True)]

    def check_folders(self) -> None:
        """Each of `folders`, and every folder on the way to it, is a real directory or not there yet; a symlink
        (dangling or not) or anything but a directory is InputError (exit 2), before anything is written."""
        from buildkit.files import check_folders  # here: files imports pydantic, and `--help` never needs it

        check_folders(self.top_dir, self.folders)

    @property
    def top_dir(self) -> Path:
        """The build folder of the whole pins file (build_dir's parent for one platform's paths)."""
        return self.build_dir.parent if self.platform else self.build_dir

    @property
    def resolve_record(self) -> Path:
        return self.top_dir / "resolve.json"

    def index_record(self, smoke: bool) -> Path:
        """The record of a multi-platform build: each platform's image and, pushed, the image index."""
        return self.top_dir / ("smoke-index.json" if smoke else "index.json")

    def index_statement(self, smoke: bool) -> Path:
        """The SLSA statement `attest` writes for a pushed image index (each platform's is in its folder)."""
        return self.top_dir / ("smoke-index.intoto.json" if smoke else "index.intoto.json")

    def index_envelope(self, smoke: bool) -> Path:
        return self.top_dir / ("smoke-index.dsse.json" if smoke else "index.dsse.json")

    @property
    def prepare_record(self) -> Path:
        return self.build_dir / "prepare.json"

    @property
    def verify_record(self) -> Path:
        return self.build_dir / "verify.json"

    @property
    def provenance_verify_record(self) -> Path:
        """`verify --provenance`'s record: a record of its own, so the in-image checks' stays beside it."""
        return self.build_dir / "provenance-verify.json"

    @property
    def bump_summary(self) -> Path:
        return self.build_dir / "bump.md"

    @property
    def logs(self) -> Path:
        return self.build_dir / "logs"

    def build_log(self, stamp: str, smoke: bool, rebuild: bool = False) -> Path:
        """The full log of a build (or of a --check-reproducible rebuild) started at `stamp`."""
        return self.logs / f"{'rebuild' if rebuild else 'build'}-{stamp}{'-smoke' if smoke else ''}.log"

    def out_dir(self, smoke: bool) -> Path:
        return self.build_dir / "smoke" if smoke else self.build_dir

    def dockerfile(self, smoke: bool) -> Path:
        return self.out_dir(smoke) / "Dockerfile"

    def render_record(self, smoke: bool) -> Path:
        return self.out_dir(smoke) / "render.json"

    @staticmethod
    def render_record_beside(dockerfile: Path) -> Path:
        """The render record of a Dockerfile written elsewhere (`render -o`): beside it."""
        return dockerfile.with_name("render.json")

    def metadata(self, smoke: bool) -> Path:
        return self.out_dir(smoke) / "metadata.json"

    def repro_dir(self, smoke: bool) -> Path:
        """OCI layouts of a reproducibility check (kept only when the two images differ)."""
        return self.out_dir(smoke) / "repro"

    def build_record(self, smoke: bool) -> Path:
        return self.build_dir / ("smoke-record.json" if smoke else "record.json")

    def statement(self, smoke: bool) -> Path:
        """The SLSA provenance statement `attest` writes."""
        return self.out_dir(smoke) / "provenance.intoto.json"

    def envelope(self, smoke: bool) -> Path:
        """The statement signed (a DSSE envelope)."""
        return self.out_dir(smoke) / "provenance.dsse.json"

    def attest_record(self, smoke: bool) -> Path:
        return self.out_dir(smoke) / "attest.json"

    def squashfs_record(self, smoke: bool) -> Path:
        return self.out_dir(smoke) / "squashfs.json"

    def squashfs(self, smoke: bool, ref: str) -> Path:
        """build/<image>.sqsh (build/smoke/ for a smoke build), named as `enroot import dockerd://<image>` names it:
        `:` and `/` become `+`."""
        return self.out_dir(smoke) / (re.sub(r"[:/]", "+", ref) + ".sqsh")

    def tree(self, commit: str) -> Path:
        return prepared_tree(self.cache_dir, commit)
