"""Real wheels from PyPI for the tests: fetched once into a cache outside the repository, checked by sha256.

The cache is `$BUILDKIT_TEST_ARTIFACTS` (scripts/test.sh sets it from the real environment before it makes HOME and
the caches fresh, so the suite reuses it on the same machine; a fresh machine fetches). Nothing here is committed.
Every file is checked against the sha256 PyPI publishes for it (the `#sha256=` of https://pypi.org/simple/<name>/,
read 2026-11-24) after the fetch and on every reuse: a cache entry with other bytes is fetched again, never used.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class RealWheel:
    filename: str
    size: int
    sha256: str
    requirement: str
    python_version: str
    platform: str


# Each value from https://pypi.org/simple/<project>/ (file name, `#sha256=` fragment) and the file's length, 2026-11-24.
VLLM_0_14_0 = RealWheel(
    "vllm-0.14.0-cp38-abi3-manylinux_2_31_x86_64.whl",
    495377847,
    "9362cadde2cd1329a0c4a0ea9eace233d79576b3d6f5648b854922b2a2554a01",
    "vllm==0.14.0",
    "3.12",
    "manylinux_2_31_x86_64",
)
# From https://pypi.org/simple/vllm/ (JSON form: `filename`, `hashes.sha256`, `size`), read 2026-11-26: the same
# release's arm64 build (GB200, issue 30), uploaded beside the x86_64 one.
VLLM_0_14_0_AARCH64 = RealWheel(
    "vllm-0.14.0-cp38-abi3-manylinux_2_31_aarch64.whl",
    448040411,
    "f4684881e3677b69d731494c68ad0525588b02cad556c5d5aef4f7eba9368c86",
    "vllm==0.14.0",
    "3.12",
    "manylinux_2_31_aarch64",
)
TORCH_2_8_0 = RealWheel(
    "torch-2.8.0-cp312-cp312-manylinux_2_28_x86_64.whl",
    887913624,
    "b2aca0939fb7e4d842561febbd4ffda67a8e958ff725c1c27e244e85e982173c",
    "torch==2.8.0",
    "3.12",
    "manylinux_2_28_x86_64",
)
TORCH_2_9_0 = RealWheel(
    "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl",
    899738273,
    "01cff95ecd9a212ea2f141db28acccdceb6a4c54f64e6c51091146f5e2a772c6",
    "torch==2.9.0",
    "3.12",
    "manylinux_2_28_x86_64",
)
TORCH_2_9_1 = RealWheel(
    "torch-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl",
    899742281,
    "27331cd902fb4322252657f3902adf1c4f6acad9dcad81d8df3ae14c7c4f07c4",
    "torch==2.9.1",
    "3.12",
    "manylinux_2_28_x86_64",
)

_checked: dict[Path, bool] = {}


def cache_dir() -> Path:
    configured = os.environ.get("BUILDKIT_TEST_ARTIFACTS")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "buildkit-test-artifacts"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _good(path: Path, wheel: RealWheel) -> bool:
    if path in _checked:
        return _checked[path]
    ok = path.is_file() and not path.is_symlink() and path.stat().st_size == wheel.size
    ok = ok and _sha256(path) == wheel.sha256
    _checked[path] = ok
    return ok


def real_wheel(wheel: RealWheel) -> Path:
    """The path of `wheel` in the cache, fetched from PyPI (hash-checked by pip) when it is not there yet."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    path = root / wheel.filename
    with (root / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes never fetch the same wheel at once
        if _good(path, wheel):
            return path
        _checked.pop(path, None)
        path.unlink(missing_ok=True)
        requirements = root / f".{wheel.filename}.req"
        requirements.write_text(f"{wheel.requirement} --hash=sha256:{wheel.sha256}\n")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "--python-version",
                wheel.python_version,
                "--platform",
                wheel.platform,
                "--implementation",
                "cp",
                "--no-cache-dir",
                "-d",
                str(root),
                "-r",
                str(requirements),
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        requirements.unlink(missing_ok=True)
        if done.returncode != 0 or not _good(path, wheel):
            message = f"could not fetch {wheel.filename} from PyPI into {root}: {done.stderr.strip()[-2000:]}"
            if os.environ.get("CI") or os.environ.get("BUILDKIT_ENGINE") == "required":
                pytest.fail(message)  # CI needs the real wheel: a skip there would hide the test
            pytest.skip(message)
        return path


def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory this test run's processes share, made fresh for the run: under pytest-xdist the common parent
    of the workers' temporary directories, else the run's own. Nothing an earlier run left there is seen."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_torch_symbols(wheel: RealWheel, shared: Path) -> Path:
    """A buildkit cache directory holding the names `wheel`'s torch libraries define, read from its real bytes by
    buildkit's own abi.torch_defined, once per test run: the read inflates about 3 GB of shared objects (13 s of a
    core), and every worker of the run waits for the first one instead of reading again."""
    from buildkit.gpu import abi

    cache = shared / f"torch-symbols-{wheel.sha256[:16]}"
    with (shared / ".torch-symbols.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if abi.cached_torch(cache, wheel.sha256) is None:
            abi.torch_defined(real_wheel(wheel), wheel.sha256, cache)
    return cache


def seed_torch_symbols(cache_dir: Path, wheel: RealWheel, shared: Path) -> None:
    """Put `wheel`'s shared symbol names into the buildkit cache `cache_dir` (a project's BUILDKIT_CACHE_DIR), where
    resolve finds them by the wheel's sha256 and so neither downloads nor reads the 900 MB wheel."""
    from buildkit.gpu import abi

    entry = abi.torch_cache(cache_dir, wheel.sha256)
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(abi.torch_cache(shared_torch_symbols(wheel, shared), wheel.sha256).read_bytes())


def shared_libraries(wheel: RealWheel, arch: str, shared: Path) -> list[tuple[str, Any, Any]]:
    """Every shared object of `wheel` with its kernels and dynamic symbols, as buildkit's gpu.scan.wheel_libraries
    reads them for `arch` (the machine check on), read from the real bytes once per test run (inflating about 1.2 GB:
    6 s of a core) and shared by the run's processes through a pickle in `shared`, a directory this run made."""
    from buildkit.gpu.scan import wheel_libraries

    kept = shared / f"libraries-{wheel.sha256[:16]}-{arch}.pickle"
    with (shared / ".libraries.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kept.exists():
            read = list(wheel_libraries(real_wheel(wheel), arch=arch))
            kept.with_suffix(".tmp").write_bytes(pickle.dumps(read))
            kept.with_suffix(".tmp").rename(kept)
        return pickle.loads(kept.read_bytes())
