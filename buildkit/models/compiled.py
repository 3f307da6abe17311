"""vLLM's compiled inputs: the repository paths whose change makes a precompiled wheel wrong for a source commit.

With `VLLM_USE_PRECOMPILED=1`, vLLM's setup.py builds the Python package from the source commit but copies the
compiled files out of the wheel of another commit (by default the merge base with vLLM's main). That is only correct
when no compiled input differs between the two commits. buildkit lists the paths that differ (GitHub's compare API or
git) and holds them against the rules below; `compiled_changes` gives the paths that hit one.

Rules, first match wins (pattern: a directory prefix ending in `/`, a glob, or an exact path); each line says the
pattern (kind): why. Source, in vLLM's repository.

- `csrc/` (compiled-source): the C++/CUDA sources, and the scripts that generate sources, of `_C`, `_moe_C` and
  `cumem_allocator`. Source: CMakeLists.txt (VLLM_EXT_SRC, VLLM_MOE_EXT_SRC, VLLM_CUMEM_EXT_SRC).
- `cmake/external_projects/` (kernel-pin): the kernel repositories CMake fetches at a pinned GIT_TAG:
  vllm-flash-attn (`_vllm_fa2_C`, `_vllm_fa3_C`), FlashMLA (`_flashmla_C`, `_flashmla_extension_C`),
  triton_kernels, qutlass. Source: cmake/external_projects/*.cmake, included from CMakeLists.txt.
- `cmake/` (build-definition): the CMake helpers every extension is built with (utils.cmake: gencode flags,
  define_extension_target). Source: CMakeLists.txt `include(cmake/utils.cmake)`.
- `CMakeLists.txt` (build-definition): every extension target and its sources; pins CUTLASS (CUTLASS_REVISION) and
  the expected torch (TORCH_SUPPORTED_VERSION_CUDA). Source: CMakeLists.txt.
- `setup.py` (build-definition): declares the extensions (ext_modules), drives CMake, and decides what precompiled
  mode copies from the wheel. Source: setup.py (cmake_build_ext, precompiled_wheel_utils).
- `vllm/vllm_flash_attn/` (from-wheel): precompiled mode copies `vllm/vllm_flash_attn/**/*.py` (vllm-flash-attn's
  Python, installed by CMake) out of the wheel, so a source change here is replaced. Source: setup.py
  `flash_attn_regex`; vllm_flash_attn.cmake `install(DIRECTORY ...)`.
- `vllm/third_party/triton_kernels/` (from-wheel): precompiled mode copies `vllm/third_party/triton_kernels/**/*.py`
  (fetched by CMake at a pinned tag) out of the wheel. Source: setup.py `triton_kernels_regex`; triton_kernels.cmake.
- `*.so` (from-wheel): shared objects come from the wheel: `_C`, `_moe_C`, `_flashmla_C`, `_flashmla_extension_C`,
  `_sparse_flashmla_C`, `vllm_flash_attn/_vllm_fa2_C`, `vllm_flash_attn/_vllm_fa3_C`, `cumem_allocator`, `_rocm_C`
  (each `vllm/<name>.abi3.so`). Source: setup.py `files_to_copy`.
- `requirements/cuda.txt` (torch-pin): the torch the CUDA build installs and the extensions link against. Source:
  setup.py get_requirements (reads cuda.txt).
- `requirements/build.txt` (torch-pin): the torch of the build environment ("Should be mirrored in pyproject.toml").
  Source: requirements/build.txt.
- `requirements/build/cuda.txt` (torch-pin): the same pin after vLLM moved build requirements under
  requirements/build/. Source: the stored vLLM tree lists it (commit 838100bd); its text was not read.
- `pyproject.toml` (torch-pin): `[build-system] requires` pins the torch the extensions are built against. Source:
  pyproject.toml; CMakeLists.txt says the CUDA torch version "is derived from pyproject.toml and various
  requirements.txt files".

A torch-pin file is not a hit by itself: it matters only when the torch it requires changes, which
`torch_requirement` reads from each side's text (the caller compares them).

Sources, read from vLLM's repository as stored (github.com/vllm-project/vllm):
setup.py at e0e14a824238524d8336232de49190be22796a54; CMakeLists.txt at bc390b9142e8399054bb81ebe739a23ae2cd5d86;
cmake/external_projects/vllm_flash_attn.cmake at 008452abec8042fe4ec30153878bafee6d948588 (GIT_TAG 6f27a054...),
flashmla.cmake at 000a1ee93b2ddc3cb06c62a71fe769c789cbf7b1 (GIT_TAG a6ec2ba7...), triton_kernels.cmake at
0e7515776a8a0c7912721ec6f15faf66ee3bb87e (tag v3.5.1); requirements/cuda.txt at
53f9946d3c51ada60fc829669133b965fc2daa1f; requirements/build.txt at 02aad69c2c08b4b3c96203684afe4b2d7fedb3eb. The
compiled files themselves: every `.so` of vllm-0.14.0-cp38-abi3-manylinux_2_31_x86_64.whl (PyPI), all in
`files_to_copy`. Pure: no I/O.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from buildkit.models.tomlshape import check_shape

MAX_TEXT_BYTES = 1 << 20  # a requirements file or pyproject.toml is a few KiB; refuse anything near a MiB

KINDS = ("compiled-source", "kernel-pin", "build-definition", "from-wheel", "torch-pin")


@dataclass(frozen=True)
class Rule:
    pattern: str  # "dir/" prefix, a glob (has * ? or [), or an exact path
    kind: str
    why: str
    source: str

    def matches(self, path: str) -> bool:
        if self.pattern.endswith("/"):
            return path.startswith(self.pattern)
        if any(c in self.pattern for c in "*?["):
            return fnmatch.fnmatchcase(path, self.pattern)
        return path == self.pattern


_SETUP = "setup.py@e0e14a82"
_CMAKE = "CMakeLists.txt@bc390b91"

# Order matters: the first rule a path matches is the one reported (external_projects before cmake/).
RULES: tuple[Rule, ...] = (
    Rule(
        "csrc/",
        "compiled-source",
        "C++/CUDA sources and generator scripts of _C, _moe_C and cumem_allocator",
        f"{_CMAKE}: VLLM_EXT_SRC, VLLM_MOE_EXT_SRC, VLLM_CUMEM_EXT_SRC",
    ),
    Rule(
        "cmake/external_projects/",
        "kernel-pin",
        "kernel repositories fetched at a pinned GIT_TAG: vllm-flash-attn (_vllm_fa2_C, _vllm_fa3_C), "
        "FlashMLA (_flashmla_C, _flashmla_extension_C), triton_kernels, qutlass",
        "vllm_flash_attn.cmake@008452ab, flashmla.cmake@000a1ee9, triton_kernels.cmake@0e751577; "
        f"included from {_CMAKE}",
    ),
    Rule(
        "cmake/",
        "build-definition",
        "CMake helpers every extension is built with (gencode flags, define_extension_target)",
        f"{_CMAKE}: include(cmake/utils.cmake)",
    ),
    Rule(
        "CMakeLists.txt",
        "build-definition",
        "defines every extension target and its sources; pins CUTLASS and the expected torch",
        f"{_CMAKE}: CUTLASS_REVISION, TORCH_SUPPORTED_VERSION_CUDA",
    ),
    Rule(
        "setup.py",
        "build-definition",
        "declares the extensions, drives CMake, and decides what precompiled mode copies from the wheel",
        f"{_SETUP}: ext_modules, cmake_build_ext, precompiled_wheel_utils",
    ),
    Rule(
        "vllm/vllm_flash_attn/",
        "from-wheel",
        "precompiled mode copies vllm/vllm_flash_attn/**/*.py out of the wheel; a source change here is replaced",
        f"{_SETUP}: flash_attn_regex; vllm_flash_attn.cmake install(DIRECTORY)",
    ),
    Rule(
        "vllm/third_party/triton_kernels/",
        "from-wheel",
        "precompiled mode copies vllm/third_party/triton_kernels/**/*.py out of the wheel",
        f"{_SETUP}: triton_kernels_regex; triton_kernels.cmake",
    ),
    Rule(
        "*.so",
        "from-wheel",
        "shared objects come from the wheel (_C, _moe_C, _flashmla_C, _flashmla_extension_C, _sparse_flashmla_C, "
        "_vllm_fa2_C, _vllm_fa3_C, cumem_allocator, _rocm_C)",
        f"{_SETUP}: files_to_copy",
    ),
    Rule(
        "requirements/cuda.txt",
        "torch-pin",
        "the torch the CUDA build installs and the extensions link against",
        f"{_SETUP}: get_requirements reads cuda.txt; requirements/cuda.txt@53f9946d",
    ),
    Rule(
        "requirements/build.txt",
        "torch-pin",
        'the torch of the build environment ("Should be mirrored in pyproject.toml")',
        "requirements/build.txt@02aad69c",
    ),
    Rule(
        "requirements/build/cuda.txt",
        "torch-pin",
        "the same pin after vLLM moved build requirements under requirements/build/",
        "stored vLLM tree, requirements/build/cuda.txt@838100bd",
    ),
    Rule(
        "pyproject.toml",
        "torch-pin",
        "[build-system] requires pins the torch the extensions are built against",
        f"pyproject.toml; {_CMAKE} says the CUDA torch version is derived from it",
    ),
)


def rule_for(path: str) -> Rule | None:
    """The first rule `path` matches, or None."""
    return next((rule for rule in RULES if rule.matches(path)), None)


def compiled_changes(paths: Iterable[str]) -> list[tuple[str, Rule]]:
    """The changed paths that hit a compiled-input rule, each with its first rule, sorted and once each.
    Torch-pin files are left out: they matter only when `torch_requirement` of the two sides differs."""
    hits = []
    for path in sorted(set(paths)):
        rule = rule_for(path)
        if rule is not None and rule.kind != "torch-pin":
            hits.append((path, rule))
    return hits


_TABLE_RE = re.compile(r"^[ \t]*\[", re.MULTILINE)
# pip's comment rule: `#` at the start of a line or after whitespace
_COMMENT_RE = re.compile(r"(^|\s)#.*$")


def torch_requirement(text: str) -> tuple[str, ...]:
    """The torch requirements `text` states, normalised by packaging (`torch==2.9.1`, markers kept), in order.

    `text` is a requirements file (comments, `-r`/`--` option lines skipped; a line that is not a requirement is a
    ValueError) or a pyproject.toml (its `[build-system] requires`). Over 1 MiB is a ValueError."""
    if len(text) > MAX_TEXT_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise ValueError(f"refusing a requirements text over {MAX_TEXT_BYTES} bytes")
    entries = _build_system_requires(text)
    if entries is None:
        entries = _requirement_lines(text)
    found = []
    for entry in entries:
        try:
            req = Requirement(entry)
        except InvalidRequirement as err:
            raise ValueError(f"not a requirement: {entry[:200]!r}: {err}") from None
        if canonicalize_name(req.name) == "torch":
            req.name = "torch"  # `Torch` and `torch` are one project: a change of case is no change
            found.append(str(req))
    return tuple(found)


def _build_system_requires(text: str) -> list[str] | None:
    """pyproject.toml's `[build-system] requires` ([] without one), or None when `text` is not TOML."""
    if not _TABLE_RE.search(text):
        return None  # a requirements file: no line of one starts a TOML table
    check_shape(text, "pyproject.toml")  # before tomllib: see tomlshape.py
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None  # a requirements file: a requirement line (`torch==2.9.1`, `ninja`) is never valid TOML
    system = data.get("build-system", {})
    requires = system.get("requires", []) if isinstance(system, dict) else None
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise ValueError("[build-system] requires is not a list of strings")
    return requires


def _requirement_lines(text: str) -> list[str]:
    lines = []
    for raw in text.replace("\\\n", "").splitlines():  # pip joins a line ending in a backslash with the next
        line = _COMMENT_RE.sub("", raw).strip()
        if line and not line.startswith("-"):  # -r/-c includes and --index options name no requirement
            lines.append(line)
    return lines


# vLLM's Python files, as verify holds the image's package to the source commit's tree (issue 28). A path outside
# this grammar is not listed (vLLM's own are all inside it).
_PYTHON_RE = re.compile(r"vllm/[A-Za-z0-9_.+-][A-Za-z0-9_./+-]{0,390}\.py")
_FILE_MODES = ("100644", "100755")  # git's modes of regular files (120000: a symlink, 160000: a submodule)
# Written at install, not in the tree: setuptools-scm writes it (vLLM's pyproject.toml [tool.setuptools_scm]; its
# .gitignore lists it).
GENERATED_PYTHON = ("vllm/_version.py",)


def is_vllm_python(path: str, mode: str = "100644") -> bool:
    """A regular file of vLLM's Python package in the source tree, as the listing keeps it."""
    return mode in _FILE_MODES and bool(_PYTHON_RE.fullmatch(path)) and "/../" not in f"/{path}/"


def is_vllm_file(path: str, mode: str = "100644") -> bool:
    """A regular file of vLLM's package directory in the source tree (Python, JSON configs, templates ...), as the
    listing verify holds an editable checkout to keeps it: any path git can hold under vllm/ (vLLM's own use `,=[]`
    in config names), at most 400 characters, no control character, no empty, `.` or `..` component."""
    parts = path.split("/")
    return (
        mode in _FILE_MODES
        and len(path) <= 400
        and parts[0] == "vllm"
        and len(parts) > 1
        and all(part not in ("", ".", "..") for part in parts)
        and not any(ord(c) < 32 or ord(c) == 127 for c in path)
    )


def python_origin(path: str) -> str:
    """Where the image's copy of a vLLM Python file comes from: "source" (the checkout), "wheel" (precompiled mode
    copies it out of the wheel: a from-wheel rule), or "generated" (written at install)."""
    if path in GENERATED_PYTHON:
        return "generated"
    rule = rule_for(path)
    return "wheel" if rule is not None and rule.kind == "from-wheel" else "source"


# What precompiled mode takes from the wheel, read from setup.py at the wheel's commit (issue 40): vLLM 0.14.0's
# `extract_precompiled_and_patch_package` lists `files_to_copy` (names) and compiles `*_regex` patterns that it
# `.match`es (a prefix match) against every member name. Newer setup.py versions have other shapes; a setup.py
# whose shape is not this one gives None, and the caller says so and uses the rules above.
MAX_PATTERN = 300  # 0.14.0's longest is 66 characters
MAX_NAMES = 200


@dataclass(frozen=True)
class Extraction:
    names: tuple[str, ...]
    patterns: tuple[str, ...]

    def describe(self, commit: str) -> str:
        return f"setup.py at {commit[:12]}: files_to_copy ({len(self.names)} names) and {len(self.patterns)} pattern(s)"


def extraction_of(setup_py: str) -> Extraction | None:
    """The names and patterns setup.py's precompiled extraction takes from the wheel, or None when setup.py has no
    `files_to_copy` list of strings with `re.compile("...")` patterns beside it (read with ast: nothing runs)."""
    try:
        tree = ast.parse(setup_py)
    except (SyntaxError, ValueError):
        return None
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        assigned = {
            target.id: node.value
            for node in ast.walk(function)
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        names = _strings(assigned.get("files_to_copy"))
        if names is None:
            continue
        patterns = [_compiled(value) for key, value in assigned.items() if key.endswith("_regex")]
        if any(p is None for p in patterns) or len(names) > MAX_NAMES:
            return None
        return Extraction(tuple(names), tuple(p for p in patterns if p is not None))
    return None


def _strings(node: ast.expr | None) -> list[str] | None:
    if not isinstance(node, ast.List) or not all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return None
    return [e.value for e in node.elts]  # type: ignore[attr-defined]


def _compiled(node: ast.expr) -> str | None:
    """The pattern of `re.compile("...")`, held to MAX_PATTERN and to what `re` compiles; None otherwise."""
    ok = (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "compile"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "re"
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and len(node.args[0].value) <= MAX_PATTERN
    )
    if not ok:
        return None
    pattern = node.args[0].value  # type: ignore[attr-defined]
    try:
        re.compile(pattern)
    except re.error:
        return None
    return str(pattern)
