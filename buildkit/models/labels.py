"""The image's labels, from the lock: the one list that render writes into the Dockerfile (templates/labels.j2 loops
over it) and that verify compares with the built image."""

from __future__ import annotations

from datetime import UTC, datetime

from buildkit.errors import InputError
from buildkit.models.lock import Lock, lock_sha256

# The labels verify compares with the lock (the ones it always compared): the commits, the wheel and the lock itself.
# The others (source, version, created, vllm.repo) describe the image and follow from these.
VERIFIED = (
    "org.opencontainers.image.revision",
    "buildkit.vllm.commit",
    "buildkit.vllm.wheel",
    "buildkit.vllm.wheel.sha256",
    "buildkit.lock.sha256",
)


def commit_time(lock: Lock) -> datetime:
    """The NeMo-RL commit time, in UTC: the image's creation time and the build's SOURCE_DATE_EPOCH."""
    try:
        when = datetime.fromisoformat(lock.nemo_rl.date)
        # In UTC: out of range there (year 1 at +14:00) is OverflowError, as malformed is ValueError.
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise InputError(f"lock: nemo_rl.date {lock.nemo_rl.date!r} is not an ISO 8601 time") from None


def image_labels(lock: Lock) -> dict[str, str]:
    """Every label the Dockerfile gives the final image, in the order it writes them (the wheel's sha256 only when
    the lock has one: the bytes BuildKit checked when it fetched the wheel)."""
    labels = {
        "org.opencontainers.image.source": lock.nemo_rl.repo,
        "org.opencontainers.image.revision": lock.nemo_rl.commit,
        "org.opencontainers.image.version": lock.build.tag.rsplit(":", 1)[1],
        "org.opencontainers.image.created": commit_time(lock).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "buildkit.vllm.repo": lock.vllm.repo,
        "buildkit.vllm.commit": lock.vllm.commit,
        "buildkit.vllm.wheel": lock.wheel.url,
    }
    if lock.wheel.sha256:
        labels["buildkit.vllm.wheel.sha256"] = lock.wheel.sha256
    labels["buildkit.lock.sha256"] = lock_sha256(lock)
    return labels


def verified_labels(lock: Lock) -> dict[str, str]:
    """The labels verify compares, as the lock says they must be."""
    return {key: value for key, value in image_labels(lock).items() if key in VERIFIED}
