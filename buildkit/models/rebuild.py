"""What a build will run again, said before it starts (`buildkit build` and `--dry-run`): the inputs this lock gives
the Dockerfile's steps against those of the last build of the same target here (its record's `inputs`; for a record
written before buildkit kept them, the labels its image carries), each input that moved named, old -> new, with the
first step that reads it. BuildKit decides from content in the end; this says what the lock makes it decide."""

from __future__ import annotations

from buildkit.errors import InputError
from buildkit.files import read_record
from buildkit.models.lock import Lock, lock_sha256
from buildkit.models.overlay import vllm_layers
from buildkit.models.paths import Paths
from buildkit.models.records.build import BuildInputs, BuildRecord

# Each input, in the order the Dockerfile's steps read it, with the first step that does: a move re-runs that step
# and every step after it (the steps before it are reused where BuildKit's cache still holds them).
_READ_BY = (
    ("base_image", "the base image", "every step (the base image is the first)"),
    ("nemo_rl_commit", "NeMo-RL", "the steps that copy NeMo-RL's files where a file differs, and every step after"),
    ("cuda_arch_list", "build.cuda_arch_list", "the vLLM install RUN and every step after it"),
    ("drop_extras", "build.drop_extras", "the vLLM install RUN and every step after it"),
    ("wheel_sha256", "the wheel's bytes", "the wheel stage, the vLLM install RUN and every step after it"),
    ("wheel_commit", "the wheel commit", "the wheel stage, the vLLM install RUN and every step after it"),
    ("vllm_install", "the vLLM the install RUN installs", "the vLLM install RUN and every step after it"),
    ("vllm_commit", "vLLM's source", "the vLLM install RUN (it clones the source) and every step after it"),
)
# With an overlay (models/overlay.py) the source is read last, by the overlay's steps alone.
_OVERLAY_STEPS = (
    "only the vLLM overlay ({n} path(s) of the source laid over the install: its fetch, copy and removals); every "
    "layer up to the vLLM install is reused"
)


# A smoke build's target reads every input of the lock in its first steps (ARGs and ENVs), and installs no vLLM.
_SMOKE_STEPS = "the smoke target's RUN, which reads every input through its ARGs and ENVs (no vLLM is installed)"


def said_before_build(paths: Paths, lock: Lock, smoke: bool, smoke_base: str | None = None) -> list[str]:
    """The lines `build` says before buildx runs: against this target's last record in paths' build folder.
    smoke_base: the smoke build's stand-in, pinned; a dry run does not pin it, so a smoke build's base is left out."""
    where = paths.build_record(smoke)
    try:
        record = read_record(where, BuildRecord)
    except InputError as exc:
        return [f"{exc.message}: which steps run again is not known"]
    now = inputs_of(lock, smoke_base)
    skip = ("base_image",) if smoke and smoke_base is None else ()
    return rebuild_plan(now, lock_sha256(lock), record, str(where), skip=skip, smoke=smoke)


def inputs_of(lock: Lock, smoke_base: str | None = None) -> BuildInputs:
    """What the steps read from the lock; the base image is the smoke build's stand-in when it has one."""
    pr = lock.vllm_pr
    layers = vllm_layers(lock)
    return BuildInputs(
        base_image=smoke_base or lock.base_image.pinned,
        nemo_rl_commit=lock.nemo_rl.commit,
        cuda_arch_list=lock.build.cuda_arch_list,
        drop_extras=sorted(extra.name for extra in lock.build.drop_extras),
        wheel_commit=lock.vllm_wheel.commit,
        wheel_url=lock.wheel.url,
        wheel_sha256=lock.wheel.sha256,
        vllm_repo=lock.vllm.repo,
        vllm_commit=lock.vllm.commit,
        pr=pr.number if pr else None,
        pr_head=pr.head_commit if pr and not pr.merged else None,
        vllm_install=layers.install_commit,
        vllm_overlay=len(layers.overlay) + len(layers.removed) if layers.has_overlay else None,
    )


def _from_labels(record: BuildRecord) -> dict[str, str]:
    """What an older record's image labels say of the inputs (a loaded image's; a pushed one's were not read)."""
    labels = record.image.labels
    found = {
        "nemo_rl_commit": labels.get("org.opencontainers.image.revision"),
        "vllm_commit": labels.get("buildkit.vllm.commit"),
        "wheel_sha256": labels.get("buildkit.vllm.wheel.sha256"),
    }
    return {key: value for key, value in found.items() if value}


def rebuild_plan(
    now: BuildInputs,
    lock_hash: str,
    record: BuildRecord | None,
    where: str,
    skip: tuple[str, ...] = (),
    smoke: bool = False,
) -> list[str]:
    """Lines that say what this build runs again against the last one recorded at `where` (None: no record);
    the inputs in `skip` are not compared. A smoke build's target installs no vLLM: its own steps are named."""
    if record is None:
        return [f"no earlier build recorded in {where}: every step runs that BuildKit's cache does not hold"]
    last = f"the last build ({record.outcome}, {record.ended[:19]})"
    if record.lock_sha256 == lock_hash:
        return [f"the lock is the one {last} used: every step BuildKit's cache still holds is reused"]
    before = record.inputs.model_dump(exclude=set(skip)) if record.inputs else _from_labels(record)
    if not before:
        return [
            f"{last} used another lock, and its record keeps neither its inputs nor its image's labels (pushed, or "
            "written before buildkit kept them): which steps run again is not known here"
        ]
    after = now.model_dump()
    moved = [(key, what, step) for key, what, step in _READ_BY if key in before and before[key] != after[key]]
    if not moved:
        unknown = "" if record.inputs else " (of those its image's labels name)"
        return [f"{last} read the same inputs{unknown}: every step BuildKit's cache still holds is reused"]
    lines = [f"against {last}:"]
    for key, what, _step in moved:
        lines.append(f"  {what} moved: {_short(before[key])} -> {_short(after[key])}{_why(key, record.inputs, now)}")
    first = moved[0]
    if first[0] == "vllm_commit" and now.vllm_overlay is not None:
        step = _OVERLAY_STEPS.format(n=now.vllm_overlay)
    else:
        step = first[2] if first[0] == "base_image" or not smoke else _SMOKE_STEPS
    lines.append(f"  runs again: {step}")
    return lines


def _why(key: str, before: BuildInputs | None, now: BuildInputs) -> str:
    """What a move of vLLM's source or the wheel commit means for a tracked pull request."""
    if before is None or now.pr is None or before.pr != now.pr:
        return ""
    if key == "vllm_commit" and now.pr_head and before.pr_head and now.pr_head != before.pr_head:
        return f" (PR #{now.pr}'s head moved)"
    if key in ("wheel_commit", "vllm_install"):
        return f" (PR #{now.pr}'s merge base with main moved: a rebase, or a force-push onto newer main)"
    return ""


def _short(value: object) -> str:
    text = (", ".join(value) or "none") if isinstance(value, list) else str(value)
    return text[:12] if len(text) == 40 and all(c in "0123456789abcdef" for c in text) else text
