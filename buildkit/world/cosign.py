"""cosign, the one signing tool buildkit runs: it signs the DSSE pre-authentication encoding of buildkit's statement
with the user's key, attaches the envelope to the image in its registry, and verifies it back.

buildkit never reads the key: cosign does, from any key reference it supports (a file made by `cosign
generate-key-pair`, a KMS URI), and a key file's password comes from $COSIGN_PASSWORD, which buildkit neither
prints nor passes on the command line. No transparency log is used (`--tlog-upload=false` signing,
`--insecure-ignore-tlog` verifying): with internet access, keyless signing and Rekor are cosign's defaults
(docs/how-to/sign-and-verify.md).
cosign runs as an argv list, never through a shell, with a deadline; its failures become one message.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from buildkit.errors import CheckFailed, EngineNotReady, InputError, UpstreamUnreachable, excerpt
from buildkit.files import read_local
from buildkit.models.grammar import DIGEST_RE, IMAGE_REF_RE
from buildkit.text.sanitize import strip_controls
from buildkit.world import proc
from buildkit.world.registry import parse_image_ref

ENGINE_BIN = Path("/var/cache/buildkit-engine/bin/cosign")  # where scripts/cosign-build.sh caches it
BUILD_HINT = "build it with `sudo bash scripts/cosign-build.sh` (Go and its module proxy), or set BUILDKIT_COSIGN"
TIMEOUT = 300.0  # seconds one cosign run may take (it talks to a registry)
MAX_OUTPUT = 64 << 20  # bytes of verified attestations buildkit reads back
_VERSION_RE = re.compile(r"v[0-9]+\.[0-9]+\.[0-9]+[A-Za-z0-9.+-]*")
_SIG_RE = re.compile(r"[A-Za-z0-9+/=]{8,2000}")
_KEY_SCHEMES = ("awskms://", "gcpkms://", "azurekms://", "hashivault://", "k8s://", "pkcs11:", "env://")

PAYLOAD_TYPE = "application/vnd.in-toto+json"  # DSSE payloadType of an in-toto statement


def pae(payload_type: str, payload: bytes) -> bytes:
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def envelope(payload: bytes, signature: bytes, keyid: str = "") -> dict[str, Any]:
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": keyid, "sig": base64.b64encode(signature).decode("ascii")}],
    }


def binary() -> str:
    """The cosign to run: $BUILDKIT_COSIGN, else `cosign` on PATH, else the engine's cached build."""
    named = os.environ.get("BUILDKIT_COSIGN")
    if named:
        if not (Path(named).is_file() and os.access(named, os.X_OK)):
            raise EngineNotReady(f"BUILDKIT_COSIGN={named!r} is not an executable file", hint=BUILD_HINT)
        return named
    found = shutil.which("cosign") or (str(ENGINE_BIN) if os.access(ENGINE_BIN, os.X_OK) else None)
    if not found:
        raise EngineNotReady("cosign is not installed: it signs, attaches and verifies attestations", hint=BUILD_HINT)
    return found


def _run(args: list[str], what: str, timeout: float = TIMEOUT) -> proc.Result:
    try:
        done = proc.run(args, stdout_limit=MAX_OUTPUT, timeout=timeout, env=os.environ.copy(), stderr_limit=1 << 20)
    except proc.TimedOut:
        raise UpstreamUnreachable(f"cosign did not finish {what} within {timeout:g}s") from None
    except proc.NotStarted as exc:
        raise EngineNotReady(f"cannot run cosign ({args[0]}): {exc.strerror}", hint=BUILD_HINT) from None
    if done.over:
        raise CheckFailed(f"cosign printed more than {MAX_OUTPUT} bytes while {what}")
    return done


def last_error(stderr: bytes) -> str:
    """cosign's own words for a failure: its `Error:` line (the last one), without control characters."""
    lines = [strip_controls(line).strip() for line in stderr.decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line]
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error:")]
    text = (errors or lines or ["no output"])[-1]
    return text if len(text) <= 300 else text[:297] + "..."


def version(cosign: str) -> str:
    done = _run([cosign, "version", "--json"], "printing its version", timeout=30)
    try:
        found = json.loads(done.stdout.decode("utf-8", "replace")).get("gitVersion", "")
    except (ValueError, AttributeError):
        found = ""
    if done.returncode != 0 or not isinstance(found, str) or not _VERSION_RE.fullmatch(found):
        raise EngineNotReady(f"{cosign} does not answer `version --json` as cosign does", hint=BUILD_HINT)
    return found


def check_key(key: str) -> None:
    """A key reference cosign can use; a key file needs $COSIGN_PASSWORD set (empty for no password), since
    cosign would otherwise wait for a terminal that is not there."""
    if not key or key.startswith("-") or any(c in key for c in "\n\r\0"):
        raise InputError(f"--key: expected a key file or a KMS URI, found {excerpt(key, 80)}")
    if key.startswith(_KEY_SCHEMES):
        return
    path = Path(key)
    if not path.is_file():
        raise InputError(f"--key: no key file {key}", hint="make one with `cosign generate-key-pair`")
    if "COSIGN_PASSWORD" not in os.environ:
        raise InputError(
            "$COSIGN_PASSWORD is not set: cosign needs the key file's password (empty for a key without one)",
            hint="export COSIGN_PASSWORD (buildkit never prints it or puts it on a command line)",
        )


MAX_PUBLIC_KEY = 64 << 10  # a PEM public key is a few hundred bytes


def check_public_key(key: str) -> None:
    """verify --provenance's --key, before any check runs: a KMS URI, or a regular file holding a PEM public key. A
    missing file, or a private key (cosign.key given for cosign.pub), is bad input (exit 2), not a failed check."""
    if not key or key.startswith("-") or any(c in key for c in "\n\r\0"):
        raise InputError(f"--key: expected a public key file or a KMS URI, found {excerpt(key, 80)}")
    if key.startswith(_KEY_SCHEMES):
        return

    try:
        text = read_local(Path(key), "the public key", MAX_PUBLIC_KEY).decode("ascii", "replace")
    except FileNotFoundError:
        raise InputError(
            f"--key: no public key file {key}", hint="give cosign.pub from `cosign generate-key-pair`"
        ) from None
    if "PRIVATE KEY" in text:
        raise InputError(
            f"--key: {key} is a private key; verifying needs the public key",
            hint="give cosign.pub (never hand the private key to a verifier)",
        )
    if "-----BEGIN PUBLIC KEY-----" not in text:
        raise InputError(f"--key: {key} holds no PEM public key (-----BEGIN PUBLIC KEY-----)", hint="give cosign.pub")


def sign(cosign: str, key: str, payload: bytes) -> dict[str, Any]:
    """A DSSE envelope of the payload (an in-toto statement), signed with `key` by `cosign sign-blob` over the
    pre-authentication encoding, offline (no transparency log)."""
    check_key(key)
    with tempfile.TemporaryDirectory(prefix="buildkit-sign-") as tmp:
        message = Path(tmp) / "pae"
        output = Path(tmp) / "signature"
        message.write_bytes(pae(PAYLOAD_TYPE, payload))
        done = _run(
            [
                cosign,
                "sign-blob",
                f"--key={key}",
                "--tlog-upload=false",
                "--yes",
                f"--output-signature={output}",
                str(message),
            ],
            "signing",
        )
        if done.returncode != 0:
            raise InputError(f"cosign could not sign with the key {key}: {last_error(done.stderr)}")
        text = output.read_text(encoding="ascii", errors="replace").strip() if output.is_file() else ""
    if not _SIG_RE.fullmatch(text):
        raise EngineNotReady(f"cosign sign-blob wrote no base64 signature (found {excerpt(text, 60)})")
    try:
        signature = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise EngineNotReady("cosign sign-blob wrote a signature that is not base64") from None
    return envelope(payload, signature)


def registry_flags(image: str) -> list[str]:
    """Plain HTTP only to a registry on a loopback address, as Docker and buildkit's registry client do."""

    return ["--allow-http-registry"] if parse_image_ref(image).api_base.startswith("http://") else []


def pinned(name: str, digest: str) -> str:
    ref = f"{name}@{digest}"
    m = IMAGE_REF_RE.fullmatch(ref)
    if not m or not DIGEST_RE.fullmatch(digest) or m.group("tag"):
        raise InputError(f"not an image name and digest: {excerpt(ref, 160)}")
    return ref


def attach(cosign: str, envelope_file: Path, image: str) -> None:
    """Attach a signed envelope to `image` (name@digest) in its registry, where `cosign verify-attestation` and
    admission controllers look for it."""
    done = _run(
        [cosign, "attach", "attestation", f"--attestation={envelope_file}", *registry_flags(image), image],
        "attaching the attestation",
    )
    if done.returncode != 0:
        raise UpstreamUnreachable(
            f"cosign could not attach the attestation to {image}: {last_error(done.stderr)}",
            hint="the image must be pushed (`buildkit build --push`) and the registry writable with your credentials",
        )


def verify(cosign: str, public_key: str, image: str) -> list[dict[str, Any]]:
    """The in-toto statements attached to `image` that `cosign verify-attestation --type slsaprovenance1` accepts
    with `public_key` (signature, predicate type, subject digest). None accepted is a failed check."""
    _given_public_key(public_key)
    # A Sigstore bundle attached as an OCI referrer (export --to --key) makes cosign v2 ask for a trusted root even
    # with a key: the one that trusts the key alone.
    with _key_only_root() as root:
        done = _run(
            [
                cosign, "verify-attestation", f"--key={public_key}", "--type=slsaprovenance1",
                "--insecure-ignore-tlog=true", f"--trusted-root={root}", *registry_flags(image), image,
            ],
            "verifying the attestation",
        )  # fmt: skip
    if done.returncode != 0:
        raise CheckFailed(f"cosign verify-attestation refused {image}: {last_error(done.stderr)}")
    statements = []
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        try:
            env = json.loads(line)
            payload = base64.b64decode(env["payload"], validate=True)
            statements.append(json.loads(payload))
        except (ValueError, KeyError, TypeError, binascii.Error, RecursionError):
            raise CheckFailed(
                f"cosign verify-attestation printed something that is not a DSSE envelope for {image}"
            ) from None
    return [s for s in statements if isinstance(s, dict)]


# A Sigstore trusted root that trusts no CA, log or timestamp authority: with a key (`--key`), cosign v2's bundle
# verification still asks for one, and must not fetch Sigstore's public one over the network (a login node has none).
# Keyless verification (Fulcio certificates, Rekor entries) needs Sigstore's own trusted_root.json instead.
KEY_ONLY_TRUSTED_ROOT = {
    "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
    "tlogs": [],
    "certificateAuthorities": [],
    "ctlogs": [],
    "timestampAuthorities": [],
}


def _given_public_key(public_key: str) -> None:
    if not public_key or public_key.startswith("-"):
        raise InputError(f"--key: expected a public key file or a KMS URI, found {excerpt(public_key, 80)}")


@contextmanager
def _key_only_root() -> Iterator[Path]:
    """KEY_ONLY_TRUSTED_ROOT as a file, for cosign's --trusted-root, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="buildkit-verify-") as tmp:
        root = Path(tmp) / "trusted_root.json"
        root.write_text(json.dumps(KEY_ONLY_TRUSTED_ROOT))
        yield root


def attest_blob(cosign: str, key: str, statement: bytes, bundle: Path) -> None:
    """Sign an in-toto statement (every subject already in it) with `key` into a Sigstore bundle at `bundle` (cosign
    attest-blob --statement --new-bundle-format; no transparency log)."""
    check_key(key)
    with tempfile.TemporaryDirectory(prefix="buildkit-bundle-") as tmp:
        given = Path(tmp) / "statement.json"
        given.write_bytes(statement)
        done = _run(
            [
                cosign, "attest-blob", f"--key={key}", f"--statement={given}", "--new-bundle-format",
                f"--bundle={bundle}", "--tlog-upload=false", "--yes",
            ],
            "signing the bundle",
        )  # fmt: skip
    if done.returncode != 0:
        raise InputError(f"cosign could not sign with the key {key}: {last_error(done.stderr)}")


def verify_blob(cosign: str, public_key: str, bundle: Path, blob: Path) -> None:
    """That `bundle` holds a statement signed with `public_key` and naming `blob`'s sha256 among its subjects
    (cosign verify-blob-attestation, offline: no network, no transparency log). Refused: CheckFailed."""
    _given_public_key(public_key)
    with _key_only_root() as root:
        done = _run(
            [
                cosign, "verify-blob-attestation", f"--bundle={bundle}", "--new-bundle-format",
                f"--trusted-root={root}", f"--key={public_key}", "--insecure-ignore-tlog=true", "--offline=true",
                "--type=slsaprovenance1", str(blob),
            ],
            "verifying the bundle",
        )  # fmt: skip
    if done.returncode != 0:
        raise CheckFailed(f"cosign refused {bundle.name} for {blob.name}: {last_error(done.stderr)}")
