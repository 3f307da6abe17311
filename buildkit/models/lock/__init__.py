"""pins.lock: the current model and its facts (facts.py), one model per older version with its explicit upgrade
(v1.py to v4.py, as conda-lock keeps one model per lock version), reading any version strictly (read.py),
and the checks against the pins (checks.py). Everything a caller needs is named here."""

from buildkit.models.lock.checks import (
    COMPARED_FIELDS,
    composition,
    consistency_problems,
    content_warning,
    cuda_warning,
    differences,
    lock_sha256,
    platform_lock,
)
from buildkit.models.lock.facts import (
    LOCK_VERSION,
    READABLE_VERSIONS,
    SHA256_HEX_RE,
    SKIPPED_REASON,
    STALE,
    V1_REASON,
    V1_STALE,
    V2_STALE,
    V3_STALE,
    V4_STALE,
    CommitFact,
    CudaCheck,
    ImageFact,
    Lock,
    PatchFact,
    PlatformFacts,
    PullRequestFact,
    PythonFiles,
    Sha256Hex,
    SourceComparison,
    TorchCheck,
    WheelCommitFact,
    WheelFact,
    cuda_major,
)
from buildkit.models.lock.read import REWRITE_HINT, read_lock, strict_json

__all__ = [
    "COMPARED_FIELDS", "LOCK_VERSION", "READABLE_VERSIONS", "REWRITE_HINT", "SHA256_HEX_RE", "SKIPPED_REASON",
    "STALE", "V1_REASON", "V1_STALE", "V2_STALE", "V3_STALE", "V4_STALE", "CommitFact", "CudaCheck", "ImageFact",
    "Lock", "PatchFact", "PlatformFacts", "PullRequestFact", "PythonFiles", "Sha256Hex", "SourceComparison",
    "TorchCheck", "WheelCommitFact", "WheelFact", "composition", "consistency_problems", "content_warning",
    "cuda_major", "cuda_warning", "differences", "lock_sha256", "platform_lock", "read_lock", "strict_json",
]  # fmt: skip
