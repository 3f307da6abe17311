"""Docker client configurations made in a test: a DOCKER_CONFIG directory with a config.json, and a real
credential helper (`docker-credential-<name>`, an executable speaking the docker-credential-helpers protocol) on a
PATH directory of its own. buildkit finds and runs them exactly as it would the user's."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

USERNAME = "ci-robot"
PASSWORD = "s3cret-Pa55word-Zq8"
IDENTITY_TOKEN = "idt0ken-9f8e7d6c5b4a-Refresh-Xy"
HELPER = "buildkit-test"

_HELPER_SCRIPT = """#!{python}
# docker-credential-{name}: `get` reads the server URL on stdin and prints {{"ServerURL", "Username", "Secret"}};
# a server it does not know is the protocol's not-found answer; "fail" makes it fail as a locked keyring would.
import json, pathlib, sys

here = pathlib.Path(__file__).resolve().parent
verb = sys.argv[1] if len(sys.argv) > 1 else ""
server = sys.stdin.read()
with open(here / "{name}.log", "a") as log:
    log.write(f"{{verb}} {{server}}\\n")
if verb != "get":
    sys.exit(2)
entry = json.loads((here / "{name}.json").read_text()).get(server)
if entry is None:
    print("credentials not found in native keychain")
    sys.exit(1)
if entry == "fail":
    print("error getting credentials: the keyring is locked", file=sys.stderr)
    sys.exit(1)
print(json.dumps({{"ServerURL": server, "Username": entry[0], "Secret": entry[1]}}))
"""


def basic(username: str = USERNAME, password: str = PASSWORD) -> str:
    return base64.b64encode(f"{username}:{password}".encode()).decode()


def secret_forms(*secrets: str) -> list[str]:
    """Each secret as it could leak: as it is, base64 on its own, and inside the Basic header's user:secret."""
    forms = []
    for secret in secrets:
        forms += [secret, base64.b64encode(secret.encode()).decode(), basic(USERNAME, secret)]
    return forms


def write_config(directory: Path, data: Any) -> Path:
    """`directory/config.json` holding `data` (a str is written as it is); the directory, for DOCKER_CONFIG."""
    directory.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data)
    (directory / "config.json").write_text(text)
    return directory


def write_helper(bin_dir: Path, store: dict[str, Any], name: str = HELPER) -> Path:
    """An executable `docker-credential-<name>` in `bin_dir` answering from `store` (server URL -> [username,
    secret], or "fail"); the directory, for PATH. Every call is logged in `<name>.log` beside it (no secrets)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / f"docker-credential-{name}"
    script.write_text(_HELPER_SCRIPT.format(python=sys.executable, name=name))
    script.chmod(0o755)
    (bin_dir / f"{name}.json").write_text(json.dumps(store))
    return bin_dir


def helper_calls(bin_dir: Path, name: str = HELPER) -> list[str]:
    log = bin_dir / f"{name}.log"
    return log.read_text().splitlines() if log.exists() else []


def env_for(config_dir: Path, bin_dir: Path | None = None) -> dict[str, str]:
    env = {"DOCKER_CONFIG": str(config_dir)}
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return env
