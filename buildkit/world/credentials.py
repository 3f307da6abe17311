"""Registry credentials, found the way Docker finds them. resolve, doctor and verify all ask `lookup`.

Where: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`. As with the docker CLI, a set DOCKER_CONFIG is
the only place looked at (the docker SDK's own search would fall back to ~/.docker).

What, for one registry host (Docker's order):
  1. the credential helper `credHelpers` names for the host, else the `credsStore`, through the
     docker-credential-* protocol: `docker-credential-<name> get`, the server URL on stdin, JSON
     {"ServerURL", "Username", "Secret"} on stdout (Username `<token>`: Secret is an identity token);
  2. when the helper has none, the `auths` entry: base64 `auth` of user:password, or an `identitytoken`.

The docker SDK does the parsing and the choosing (docker.auth: `AuthConfig.parse_auth`, `get_credential_store`,
`resolve_authconfig` with its docker.io / index.docker.io aliases). buildkit reads the file itself first (bounded,
a regular file) and checks the shape of what the SDK will read, so a malformed file is one clear message, not an
exception from deep inside the SDK; and it runs the helper itself, because the SDK's `credentials.Store` has no
timeout, warns on stderr when the helper is missing, and puts the helper's raw output into its exceptions.

Nothing here prints or logs a secret: a Credential keeps them out of its repr, messages name where a credential
came from (the file, the helper), never what it holds, and every secret read is remembered (sanitize.py) so the
terminal's last guard can blank it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildkit.errors import CredentialsError, excerpt
from buildkit.text.sanitize import remember_secret, strip_controls
from buildkit.world import proc

CONFIG_MAX_BYTES = 1 << 20  # a Docker config is a few KiB
HELPER_TIMEOUT = 60.0  # a helper may ask a keyring, or the user through a GUI pinentry
HELPER_OUTPUT_MAX = 64 << 10
# The protocol's answer when a helper holds nothing for the server (ErrCredentialsNotFound).
HELPER_NOT_FOUND = "credentials not found in native keychain"
# Names go into an executable's name, looked up on PATH: no path separators, nothing odd.
HELPER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
BASE64_RE = re.compile(r"[A-Za-z0-9+/]*={0,2}")
USERNAME_RE = re.compile(r"[^\x00-\x1f\x7f:]{1,256}")  # Basic auth: no colon, no control characters
SECRET_RE = re.compile(r"[^\x00-\x1f\x7f]{1,8192}")
TOKEN_RE = re.compile(r"[!-~]{1,8192}")  # an identity token goes into a form: printable ASCII, no spaces


@dataclass(frozen=True)
class Credential:
    """What Docker holds for one registry: a username and password, or an identity token (an OAuth2 refresh
    token, sent to the registry's token endpoint in exchange for access tokens)."""

    registry: str
    source: str  # where it came from, for messages: never what it holds
    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        for secret in (self.password, self.identity_token):
            remember_secret(secret)
        if self.username and self.password:
            remember_secret(self._basic())

    def _basic(self) -> str:
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")

    def basic_authorization(self) -> str | None:
        """`Authorization: Basic ...`, or None for an identity token (it has no password to send)."""
        return f"Basic {self._basic()}" if self.username and self.password else None

    def engine_auth(self) -> dict[str, str]:
        """The auth config the Docker engine takes with a pull (X-Registry-Auth)."""
        if self.identity_token:
            return {"identitytoken": self.identity_token, "serveraddress": self.registry}
        return {"username": self.username, "password": self.password, "serveraddress": self.registry}


def config_dir() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")


def config_path() -> Path:
    return config_dir() / "config.json"


def lookup(registry: str) -> Credential | None:
    """Docker's credential for `registry` (a host as an image reference names it: nvcr.io, 127.0.0.1:5000,
    docker.io), or None when Docker has none. CredentialsError when the config or its helper cannot be used.
    Each call reads the config and may run a helper: callers ask once per registry."""
    return DockerConfig.load().credential(registry)


@dataclass
class DockerConfig:
    path: Path
    auths: dict[str, Any]  # the SDK's parsed form
    creds_store: str | None
    cred_helpers: dict[str, str]

    @classmethod
    def load(cls) -> DockerConfig:
        """The config file, read within its bound and checked; an empty config when there is none."""
        path = config_path()
        raw = _read_bounded(path)
        if raw is None:
            return cls(path, {}, None, {})
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise _bad(path, "it is not JSON") from None
        if not isinstance(data, dict):
            raise _bad(path, f"expected a JSON object, found {type(data).__name__}")
        auths = _checked_auths(path, data.get("auths"))
        store = data.get("credsStore") or None
        if store is not None and not (isinstance(store, str) and HELPER_NAME_RE.fullmatch(store)):
            raise _bad(path, f"credsStore: expected a helper name like 'desktop', found {excerpt(store, 80)}")
        helpers = data.get("credHelpers") or {}
        if not isinstance(helpers, dict):
            raise _bad(path, f"credHelpers: expected an object, found {type(helpers).__name__}")
        for key, name in helpers.items():
            if not (isinstance(name, str) and HELPER_NAME_RE.fullmatch(name)):
                raise _bad(path, f"credHelpers[{excerpt(key, 80)}]: expected a helper name, found {excerpt(name, 80)}")
        from docker.auth import AuthConfig

        try:
            parsed = AuthConfig.parse_auth(auths, raise_on_error=True)
        except Exception as exc:  # noqa: BLE001 -- checked above; never show the SDK's text, it may quote a value
            raise _bad(path, f"the docker SDK cannot read its auths ({type(exc).__name__})") from None
        return cls(path, parsed, store, dict(helpers))

    def credential(self, registry: str) -> Credential | None:
        from docker.auth import INDEX_NAME, INDEX_URL, TOKEN_USERNAME, AuthConfig

        sdk = AuthConfig({"auths": self.auths, "credsStore": self.creds_store, "credHelpers": self.cred_helpers})
        helper = sdk.get_credential_store(registry)
        if helper:
            server = INDEX_URL if registry == INDEX_NAME else registry  # as the SDK asks a helper for Docker Hub
            which = "credHelpers" if self.cred_helpers.get(server) == helper else "credsStore"
            answer = _ask_helper(helper, server, f"{which} in {self.path}")
            if answer is not None:
                username, secret = answer
                source = f"docker-credential-{helper} ({which} in {self.path})"
                if username == TOKEN_USERNAME:
                    return Credential(registry, source, identity_token=secret)
                return Credential(registry, source, username=username, password=secret)
        entry = AuthConfig({"auths": self.auths}).resolve_authconfig(registry)  # the SDK's matching of keys
        if not entry:
            return None
        source = f"auths in {self.path}"
        if entry.get("IdentityToken"):
            return Credential(registry, source, identity_token=entry["IdentityToken"])
        if entry.get("username") and entry.get("password"):
            return Credential(registry, source, username=entry["username"], password=entry["password"])
        return None


def _read_bounded(path: Path) -> bytes | None:
    """The file's bytes (at most CONFIG_MAX_BYTES), None when it does not exist. Opened without blocking, so a FIFO
    is refused instead of waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _bad(path, f"it cannot be read ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _bad(path, "it is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(CONFIG_MAX_BYTES + 1)
    except OSError as exc:
        raise _bad(path, f"it cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > CONFIG_MAX_BYTES:
        raise _bad(path, f"it is larger than {CONFIG_MAX_BYTES >> 20} MiB")
    return data


def _checked_auths(path: Path, auths: object) -> dict[str, dict[str, str]]:
    """`auths` as the SDK may parse it: each entry an object whose `auth` is base64 of user:password and whose
    `identitytoken` fits a form. An empty `auth` is no credential (some tools write one). Messages name the key,
    never the value."""
    if auths is None:
        return {}
    if not isinstance(auths, dict):
        raise _bad(path, f"auths: expected an object, found {type(auths).__name__}")
    checked: dict[str, dict[str, str]] = {}
    for key, entry in auths.items():
        where = f"auths[{excerpt(key, 80)}]"
        if not isinstance(entry, dict):
            raise _bad(path, f"{where}: expected an object, found {type(entry).__name__}")
        kept: dict[str, str] = {}
        token = entry.get("identitytoken")
        if token:
            if not (isinstance(token, str) and TOKEN_RE.fullmatch(token)):
                raise _bad(path, f"{where}.identitytoken: expected a token (printable ASCII, no spaces)")
            kept["identitytoken"] = token
        auth = entry.get("auth")
        if auth:
            if not (isinstance(auth, str) and BASE64_RE.fullmatch(auth) and _user_password(auth)):
                raise _bad(path, f"{where}.auth: expected base64 of user:password (as `docker login` writes it)")
            kept["auth"] = auth
        checked[key] = kept
    return checked


def _user_password(auth: str) -> bool:
    try:
        text = base64.b64decode(auth, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    username, colon, password = text.partition(":")
    return bool(colon and USERNAME_RE.fullmatch(username) and SECRET_RE.fullmatch(password))


def _ask_helper(name: str, server: str, named_by: str) -> tuple[str, str] | None:
    """(Username, Secret) from `docker-credential-<name> get`, or None when it holds nothing for `server`."""
    program = f"docker-credential-{name}"
    exe = shutil.which(program)
    if exe is None:
        raise CredentialsError(
            f"the credential helper {program} is not installed or not on PATH ({named_by} names it for {server})",
            hint=f"install {program}, or take it out of that file",
        )
    try:
        done = proc.run([exe, "get"], stdin=server.encode(), stdout_limit=HELPER_OUTPUT_MAX, timeout=HELPER_TIMEOUT)
    except proc.TimedOut:
        raise CredentialsError(f"{program} get did not answer within {HELPER_TIMEOUT:g}s (for {server})") from None
    except proc.NotStarted as exc:
        raise CredentialsError(f"{program} could not be run: {exc.strerror}") from None
    if done.over:
        raise CredentialsError(f"{program} get answered more than {HELPER_OUTPUT_MAX >> 10} KiB for {server}")
    if done.returncode != 0:
        said = (done.stdout + b"\n" + done.stderr).decode("utf-8", "replace")
        if HELPER_NOT_FOUND in said:
            return None
        # Helpers print their error on stdout, where a broken one may also have printed the credential: never
        # quote a line that could hold it (JSON, or naming the secret).
        first = next(
            (
                line.strip()
                for line in said.splitlines()
                if line.strip() and not line.lstrip().startswith("{") and "secret" not in line.lower()
            ),
            "no other output",
        )
        raise CredentialsError(
            f"{program} get failed for {server} (exit {done.returncode}): {excerpt(strip_controls(first), 160)}",
            hint=f"`docker login {server}`, or check the helper ({named_by})",
        )
    try:
        answer = json.loads(done.stdout)
    except (ValueError, RecursionError):
        answer = None
    if not (
        isinstance(answer, dict) and isinstance(answer.get("Username"), str) and isinstance(answer.get("Secret"), str)
    ):
        raise CredentialsError(
            f"{program} get answered something that is not the credential helper protocol's "
            '{"ServerURL", "Username", "Secret"}'
        )
    username, secret = answer["Username"], answer["Secret"]
    if not username and not secret:  # docker-credential-pass's way of saying it has none (as the SDK reads it)
        return None
    remember_secret(secret)
    if not (USERNAME_RE.fullmatch(username) and SECRET_RE.fullmatch(secret)):
        raise CredentialsError(
            f"{program} get answered a username or secret that cannot be used (empty, too long, a colon in the "
            "username, or control characters)"
        )
    return username, secret


def _bad(path: Path, problem: str) -> CredentialsError:
    return CredentialsError(
        f"Docker's config {path}: {problem}",
        hint="fix or remove it (`docker login` rewrites it), or set DOCKER_CONFIG to another directory",
    )
