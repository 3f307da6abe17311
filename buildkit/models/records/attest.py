"""attest.json beside the statement `buildkit attest` wrote: which build it attests, and what was done with it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from buildkit.models.records import RecordHeader


class AttestRecord(BaseModel):
    """attest.json beside the statement: which build it attests (the header), and what was done with it."""

    model_config = ConfigDict(extra="forbid")
    header: RecordHeader
    statement: str  # the statement file's name
    statement_sha256: str
    subject: str  # name@digest
    signed: bool
    attached_to: str | None = None
    not_attached: str | None = None
    attested_at: str
