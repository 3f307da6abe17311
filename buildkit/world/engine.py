"""The build engine as the stages see it (ImageEngine: inspect, run, read files, pull, save, and the engine's own
facts), and its Docker implementation through the docker SDK (DockerEngine, also named Engine): reachability, version,
disk, image inspection, saving, and pulls (with Docker's registry credentials, found by buildkit/world/credentials.py).
Builds and pushes run through buildx (buildx.py, stages/build/), which the SDK cannot drive (docker-py issue 2230).
tests/support/memengine.py holds an in-memory ImageEngine, so the stages' judgement is tested without an engine."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from buildkit.errors import CredentialsError, EngineNotReady, InputError, excerpt
from buildkit.files import write_error
from buildkit.text.sanitize import strip_controls
from buildkit.world.credentials import DockerConfig, config_path, lookup
from buildkit.world.registry import parse_image_ref

CHUNK = 1024 * 1024


@dataclass
class ImageInfo:
    id: str
    size: int
    layers: int
    labels: dict[str, str]


class ContainerRefused(Exception):
    """The engine would not create, start or read a container (no GPU runtime, a missing image, ...): its reason."""


class ImageEngine(Protocol):
    """What verify, export, build and preflight ask of an engine."""

    def version(self) -> dict[str, Any]: ...

    def info(self) -> dict[str, Any]: ...

    def containerd_store(self) -> bool: ...

    def free_bytes(self) -> tuple[str, int]: ...

    def image_attrs(self, ref: str) -> dict[str, Any] | None: ...

    def image(self, ref: str) -> ImageInfo | None: ...

    def history(self, ref: str) -> list[dict[str, Any]]: ...

    def run_check(self, image: str, command: list[str], gpus: bool = False) -> tuple[int, str]: ...

    def archive(self, image: str, path: str) -> Iterator[bytes]: ...

    def pull(self, ref: str, auth: dict[str, str], platform: str | None = None) -> str | None: ...

    def save_image(
        self,
        ref: str,
        dest: Path,
        limit: int,
        on_bytes: Callable[[int], None] | None = None,
        reported: Path | None = None,
    ) -> int: ...


class DockerEngine:
    def __init__(self, timeout: int = 30):
        import docker  # imported here: only the build path pays for it
        from docker.errors import DockerException

        # The SDK reads Docker's config as it starts, and a malformed one surfaces as an exception from deep inside
        # it: checked here first, so it is one clear message.
        DockerConfig.load()
        try:
            self.client = docker.from_env(timeout=timeout)
            self.client.ping()
        except ValueError:  # a config the SDK found elsewhere (it falls back to ~/.docker) that it cannot parse
            raise CredentialsError(
                f"the docker SDK cannot read Docker's config (buildkit read {config_path()}, the SDK may read "
                "~/.docker/config.json)",
                hint="fix or remove the file",
            ) from None
        except DockerException as exc:
            raise EngineNotReady(
                f"the Docker engine is not reachable ({_short(exc)})",
                hint="start it (sudo bash scripts/engine-up.sh here), or set DOCKER_HOST",
            ) from None
        self._errors = DockerException

    def version(self) -> dict[str, Any]:
        return self.client.version()

    def info(self) -> dict[str, Any]:
        return self.client.info()

    def containerd_store(self) -> bool:
        """Whether images live in the containerd image store, which can hold attestations (Docker 24+ option)."""
        status = self.info().get("DriverStatus") or []
        return any("io.containerd.snapshotter" in str(value) for pair in status for value in pair)

    def free_bytes(self) -> tuple[str, int]:
        """Free space where the engine keeps its data (DockerRootDir), when that is on this machine."""
        root = self.info().get("DockerRootDir") or "/var/lib/docker"
        return root, shutil.disk_usage(root).free if os.path.exists(root) else -1

    def image_attrs(self, ref: str) -> dict[str, Any] | None:
        """`docker image inspect`, or None when the engine has no such image."""
        try:
            return self.client.images.get(ref).attrs
        except self._errors:
            return None

    def history(self, ref: str) -> list[dict[str, Any]]:
        """`docker image history`: each layer's size and the instruction that made it, newest first ([] if none)."""
        try:
            found = self.client.api.history(ref)
        except self._errors:
            return []
        return found if isinstance(found, list) else []

    def run_check(self, image: str, command: list[str], gpus: bool = False) -> tuple[int, str]:
        """Run a command in a throwaway container with no network: its exit code and combined output. A container
        that cannot start (the executable is missing) is exit 127 with the engine's reason; one that cannot be given
        a GPU, or that the engine refuses otherwise, is ContainerRefused."""
        from docker.errors import APIError
        from docker.types import DeviceRequest

        devices = [DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else None  # None: as if not given
        try:
            container = self.client.containers.create(
                image, command=command, entrypoint=[], network_disabled=True, device_requests=devices
            )
            try:
                try:
                    container.start()
                except APIError as exc:
                    if gpus:
                        raise  # the engine cannot give the container a GPU: the caller says so
                    return 127, str(exc.explanation or exc)
                code = container.wait(timeout=300).get("StatusCode", 1)
                output = container.logs(stdout=True, stderr=True).decode("utf-8", errors="replace")
            finally:
                container.remove(force=True)
        except APIError as exc:
            raise ContainerRefused(str(exc.explanation or exc)) from None
        return code, output.strip()

    def archive(self, image: str, path: str) -> Iterator[bytes]:
        """The tar stream of `path` in the image, from a container created for it and never started."""
        from docker.errors import APIError

        try:
            container = self.client.containers.create(image, command=["true"], entrypoint=[], network_disabled=True)
            try:
                stream, _stat = container.get_archive(path, chunk_size=1 << 20)
                yield from stream
            finally:
                container.remove(force=True)
        except APIError as exc:
            raise ContainerRefused(str(exc.explanation or exc)) from None

    def pull(self, ref: str, auth: dict[str, str], platform: str | None = None) -> str | None:
        """Pull `ref` with this auth config (empty: anonymous; never the SDK's own credential lookup), of
        `platform` from an index (else the engine's own). None when it worked, else the engine's reason."""
        from docker.errors import DockerException

        try:
            for event in self.client.api.pull(ref, stream=True, decode=True, auth_config=auth, platform=platform):
                if isinstance(event, dict) and event.get("error"):
                    return str(event["error"])
        except DockerException as exc:
            return str(getattr(exc, "explanation", None) or exc)
        return None

    def save_image(
        self,
        ref: str,
        dest: Path,
        limit: int,
        on_bytes: Callable[[int], None] | None = None,
        reported: Path | None = None,
    ) -> int:
        """`docker save` of one image into the new file `dest`: the engine's archive, streamed (never held), at most
        `limit` bytes. Returns the bytes written. A write that fails is write_error for `reported` (default: `dest`;
        exit 2, and a full disk says so); an engine that stops sending is EngineNotReady."""
        from requests import RequestException

        written = 0
        try:
            chunks = self.client.images.get(ref).save(chunk_size=CHUNK, named=False)
            with dest.open("xb") as out:
                for chunk in chunks:
                    written += len(chunk)
                    if written > limit:
                        raise InputError(
                            f"the engine sent more than {limit:,} bytes for image {ref}, more than its size allows",
                            hint="check the image with `docker image inspect`; build it again",
                        )
                    try:
                        out.write(chunk)
                    except OSError as exc:
                        raise write_error(reported or dest, exc) from None
                    if on_bytes:
                        on_bytes(written)
        except (self._errors, RequestException) as exc:
            raise EngineNotReady(f"the engine did not send image {ref} whole ({_short(exc)})") from None
        except OSError as exc:
            raise write_error(reported or dest, exc) from None
        return written

    def image(self, ref: str) -> ImageInfo | None:
        attrs = self.image_attrs(ref)
        if attrs is None:
            return None
        return ImageInfo(
            id=attrs.get("Id", ""),
            size=int(attrs.get("Size") or 0),
            layers=len((attrs.get("RootFS") or {}).get("Layers") or []),
            labels=(attrs.get("Config") or {}).get("Labels") or {},
        )


Engine = DockerEngine  # the engine buildkit uses


def _short(exc: Exception) -> str:
    text = str(exc)
    for needle in ("Connection refused", "No such file or directory", "Permission denied"):
        if needle in text:
            return needle.lower()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def pull_image(engine: ImageEngine, image: str, platform: str | None = None) -> dict:
    """The image's attributes after the engine pulled it (of `platform`, from an index: a pushed build of another
    platform than this machine's is found too) with Docker's credentials for its registry (anonymously when there
    are none: the SDK's own lookup is never used, so there is one way credentials are found)."""
    try:
        registry = parse_image_ref(image).registry
    except ValueError:
        raise InputError(f"no image {image!r} in the engine", hint="build it first (`buildkit build`)") from None
    credential = lookup(registry)
    problem = engine.pull(image, credential.engine_auth() if credential else {}, platform)
    attrs = engine.image_attrs(image) if problem is None else None
    if attrs is not None:
        return attrs
    reason = excerpt(strip_controls(problem or "the engine has no such image after the pull"), 300)[1:-1]
    lowered = reason.lower()
    if credential is not None and any(word in lowered for word in ("unauthorized", "denied", "forbidden")):
        raise CredentialsError(
            f"the engine could not pull {image} with the credentials from {credential.source}: {reason}",
            hint=f"`docker login {registry}`, then run again",
        )
    if "no matching manifest" in lowered:
        wanted = platform or "this machine's platform"
        hint = f"the registry holds {image} for other platforms only: build and push {wanted} (`buildkit build --push`)"
    elif any(word in lowered for word in ("unauthorized", "denied", "forbidden")):
        hint = f"`docker login {registry}` if it is in a private registry, then run again"
    else:
        hint = "build it first (`buildkit build --push`, or `buildkit build` to load it into Docker)"
    raise InputError(f"no image {image!r} in the engine, and it could not be pulled: {reason}", hint=hint)
