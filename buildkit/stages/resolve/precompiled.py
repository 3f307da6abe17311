"""What precompiled mode takes from the wheel, as the lock's vllm_files lists it: the wheel's member names run
through the extraction setup.py at the wheel's commit declares (models/compiled.py: Extraction), else through
buildkit's from-wheel rules (its shared objects and from-wheel Python), said.

setup.py's patterns are upstream's regular expressions: they are matched in a child interpreter with a deadline,
so a pattern that backtracks without end stops resolve with one line instead of hanging it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from buildkit.errors import UpstreamMalformed
from buildkit.gpu.scan import member_hashes, member_names
from buildkit.models.compiled import Extraction
from buildkit.world import proc

# setup.py's own test: `x.filename in files_to_copy` or `regex.match(x.filename)` (a match at the start).
_SELECT = (
    "import json, re, sys; d = json.load(sys.stdin); ps = [re.compile(p) for p in d['patterns']]; "
    "names = set(d['names']); print(json.dumps([m for m in d['members'] if m in names or any(p.match(m) for p in ps)]))"
)
DEADLINE = 60  # seconds: 100,000 names against a few patterns take milliseconds; this is a hang's scale
MAX_ANSWER = 64 << 20


def taken(members: list[str], extraction: Extraction, what: str) -> list[str]:
    """The members setup.py's extraction takes, in the wheel's order."""
    data = {"names": list(extraction.names), "patterns": list(extraction.patterns), "members": members}
    argv = [sys.executable, "-I", "-S", "-c", _SELECT]
    try:
        done = proc.run(argv, timeout=DEADLINE, stdout_limit=MAX_ANSWER, stdin=json.dumps(data).encode())
    except proc.TimedOut:
        raise UpstreamMalformed(
            f"{what}: setup.py's extraction patterns took more than {DEADLINE} s over {len(members):,} member names"
        ) from None
    if done.returncode != 0 or done.over:
        raise UpstreamMalformed(f"{what}: setup.py's extraction patterns could not be matched: {done.said()}")
    chosen = json.loads(done.stdout)
    return [m for m in members if m in set(chosen)]


def precompiled_files(
    wheel: Path, hashes: dict[str, str], extraction: Extraction | None
) -> tuple[dict[str, str] | None, list[str]]:
    """(vllm_files, notes): the sha256 of each member precompiled mode takes, from `hashes` (what the GPU checks
    hashed) or read now. Without an extraction, the members buildkit's rules name (the shared objects and from-wheel
    Python under vllm/ that `hashes` holds). A member the wheel carries that setup.py leaves out is said (vLLM
    #54478: the extraction list has silently missed libraries)."""
    if extraction is None:
        return {k: v for k, v in sorted(hashes.items()) if k.startswith("vllm/")} or None, []
    members = member_names(wheel)
    chosen = taken(members, extraction, f"wheel {wheel.name}")
    missing = set(chosen) - set(hashes)
    if missing:
        member_hashes(wheel, missing.__contains__, hashes)
    left = sorted(k for k in hashes if k.startswith("vllm/") and k.endswith(".so") and k not in chosen)
    notes = [f"the wheel carries {', '.join(left[:5])}, which setup.py's extraction leaves out"] if left else []
    return {name: hashes[name] for name in sorted(chosen)} or None, notes
