"""The report's verdict: what was built, each check buildkit knows with its result (a pass, a fail or one of the three
kinds of not checked, models/verdicts.py), and the rows its tables show: one platform's verdict, one record's checks,
and the verdicts of several platforms side by side."""

from __future__ import annotations

from typing import Any

from buildkit.models.records.build import BuildRecord
from buildkit.models.verdicts import MEANING, UNCHECKED, counts, image_check, judged, known, no_image
from buildkit.text import markdown


def verdict(lock, record, rendered, verify, provenance_checked, exported, attested=None) -> dict[str, Any]:
    """The report's first block: what was built, the build, every check buildkit knows (models/checks.py) and each
    check of `buildkit verify`, each a pass, a fail or one of the three kinds of not checked (models/verdicts.py)
    with its detail, and what is unpinned. The provenance check's own results are summed up in the known check
    "provenance" (and listed in `provenance_checks`), so no result is counted twice."""
    checks = [
        *_build_checks(record, rendered),
        *known(lock, verify, record, provenance_checked),
        *_verify_checks(verify, record),
        *_after_build_checks(record, attested, exported),
    ]
    target = ("smoke" if rendered.smoke_base else lock.build.target) if rendered else None
    return {
        "built": {
            "tag": record.image.tag if record else lock.build.tag,
            "digest": record.image.digest if record else None,
            "id": record.image.id if record else None,
            "target": built_target(record),
            "kind": ("smoke" if record.smoke else "release") if record else None,
            "outcome": record.outcome if record else None,
            "platform": lock.build.platform,
        },
        "checks": checks,
        "counts": counts(checks),
        "provenance_checks": [
            image_check("provenance", r.name, r.status, r.reason, provenance_checked.smoke)
            for r in (provenance_checked.results if provenance_checked else [])
        ],
        "unpinned": {"target": target, "items": rendered.unpinned} if rendered else None,
    }


def built_target(record: BuildRecord | None) -> str | None:
    """The target the build asked buildx for (its argv); None before a build."""
    if record is None or "--target" not in record.argv:
        return None
    return record.argv[record.argv.index("--target") + 1]


def _build_checks(record, rendered) -> list[dict[str, str]]:
    """The build, and drift (upstream's Dockerfile against the pins)."""
    checks = []
    if record is None:
        checks.append(judged("build", "not run yet", "nothing built from this lock yet", "buildkit build"))
    elif record.outcome == "succeeded":
        cached = f"{record.instructions_cached or 0} of {record.instructions_total or 0} steps cached"
        checks.append(judged("build", "pass", cached))
    else:
        why = " ".join(x for x in (record.failed_step, record.error) if x) or record.outcome
        checks.append(judged("build", "fail", why))
    if rendered is None:
        checks.append(judged("drift", "not run yet", "not rendered from this lock", "buildkit render"))
    elif rendered.drift:
        checks.append(judged("drift", "fail", "; ".join(rendered.drift)))
    else:
        checks.append(judged("drift", "pass", "upstream expects nothing the pins do not give"))
    return checks


def _verify_checks(verify, record) -> list[dict[str, str]]:
    """Each check of `buildkit verify` on the image ("verify: ..."), or one row saying why it has not run."""
    if verify is None:
        return [
            no_image("verify", record) or judged("verify", "not run yet", "not run on this image", "buildkit verify")
        ]
    return [image_check("verify", r.name, r.status, r.reason, verify.smoke) for r in verify.results]


def _after_build_checks(record, attested, exported) -> list[dict[str, str]]:
    """The SLSA attestation and the squashfs export."""
    checks = []
    if attested is None:
        checks.append(
            no_image("SLSA attestation", record)
            or judged("SLSA attestation", "not run yet", "not attested", "buildkit attest")
        )
    elif attested.attached_to:
        checks.append(judged("SLSA attestation", "pass", f"signed and attached to {attested.attached_to}"))
    elif attested.signed:
        why = f"{attested.statement} signed, not attached: {attested.not_attached or 'not said why'}"
        checks.append(judged("SLSA attestation", "could not check", why))
    else:
        checks.append(
            judged(
                "SLSA attestation",
                "not run yet",
                f"{attested.statement} written, not signed",
                "buildkit attest --key cosign.key",
            )
        )
    if exported is None:
        checks.append(
            no_image("squashfs export", record)
            or judged("squashfs export", "not run yet", "not exported", "buildkit export")
        )
    else:
        checks.append(judged("squashfs export", "pass", f"{exported.path}, sha256 {exported.sha256}"))
    return checks


def matrix(checks: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The verdict's rows as a table shows them: one row per check, the checks of `buildkit verify` summed up in
    one row (each is listed under Verification), so the table has the same rows whatever verify found."""
    out: list[dict[str, Any]] = []
    for c in checks:
        if c["check"].startswith("verify: "):
            if not out or out[-1]["check"] != "verify":
                out.append({"check": "verify", "rows": []})
            out[-1]["rows"].append(c)
        else:
            out.append({"check": c["check"], "rows": [c]})
    for r in out:
        rows = r["rows"]
        one = len(rows) == 1 and rows[0]["check"] == r["check"]
        r["result"] = rows[0]["status"] if one else counted(counts(rows), only_found=True)
        r["cell"] = _result(rows[0]["status"]) if one else _summed(rows)
        r["detail"] = _detail(rows[0]) if one else f"{len(rows)} checks inside the image, each under Verification"
    return out


def _result(status: str) -> str:
    return "**FAIL**" if status == "fail" else status


def _summed(rows: list[dict[str, str]]) -> str:
    """The results of several rows counted: "5 pass, 2 not applicable" ("**1 FAIL**" where one failed)."""
    found = counts(rows)
    return ", ".join(f"**{n} FAIL**" if kind == "fail" else f"{n} {kind}" for kind, n in found.items() if n)


def _detail(row: dict[str, str]) -> str:
    """A row's detail as the table shows it: a row not run yet ends with the command that runs it, as code."""
    if row["status"] == "not run yet":
        return f"{row['detail']}: run `{row['command']}`"
    return row["detail"]


def counted(found: dict[str, int], only_found: bool = False) -> str:
    """Counts as one phrase: every result named ("10 pass, 0 fail, 4 not applicable, ..."), or only those found."""
    return ", ".join(f"{n} {result}" for result, n in found.items() if n or not only_found)


def legend() -> str:
    """What the three kinds of not checked mean, as every verdict says it (markdown: each kind in italics)."""
    return (
        "A check that neither passed nor failed is one of three: "
        + "; ".join(f"*{kind}*: {MEANING[kind]}" for kind in UNCHECKED)
        + "."
    )


def named_rows(rows: list[dict[str, str]], prefix: str) -> list[dict[str, Any]]:
    """The rows of one record's checks (verify's, or the provenance check's) as its own table shows them."""
    return [
        {"name": r["check"].removeprefix(prefix), "cell": markdown.Markdown(_result(r["status"])), "detail": _detail(r)}
        for r in rows
        if r["check"].startswith(prefix)
    ]


def verdict_matrix(verdicts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the platforms' verdicts side by side: one per check (in the first platform's order, then any only
    another has), each with every platform's result ("none" where a platform has no such row)."""
    each = {p: {r["check"]: r for r in matrix(v["checks"])} for p, v in verdicts.items()}
    order: list[str] = []
    for found in each.values():
        order += [name for name in found if name not in order]
    return [
        {
            "check": name,
            "results": {p: found[name]["result"] if name in found else None for p, found in each.items()},
            "cells": {p: found[name]["cell"] if name in found else "none" for p, found in each.items()},
        }
        for name in order
    ]
