"""A check's result as the report states it: a pass, a fail, or one of three kinds of "not checked", each said so.

checks.py gives every check buildkit knows as pass, fail or "not checked" with a reason; bump's summary and the SLSA
statement show them so. The report tells the three kinds of "not checked" apart: a known check's from the same
inputs that decided its row (the lock, the build record, the verify and provenance records), a skip of `buildkit
verify` from the reasons verify gives its skips (its record keeps nothing else):

- **not applicable**: the check cannot apply to this target (a smoke image has no vLLM, no CUDA runtime, no torch);
- **not run yet**: what runs it has not run; the row names the command that does (`command`);
- **could not check**: it was asked and nothing could be judged; the row says why.

And a pass needs something checked: an ABI check that looked up 0 symbols judged nothing, so it is "could not check".
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from buildkit.models.checks import known_checks
from buildkit.models.records.build import pushed

Result = Literal["pass", "fail", "not applicable", "not run yet", "could not check"]
RESULTS: tuple[Result, ...] = get_args(Result)
UNCHECKED: tuple[Result, ...] = RESULTS[2:]
# What each kind means, as the report's legend says it.
MEANING: dict[str, str] = {
    "not applicable": "the check cannot apply to this target",
    "not run yet": "the detail names the command that runs it",
    "could not check": "it was asked and nothing could be judged; the detail says why",
}
_RUN_RE = re.compile(r"[:;,]? *(?:run )?`(buildkit [^`]+)`")


def judged(check: str, status: Result, detail: str, command: str | None = None) -> dict[str, str]:
    """One row: the check, its result and the detail; a row "not run yet" also names the command that runs it."""
    if status not in RESULTS:
        raise ValueError(f"not a result: {status!r}")
    if (status == "not run yet") != (command is not None):
        raise ValueError(f"{check}: a row is 'not run yet' exactly when it names a command")
    out = {"check": check, "status": status, "detail": detail}
    if command is not None:
        out["command"] = command
    return out


def counts(rows: list[dict[str, str]]) -> dict[str, int]:
    """How many rows of each result, every result named (0 where none)."""
    return {result: sum(1 for r in rows if r["status"] == result) for result in RESULTS}


def _without(detail: str, command: str) -> str:
    """The reason without the command checks.py appends to it (": buildkit verify"), which the row names apart."""
    for tail in (f": run {command}", f": {command}", f"; {command}"):
        if detail.endswith(tail):
            return detail.removesuffix(tail)
    return detail


def known(lock, verify=None, record=None, provenance_checked=None) -> list[dict[str, str]]:
    """Every check buildkit knows (checks.known_checks), each row "not checked" told apart by kind, and a pass that
    checked nothing made what it is."""
    return [
        _judge(r, lock, verify, record, provenance_checked)
        for r in known_checks(lock, verify, record, provenance_checked)
    ]


def _gpu(lock, verify):
    if verify is not None and verify.gpu is not None:
        return verify.gpu, f"in the image ({verify.gpu.source})"
    if lock.gpu is not None:
        return lock.gpu, f"in the wheel at resolve ({lock.gpu.source})"
    return None, ""


# The command that runs each check of an image once there is one; before a build, `buildkit build &&` comes first.
IMAGE_COMMANDS = {
    "driver": "buildkit verify --driver VERSION",
    "reproducibility": "buildkit build --check-reproducible",
    "provenance": "buildkit verify --provenance --key cosign.pub",
    "verify": "buildkit verify",
    "SLSA attestation": "buildkit attest",
    "squashfs export": "buildkit export",
}


def no_image(check: str, record) -> dict[str, str] | None:
    """The row of a check of the image when there is no image (None: there is one): not run yet before any build
    (the command builds it first), could not check after a build that made none."""
    if record is None:
        command = IMAGE_COMMANDS[check]
        if check == "provenance":  # read from the registry: the image has to be pushed there
            command = "buildkit build --push && " + command
        elif not command.startswith("buildkit build"):
            command = "buildkit build && " + command
        return judged(check, "not run yet", "no image built from this lock yet", command)
    if record.outcome != "succeeded":
        return judged(check, "could not check", f"the build {record.outcome}: it made no image to check")
    return None


def _judge(row: dict[str, str], lock, verify, record, provenance_checked) -> dict[str, str]:
    name, status, detail = row["check"], row["status"], row["detail"]
    if status == "pass" and name in ("ABI", "glibc"):
        gpu, where = _gpu(lock, verify)
        if gpu is not None and gpu.abi is not None and gpu.abi.checked == 0:
            return judged(
                name,
                "could not check",
                f"0 undefined symbols {where} were looked up in {'; '.join(gpu.abi.against)}: nothing was judged",
            )
    if status == "pass":
        return judged(name, "pass", detail)
    if status == "fail":
        return judged(name, "fail", detail)
    if name in ("torch", "kernels", "ABI", "glibc"):  # checks of the lock, made by resolve
        unread = getattr(lock, "torch", None) is None if name == "torch" else _gpu(lock, verify)[0] is None
        if unread and lock.wheel.content_addressed:  # resolve read the wheel, and the lock predates this check
            why = _without(_without(detail, "buildkit resolve again"), "buildkit resolve")
            return judged(name, "not run yet", why, "buildkit resolve")
        return judged(name, "could not check", detail)
    if name not in IMAGE_COMMANDS:  # CUDA, content address: resolve asked, and its reason is in the lock
        return judged(name, "could not check", detail)
    smoke = record is not None and record.smoke
    if name == "driver" and smoke:
        return judged(name, "not applicable", detail)
    missing = no_image(name, record)
    if missing is not None:
        return missing
    command = IMAGE_COMMANDS[name]
    if name == "driver":
        if verify is None:
            return judged(name, "not run yet", "verify has not run on this image", command)
        if verify.gpu is not None and verify.gpu.driver is not None and not verify.gpu.driver.drivers:
            return judged(name, "not run yet", _without(detail, command), command)
        return judged(name, "could not check", _without(detail, "buildkit verify"))
    elif name == "reproducibility":
        command = command.replace("build ", "build --smoke ") if smoke else command
        return judged(name, "not run yet", "not rebuilt to compare", command)
    elif name == "provenance" and provenance_checked is None:
        if not pushed(record):
            why = "the image was loaded into Docker, not pushed: no registry holds its provenance to read"
            return judged(name, "could not check", f"{why} (the build record: {record.provenance or 'not said'})")
        return judged(name, "not run yet", "not read from the registry", command)
    return judged(name, "could not check", detail)


def image_check(label: str, name: str, status: str, reason: str, smoke: bool) -> dict[str, str]:
    """One result of `buildkit verify` (or of `verify --provenance`) as a row: a skip is one of the three kinds.

    verify skips a check that cannot apply to a smoke image ("a smoke image has no ..."), the GPU probe unless asked
    (--gpus: on a smoke image, with no torch, it cannot apply either), and what needs the lock resolved again ("run
    `buildkit resolve`"); any other skip could not be checked, and its reason says why."""
    check = f"{label}: {name}"
    if status != "skip":
        return judged(check, "pass" if status == "pass" else "fail", reason)
    if reason.startswith("a smoke image has no"):
        return judged(check, "not applicable", reason)
    if "(--gpus)" in reason:
        if smoke:
            return judged(
                check, "not applicable", f"a smoke image has no torch to probe a GPU with; verify said: {reason}"
            )
        return judged(
            check, "not run yet", reason.replace(" (--gpus)", "").strip() or "not asked", "buildkit verify --gpus"
        )
    found = _RUN_RE.search(reason)
    if found:  # what verify needs first (the lock resolved again), then verify itself
        again = IMAGE_COMMANDS["verify" if label == "verify" else "provenance"]
        return judged(check, "not run yet", reason[: found.start()].strip() or reason, f"{found[1]} && {again}")
    return judged(check, "could not check", reason)
