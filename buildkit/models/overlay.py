"""vLLM's layers in the image: one install, and for a source that differs from its wheel's commit only in paths the
install does not read, an overlay of those paths as the last layer (issue 42).

NeMo-RL installs vLLM in its heaviest RUN (build-custom-vllm.sh, beside every `uv sync`): 20-30 minutes. An open
PR's head moves many times a day, and with the head as that RUN's input every move re-runs it. But in precompiled
mode the install takes only Python from the source; the wheel (of the merge base) brings the compiled files. So the
RUN installs the *wheel commit's* source (for it, source and wheel agree), and the paths that differ between the
wheel commit and the source (resolve lists them, and its proof stops the build when one is compiled) are laid over
the checkout last: copied from the source where it has them, deleted where it has not, with the bytecode caches of
those Python files deleted too (a cache of the install's file must not stand for the overlay's). The install RUN
then depends only on the wheel commit, the wheel and what it read before: a moved head re-runs the overlay alone.

The overlay is refused (the install takes the source, as before; `whole` says why) where it would not be the same
install: a path the install reads (INSTALL_INPUTS), a lock that does not list the paths, a path the Dockerfile could
not name plainly, or more paths than one layer should carry. Paths precompiled mode takes from the wheel stay the
wheel's. What the overlay leaves naming the wheel commit: the checkout's `.git`, `vllm/_version.py` and the
dist-info (written by the install); the report says so. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from buildkit.models.compiled import rule_for
from buildkit.models.lock import Lock

CHECKOUT = "3rdparty/vllm"  # where build-custom-vllm.sh clones vLLM, below the install RUN's WORKDIR
# The overlay is a stage of its own, FROM the install's stage by default. A pushed build gives this global build arg
# the image a build of the same install pushed (by digest): the overlay's stage then starts FROM an image, whose
# layers BuildKit's exporter leaves as they are, where it would rewrite every layer's timestamps again
# (rewrite-timestamp=true: exporter/containerimage/writer.go, rewriteRemoteWithEpoch, skips the base image's layers
# only; a stage replaced by a named context is not a base image there).
INSTALLED_ARG = "VLLM_INSTALLED_IMAGE"
MAX_OVERLAY = 2_000  # paths in one overlay layer; more is most of vLLM's Python (1,234 files in 0.14.0)
# Paths the Dockerfile names as they are (COPY sources, shell words): no glob, quote or space. vLLM's own paths are all
# of this shape; another is refused from the overlay, never escaped.
_PLAIN_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")

# Paths the precompiled install reads besides the package's Python (vLLM 0.14.0's setup.py and NeMo-RL's
# build-custom-vllm.sh): a change to one changes what is installed, not only which files. Prefix "dir/" or exact.
INSTALL_INPUTS: tuple[tuple[str, str], ...] = (
    ("setup.py", "the install runs it"),
    ("pyproject.toml", "the install's build system and package configuration"),
    ("setup.cfg", "setuptools reads it"),
    ("MANIFEST.in", "setuptools reads it"),
    ("requirements/", "setup.py's get_requirements reads them; build-custom-vllm.sh edits and installs them"),
    ("use_existing_torch.py", "build-custom-vllm.sh runs it"),
    ("vllm/envs.py", "setup.py loads it (line 40 of vLLM 0.14.0's)"),
    ("CMakeLists.txt", "the build definition"),
    ("cmake/", "the build definition"),
    ("csrc/", "compiled sources"),
)


@dataclass(frozen=True)
class VllmLayers:
    """How the image gets vLLM's files: the install's repository and commit, and the overlay laid over it."""

    install_repo: str
    install_commit: str
    source_repo: str
    source_commit: str
    overlay: tuple[str, ...] = ()  # paths copied from the source (it has them)
    removed: tuple[str, ...] = ()  # paths deleted (only the wheel commit has them)
    whole: str | None = None  # why the install takes the source itself although it differs from the wheel commit

    @property
    def has_overlay(self) -> bool:
        return bool(self.overlay or self.removed)

    def stale_caches(self) -> list[str]:
        """Shell globs of the bytecode caches of each overlaid or removed Python file, relative to the checkout."""
        found = []
        for path in (*self.overlay, *self.removed):
            if path.endswith(".py"):
                folder, _, name = path.rpartition("/")
                found.append(f"{folder + '/' if folder else ''}__pycache__/{name[:-3]}.*.pyc")
        return found

    def said(self) -> str:
        """One line for render and the report."""
        if self.has_overlay:
            return (
                f"vLLM installed from {self.install_commit[:12]} (the wheel's commit), then {len(self.overlay)} "
                f"path(s) of the source {self.source_commit[:12]} laid over it and {len(self.removed)} removed"
            )
        if self.whole:
            return f"vLLM installed from the source {self.source_commit[:12]} itself: {self.whole}"
        return f"vLLM installed from the source {self.source_commit[:12]}, the wheel's commit"

    def reported(self) -> str | None:
        """The report's line: the overlay and what it leaves naming the wheel's commit; None without an overlay."""
        if not self.has_overlay:
            return None
        return (
            f"{self.said()}, as the last steps of the image (the vLLM overlay: a moved PR head rebuilds them alone); "
            f"vllm.__version__, vllm/_version.py, the dist-info and the checkout's .git name "
            f"{self.install_commit[:12]}, the commit installed, not the source {self.source_commit[:12]}, whose "
            "files verify holds the package to"
        )


def installed_stage(target: str) -> str:
    """The stage that ends with vLLM installed, before the overlay's stage (named `target`) lays the source over it."""
    return f"{target}-vllm-installed"


def install_input(path: str) -> str | None:
    """Why the install reads `path` (None: it reads it only as part of the package's Python, if at all)."""
    for pattern, why in INSTALL_INPUTS:
        if path == pattern or (pattern.endswith("/") and path.startswith(pattern)):
            return why
    return None


def vllm_layers(lock: Lock) -> VllmLayers:
    """The layer plan the lock gives: an overlay when the source differs from the wheel commit only in paths the
    install does not read, else the install of the source itself (with why)."""
    source, wheel = lock.vllm, lock.vllm_wheel
    same = VllmLayers(source.repo, source.commit, source.repo, source.commit)
    compared = lock.vllm_compare
    if wheel.commit == source.commit or compared.paths == 0:
        return same

    def whole(why: str) -> VllmLayers:
        return VllmLayers(source.repo, source.commit, source.repo, source.commit, whole=why)

    if lock.vllm_install is not None:
        return whole("uv builds it from the commit NeMo-RL's uv.lock pins, in the sync RUN")
    if compared.changed is None:
        return whole(f"the lock does not list the {compared.paths} path(s) that differ (resolve again to list them)")
    if len(compared.changed) > MAX_OVERLAY:
        return whole(f"{len(compared.changed)} paths differ, more than one layer of them should carry ({MAX_OVERLAY})")
    overlay: list[str] = []
    removed: list[str] = []
    for path, change in compared.changed.items():
        why = install_input(path)
        if why is not None:
            return whole(f"{path} differs, and the install reads it ({why})")
        if not _PLAIN_RE.fullmatch(path):
            return whole(f"{path!r} differs, a path the Dockerfile cannot name as it is")
        rule = rule_for(path)
        if rule is not None and rule.kind == "from-wheel":
            continue  # precompiled mode takes it from the wheel, whatever the source holds
        (removed if change == "removed" else overlay).append(path)
    return VllmLayers(wheel.upstream, wheel.commit, source.repo, source.commit, tuple(overlay), tuple(removed))
