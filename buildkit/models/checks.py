"""Every check buildkit knows, each passed, failed or not checked with the reason: the one list the report's verdict,
report.json, bump's summary and the SLSA statement all show, so a check that did not run is never invisible.

Each row is read from what the build left: the lock (CUDA, torch, kernels, ABI, glibc, content address; at resolve), the
verify record (kernels, ABI, glibc and driver in the image itself, when verify read them), the build record
(reproducibility) and the provenance check's record. Nothing here runs a check.
"""

from __future__ import annotations

from typing import Any, Literal

Status = Literal["pass", "fail", "not checked"]

# The checks, in the order every place shows them.
KNOWN_CHECKS = (
    "CUDA",
    "torch",
    "kernels",
    "ABI",
    "glibc",
    "driver",
    "content address",
    "reproducibility",
    "provenance",
)


def row(name: str, status: Status, detail: str) -> dict[str, str]:
    return {"check": name, "status": status, "detail": detail}


def known_checks(
    lock, verify=None, record=None, provenance_checked=None, *, image: str | None = None, unread: str | None = None
) -> list[dict]:
    """One row per KNOWN_CHECKS. verify/record/provenance_checked: the records of the build described (None: not
    run); image: why there is no image-side row yet ("no image built from this lock yet" by default); unread: why
    the verify records are not read, where they are not (the SLSA statement is made from the lock and the build)."""
    gpu, where = _gpu(lock, verify)
    no_image = image or "no image built from this lock yet: buildkit build"
    return [
        _cuda(lock),
        _torch(lock),
        _kernels(gpu, where, lock),
        _abi(gpu, where, lock, "abi", "torch", "ABI"),
        _abi(gpu, where, lock, "glibc", "base image", "glibc"),
        _driver(verify, record, no_image, unread),
        _content_address(lock),
        _reproducibility(record, no_image),
        _provenance(provenance_checked, record, no_image, unread),
    ]


def _gpu(lock, verify) -> tuple[Any, str]:
    """The GPU facts of the image when verify read them, else the wheel's at resolve, and which they are."""
    if verify is not None and verify.gpu is not None:
        return verify.gpu, f"in the image ({verify.gpu.source})"
    if lock.gpu is not None:
        return lock.gpu, f"in the wheel at resolve ({lock.gpu.source})"
    return None, ""


def _no_wheel_bytes(lock) -> str:
    """Why resolve read no GPU code: its bytes were not there, or the lock predates the GPU checks."""
    if not lock.wheel.content_addressed:
        return f"resolve did not read the wheel's bytes ({lock.wheel.not_content_addressed}): buildkit resolve"
    return "the lock was written before resolve read GPU code: run buildkit resolve again"


def _cuda(lock) -> dict[str, str]:
    # A mismatch stops resolve, so a lock holds a match or the reason there was none.
    return row("CUDA", "pass" if lock.cuda.outcome == "match" else "not checked", lock.cuda.detail)


def _torch(lock) -> dict[str, str]:
    """The torch the wheel was built for (its METADATA) against the torch NeMo-RL's uv.lock installs. Another
    release line stops resolve, so a lock holds a match, the same release line (the ABI row decides), or why not."""
    found = getattr(lock, "torch", None)
    if found is None:
        return row(
            "torch",
            "not checked",
            "the lock holds no torch comparison (written before it, or resolve read no wheel bytes): buildkit resolve",
        )
    if found.outcome == "not checked":
        return row("torch", "not checked", found.detail)
    if found.outcome == "same release line":  # a patch release apart: the symbol check (ABI) is what decides
        return row("torch", "pass", f"{found.detail} (same release line; the ABI row says whether it links)")
    return row("torch", "pass", found.detail)


def _kernels(gpu, where: str, lock) -> dict[str, str]:
    if gpu is None:
        return row("kernels", "not checked", _no_wheel_bytes(lock))
    required = [r for r in gpu.libraries if r.required]
    missing = [r.library for r in required if any(v.startswith(("none", "missing")) for v in r.loads.values())]
    if missing:
        return row("kernels", "fail", f"no kernel for {', '.join(gpu.gpus)} in {', '.join(missing)} {where}")
    unknown = [(r.library, v) for r in required for v in r.loads.values() if v.startswith("unknown")]
    if unknown:  # a library whose GPU code could not be read: nothing was judged, and that is not a pass
        said = "; ".join(f"{library.rsplit('/', 1)[-1]}: {verdict}" for library, verdict in unknown[:4])
        return row(
            "kernels",
            "not checked",
            f"the GPU code of {len(unknown)} required library(ies) {where} could not be read: {said}",
        )
    return row("kernels", "pass", f"{len(gpu.libraries)} libraries {where} load on {', '.join(gpu.gpus)}")


def _abi(gpu, where: str, lock, key: str, against: str, name: str) -> dict[str, str]:
    """vLLM's symbols against torch ("abi") or the base image's glibc and libstdc++ ("glibc")."""
    if gpu is None:
        return row(name, "not checked", _no_wheel_bytes(lock))
    why = getattr(gpu, "not_checked", {}).get(key)
    found = gpu.abi
    used = [
        a
        for a in (found.against if found else [])
        if (a.startswith("torch ") if key == "abi" else not a.startswith("torch "))
    ]
    if not used:
        return row(name, "not checked", why or f"not recorded why: the lock predates the reason ({against} unread)")
    if found.unresolved_count:
        return row(name, "fail", f"{found.unresolved_count} of {found.checked} symbols unresolved {where}")
    if not found.checked:  # a pass needs at least one thing checked (issue 41)
        return row(
            name, "not checked", f"0 undefined symbols {where} were looked up in {'; '.join(used)}: nothing was judged"
        )
    return row(name, "pass", f"{found.checked} symbols {where} resolve against {'; '.join(used)}")


def _driver(verify, record, no_image: str, unread: str | None = None) -> dict[str, str]:
    if record is None:
        return row("driver", "not checked", no_image)
    if record.smoke:
        return row("driver", "not checked", "a smoke image has no CUDA runtime to run on a driver")
    if unread:
        return row("driver", "not checked", unread)
    driver = verify.gpu.driver if verify is not None and verify.gpu is not None else None
    if driver is None:
        return row("driver", "not checked", "buildkit verify did not read the image's CUDA runtime: buildkit verify")
    if not driver.drivers:
        least = f"needs driver {driver.minimum_driver} or newer" if driver.minimum_driver else "minimum driver unknown"
        return row(
            "driver",
            "not checked",
            f"CUDA {driver.cuda_runtime} {least}; no node's driver given: buildkit verify --driver VERSION",
        )
    judged = "; ".join(f"{d}: {why}" for d, why in driver.drivers.items())
    failed = any(why.split(":", 1)[0] in ("no", "unknown") for why in driver.drivers.values())
    return row("driver", "fail" if failed else "pass", judged)


def _content_address(lock) -> dict[str, str]:
    w = lock.wheel
    if w.content_addressed:
        return row("content address", "pass", f"wheel sha256 {w.sha256}, checked by BuildKit (ADD --checksum)")
    return row("content address", "not checked", w.not_content_addressed or "no sha256 in the lock")


def _reproducibility(record, no_image: str) -> dict[str, str]:
    repro = record.reproducibility if record is not None else None
    if record is None:
        return row("reproducibility", "not checked", no_image)
    if repro is None:
        return row("reproducibility", "not checked", "not rebuilt to compare: buildkit build --check-reproducible")
    return row("reproducibility", "pass" if repro.identical else "fail", "; ".join(repro.summary[:3]))


def _provenance(checked, record, no_image: str, unread: str | None = None) -> dict[str, str]:
    if record is None:
        return row("provenance", "not checked", no_image)
    if unread:
        return row("provenance", "not checked", unread)
    if checked is None:
        return row(
            "provenance",
            "not checked",
            "not read from the registry: buildkit verify --provenance --key cosign.pub (needs a pushed image)",
        )
    failed = [r.name for r in checked.results if r.status == "fail"]
    if failed:
        return row("provenance", "fail", "; ".join(failed))
    passed = sum(1 for r in checked.results if r.status == "pass")
    return row("provenance", "pass", f"{passed} of {len(checked.results)} provenance checks pass")


def counts(rows: list[dict[str, str]]) -> dict[str, int]:
    return {s: sum(1 for r in rows if r["status"] == s) for s in ("pass", "fail", "not checked")}
