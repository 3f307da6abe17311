"""The resolve record, build/resolve.json: when resolve read each fact of the lock, and what it noticed on the way.

The lock holds facts only, so that unchanged upstreams give the same lock bytes (and the same image, whose labels
carry the lock's hash) on any machine, any day. The times live here instead, beside the lock: rewritten by every
resolve that writes or confirms the lock, named by the lock's hash, and never copied into an image. The report
shows them when the record names the lock it describes.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from buildkit.files import write_atomic

RECORD_VERSION = 1


class ResolveRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    record_version: int = RECORD_VERSION
    lock_sha256: str = Field(description="The hash of the lock these times are for (lock.lock_sha256).")
    started_at: str
    finished_at: str
    seconds: float | None = None  # how long resolve took (None: a record from before it was kept)
    read_at: dict[str, str] = Field(
        description="When each fact was read (UTC): nemo_rl, vllm, vllm_pr, base_image, wheel (the wheel: when its "
        "bytes were hashed, or found), uv_lock (NeMo-RL's, for the torch of the ABI check)."
    )
    notes: list[str] = Field(description="What resolve noticed that is no fact of the pins (a git cache reset).")


def write_record(path: Path, record: ResolveRecord) -> None:
    write_atomic(path, record.model_dump_json(indent=2) + "\n")
