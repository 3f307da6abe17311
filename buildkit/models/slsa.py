"""The words of buildkit's SLSA provenance (in-toto Statement v1, SLSA provenance v1): its statement and predicate
types and its build types, which `buildkit attest` writes (stages/attest/slsa.py) and `buildkit verify --provenance`
reads back (stages/verify/provenance.py). docs/how-to/sign-and-verify.md says what each build type's parameters mean."""

from __future__ import annotations

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
