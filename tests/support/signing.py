"""Cosign key pairs for the tests (the `cosign` fixture, in conftest, finds the binary)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PASSWORD = "correct horse battery staple"


def key_pair(cosign: str, directory: Path, password: str = PASSWORD) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [cosign, "generate-key-pair", f"--output-key-prefix={directory / 'cosign'}"],
        env={**os.environ, "COSIGN_PASSWORD": password},
        capture_output=True,
        check=True,
        timeout=60,
    )
    return directory / "cosign.key", directory / "cosign.pub"
