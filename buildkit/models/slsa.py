"""The words of buildkit's SLSA provenance (in-toto Statement v1, SLSA provenance v1): its statement and predicate
types and its build types, which `buildkit attest` writes (stages/attest/slsa.py) and `buildkit verify --provenance`
reads back (stages/verify/provenance.py). docs/how-to/sign-and-verify.md says what each build type's parameters mean."""

from __future__ import annotations

import json
from typing import Any

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# This project's build type: what the parameters below mean (docs/how-to/sign-and-verify.md). The host
# is reserved (RFC 2606): the URI identifies the type and resolves nowhere; move it to the project's published
# documentation when there is one, with a new version if the meaning of a parameter changes.
BUILD_TYPE = "https://buildkit.invalid/buildtypes/nemo-rl-image/v1"
# What an index statement's parameters mean: the index assembled from the platform images of one lock, each of
# which has its own statement (BUILD_TYPE); docs/how-to/sign-and-verify.md.
INDEX_BUILD_TYPE = "https://buildkit.invalid/buildtypes/nemo-rl-image-index/v1"
DEFAULT_BUILDER_ID = "https://buildkit.invalid/builders/local/v1"


def canonical(value: Any) -> bytes:
    """JSON with sorted keys, no insignificant whitespace, UTF-8: one value, one byte string (what is signed)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def subjects(statement: object) -> dict[str, str]:
    """sha256 (hex) -> name of each subject of an in-toto statement; anything not of that shape is passed over."""
    found = statement.get("subject") if isinstance(statement, dict) else None
    out = {}
    for subject in found if isinstance(found, list) else []:
        digest = subject.get("digest") if isinstance(subject, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if isinstance(sha, str):
            out[sha] = str(subject.get("name", ""))
    return out
