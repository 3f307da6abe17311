"""The declared changes to upstream's docker/Dockerfile, each a named transformation that must find its target.

Render starts from upstream's file at the locked commit and applies these, in this order:

    syntax_directive       upstream's `# syntax=` line -> buildkit's header (or none with --no-syntax)
    base_image_by_digest   the global `ARG BASE_IMAGE=<tag>` that a FROM uses -> the lock's name@digest
    nemo_rl_source_ref     `ARG NRL_GIT_REF=...` in the nemo-rl stage -> the locked commit
    wheel_stage            adds the vllm-wheel stage after the nemo-rl stage (ADD --checksum of the locked wheel)
    source_date_epoch      adds `ARG SOURCE_DATE_EPOCH` to every stage that runs on an image
    apt_log_cleanup        after `rm -rf /var/lib/apt/lists/*` in a RUN script: no apt/dpkg logs in the layer
    torch_cuda_arch_list   every `ENV TORCH_CUDA_ARCH_LIST=...` -> build.cuda_arch_list
    custom_vllm            the RUN that calls tools/build-custom-vllm.sh mounts the wheel stage; the vLLM repo,
                           commit and wheel through upstream's BUILD_CUSTOM_VLLM_* build args where the commit has
                           them, else added, with the script called as the declared patch expects
    wheel_env              after that RUN, the wheel's commit and location in the image's environment
    vllm_overlay           where the source differs from the wheel commit only in Python (models/overlay.py): the
                           stages vllm-source and vllm-overlay after vllm-wheel; the target stage renamed
                           <target>-vllm-installed and a stage <target> FROM it (or FROM the pushed image a build of
                           the same install left: build arg VLLM_INSTALLED_IMAGE) that lays the overlay over the
                           install of the wheel commit (COPY --link), stale caches removed
    drop_extras            each `uv sync ... --extra <dropped>` disabled (or the extra taken out of a multi-extra sync)
    nemo_rl_commit         `ARG NEMO_RL_COMMIT` (and its ENV) -> the locked commit
    labels                 the provenance labels at the end of the target stage

A transformation that finds nothing to change raises TransformationFailed naming itself and what it looked for:
never a silent no-op. Every value written here passed the lock's grammars (and render.py's for the wheel).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from buildkit.dockerfile.text import Edit, Instruction, Parsed, is_heredoc
from buildkit.errors import UpstreamMismatch, excerpt
from buildkit.models.overlay import CHECKOUT, VllmLayers, installed_stage

WHEEL_MOUNT = "--mount=type=bind,from=vllm-wheel,target={dir}"
SCRIPT = "tools/build-custom-vllm.sh"
MAX_SCRIPT = 1024 * 1024


class TransformationFailed(UpstreamMismatch):
    """Upstream's Dockerfile no longer has what a declared change changes (exit 4, like a patch that no longer fits)."""


@dataclass
class Change:
    name: str
    summary: str
    edits: list[Edit] = field(default_factory=list)


@dataclass(frozen=True)
class Inputs:
    """What the transformations need, every value already validated."""

    commit: str
    nemo_rl_repo: str
    base_image: str  # name@digest
    cuda_arch_list: str
    drop_extras: dict[str, str]  # name -> reason (one line)
    target: str
    wheel_dir: str
    wheel_path: str
    vllm_repo: str  # the repository and commit the install RUN installs (the wheel's, with an overlay)
    vllm_commit: str
    syntax: bool
    script_text: str | None  # tools/build-custom-vllm.sh in the prepared tree (declared patches applied)
    layers: VllmLayers | None = None  # None: no overlay
    uv_source: bool = False  # NeMo-RL builds vLLM with uv from a git source (lock.vllm_install), not the script


# What the template gives: a function from a macro name (and arguments) to its lines.
Blocks = Callable[..., list[str]]


def _fail(name: str, doc: Parsed, looked_for: str, found: str = "found none") -> TransformationFailed:
    return TransformationFailed(
        f"transformation {name}: looked for {looked_for} in {doc.name}; {found}",
        hint="upstream changed its Dockerfile: update the transformation"
        " (buildkit/dockerfile/transforms.py) or the pins",
    )


def _arg(ins: Instruction, key: str) -> str | None:
    """The ARG's value for `key` ('' when declared without a default), None when this ARG is not `key`."""
    if ins.cmd != "ARG" or len(ins.value) != 1:
        return None
    name, _, default = ins.value[0].partition("=")
    return default if name == key else None


def syntax_directive(doc: Parsed, _inp: Inputs, _blocks: Blocks) -> Change:
    """Upstream's `# syntax=` parser directive gives way to buildkit's header (which names its own frontend)."""
    first = doc.lines[0] if doc.lines else ""
    if re.fullmatch(r"#\s*syntax\s*=.*", first.strip(), re.IGNORECASE):
        return Change(
            "syntax_directive",
            f"upstream's `{excerpt(first.strip())}` replaced by the header",
            [Edit.replace("syntax_directive", 1, 1, [])],
        )
    return Change("syntax_directive", "upstream has no `# syntax=` line; the header adds buildkit's")


def base_image_by_digest(doc: Parsed, inp: Inputs, _blocks: Blocks) -> Change:
    name = "base_image_by_digest"
    found = [(i, _arg(i, "BASE_IMAGE")) for i in doc.global_instructions()]
    found = [(i, default) for i, default in found if default is not None]
    if len(found) != 1:
        raise _fail(name, doc, "one `ARG BASE_IMAGE=...` before the first FROM", f"found {len(found)}")
    ins, default = found[0]
    if not any(s.base in ("${BASE_IMAGE}", "$BASE_IMAGE") for s in doc.stages):
        raise _fail(name, doc, "a `FROM ${BASE_IMAGE}` stage")
    summary = f"ARG BASE_IMAGE={excerpt(default or '(no default)')} -> {inp.base_image}"
    return Change(name, summary, [Edit.replace(name, ins.start, ins.end, [f"ARG BASE_IMAGE={inp.base_image}"])])


def nemo_rl_source_ref(doc: Parsed, inp: Inputs, _blocks: Blocks) -> Change:
    name = "nemo_rl_source_ref"
    stage = doc.stage_named("nemo-rl")
    if stage is None:
        raise _fail(name, doc, "the stage `nemo-rl` (the build passes the prepared tree as that context)")
    found = [i for i in doc.in_stage(stage) if _arg(i, "NRL_GIT_REF") is not None]
    if not found:
        raise _fail(name, doc, "`ARG NRL_GIT_REF` in the stage nemo-rl")
    edits = [Edit.replace(name, i.start, i.end, [f"ARG NRL_GIT_REF={inp.commit}"]) for i in found]
    return Change(name, f"ARG NRL_GIT_REF -> {inp.commit} (lines {_lines(found)})", edits)


def wheel_stage(doc: Parsed, _inp: Inputs, blocks: Blocks) -> Change:
    name = "wheel_stage"
    stage = doc.stage_named("nemo-rl")
    if stage is None:
        raise _fail(name, doc, "the stage `nemo-rl`, after which the vllm-wheel stage goes")
    if doc.stage_named("vllm-wheel") is not None:
        raise _fail(name, doc, "no stage of its own named vllm-wheel", "upstream has one")
    return Change(
        name,
        "stage vllm-wheel added after the stage nemo-rl",
        [Edit.insert_after(name, stage.end, ["", *blocks("wheel_stage")])],
    )


def source_date_epoch(doc: Parsed, _inp: Inputs, blocks: Blocks) -> Change:
    name = "source_date_epoch"
    froms = [i for i in doc.instructions if i.cmd == "FROM" and i.value and i.value[0].lower() != "scratch"]
    if not froms:
        raise _fail(name, doc, "a stage that is not FROM scratch")
    edits = [Edit.insert_after(name, i.end, blocks("source_date_epoch")) for i in froms]
    stages = ", ".join(doc.stages[i.stage].name or str(i.stage) for i in froms)
    return Change(name, f"ARG SOURCE_DATE_EPOCH added to the stages {stages}", edits)


def apt_log_cleanup(doc: Parsed, _inp: Inputs, blocks: Blocks) -> Change:
    name = "apt_log_cleanup"
    edits = []
    for ins in doc.instructions:
        for number, line in doc.body(ins):
            if line.strip() == "rm -rf /var/lib/apt/lists/*":
                indent = line[: len(line) - len(line.lstrip())]
                edits.append(Edit.insert_after(name, number, [indent + b for b in blocks("apt_log_cleanup")]))
    if not edits:
        raise _fail(name, doc, "`rm -rf /var/lib/apt/lists/*` in a RUN script")
    return Change(name, f"apt and dpkg logs removed after line(s) {', '.join(str(e.start - 1) for e in edits)}", edits)


def torch_cuda_arch_list(doc: Parsed, inp: Inputs, _blocks: Blocks) -> Change:
    name = "torch_cuda_arch_list"
    found = [i for i in doc.instructions if i.cmd == "ENV" and "TORCH_CUDA_ARCH_LIST" in i.value[0::2]]
    if not found:
        raise _fail(name, doc, "`ENV TORCH_CUDA_ARCH_LIST=...`")
    for ins in found:
        if len(ins.value) != 2:
            raise _fail(name, doc, "`ENV TORCH_CUDA_ARCH_LIST=...` setting nothing else", f"line {ins.start} sets more")
    line = f'ENV TORCH_CUDA_ARCH_LIST="{inp.cuda_arch_list}"'
    edits = [Edit.replace(name, i.start, i.end, [line]) for i in found]
    was = ", ".join(excerpt(i.value[1]) for i in found)
    return Change(name, f'TORCH_CUDA_ARCH_LIST {was} -> "{inp.cuda_arch_list}" (lines {_lines(found)})', edits)


def nemo_rl_commit(doc: Parsed, inp: Inputs, _blocks: Blocks) -> Change:
    name = "nemo_rl_commit"
    args = [i for i in doc.instructions if _arg(i, "NEMO_RL_COMMIT") is not None]
    if not args:
        raise _fail(name, doc, "`ARG NEMO_RL_COMMIT`")
    envs = [i for i in doc.instructions if i.cmd == "ENV" and i.value[:1] == ("NEMO_RL_COMMIT",) and len(i.value) == 2]
    edits = [Edit.replace(name, i.start, i.end, [f"ARG NEMO_RL_COMMIT={inp.commit}"]) for i in args]
    edits += [Edit.replace(name, i.start, i.end, [f"ENV NEMO_RL_COMMIT={inp.commit}"]) for i in envs]
    return Change(name, f"NEMO_RL_COMMIT -> {inp.commit} (lines {_lines(args + envs)})", edits)


def labels(doc: Parsed, inp: Inputs, blocks: Blocks) -> Change:
    name = "labels"
    stage = doc.stage_named(inp.target)
    if stage is None:
        raise _fail(name, doc, f"the target stage {inp.target} (build.target)")
    return Change(
        name,
        f"provenance labels added at the end of the stage {inp.target}",
        [Edit.insert_after(name, stage.end, blocks("labels"))],
    )


# --- custom vLLM ---------------------------------------------------------------------------------------------------

_CALL_RE = re.compile(r"(?P<indent>\s*)(?P<env>(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)bash\s+tools/build-custom-vllm\.sh")
_ENV_WHEEL_RE = re.compile(r"\$\{VLLM_PRECOMPILED_WHEEL_LOCATION:-")  # the patched script reads the env var


def _instruction_text(doc: Parsed, ins: Instruction) -> list[tuple[int, str]]:
    return [(n, doc.line(n)) for n in range(ins.start, ins.end + 1)]


_VLLM_ARGS = (
    "BUILD_CUSTOM_VLLM",
    "BUILD_CUSTOM_VLLM_URL",
    "BUILD_CUSTOM_VLLM_REF",
    "BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION",
)


def custom_vllm(doc: Parsed, inp: Inputs, blocks: Blocks) -> Change:
    name = "custom_vllm"
    if inp.uv_source:
        return _uv_source_vllm(name, doc, inp, blocks)
    run = _script_run(name, doc)
    stage = doc.stages[run.stage]
    args = {key: [i for i in doc.in_stage(stage) if _arg(i, key) is not None] for key in _VLLM_ARGS}
    if not args["BUILD_CUSTOM_VLLM"]:
        raise _fail(name, doc, f"`ARG BUILD_CUSTOM_VLLM` in the stage {stage.name} (it gates the vLLM build)")
    edits = [_wheel_mount(name, doc, inp, run)]
    values = {
        "BUILD_CUSTOM_VLLM_URL": inp.vllm_repo,
        "BUILD_CUSTOM_VLLM_REF": inp.vllm_commit,
        "BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION": inp.wheel_path,
    }
    run_text = "\n".join(line for _, line in _instruction_text(doc, run))
    if (
        args["BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION"]
        and "BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION" in run_text
    ):
        edits += _upstream_wheel_args(name, doc, args, values)
        how = "upstream's BUILD_CUSTOM_VLLM_URL/REF/PRECOMPILED_WHEEL_LOCATION build args"
    else:
        edits += _patched_script_call(name, doc, inp, blocks, run, args, values)
        how = "added build args and the env var the declared patch reads"
    return Change(name, f"RUN at line {run.start} mounts the wheel stage; vLLM {inp.vllm_commit} through {how}", edits)


def _synced_extras(doc: Parsed, ins: Instruction) -> set[str]:
    """The extras the RUN's `uv sync` commands name (comments aside), each sync read to its command's end as
    drop_extras reads it."""
    numbered = doc.body(ins) if is_heredoc(ins) else _instruction_text(doc, ins)
    found: set[str] = set()
    for _number, line in numbered:
        if line.lstrip().startswith("#"):
            continue
        for match in _SYNC_RE.finditer(line):
            start, stop = _segment(line, match.start())
            found.update(_EXTRA_RE.findall(line[start:stop]))
    return found


def _sync_run(name: str, doc: Parsed) -> Instruction:
    """The one RUN whose script runs `uv sync ... --extra vllm` (where uv builds vLLM from its git source)."""
    runs = [i for i in doc.instructions if i.cmd == "RUN" and "vllm" in _synced_extras(doc, i)]
    if len(runs) != 1:
        raise _fail(name, doc, "one RUN that runs `uv sync ... --extra vllm`", f"found {len(runs)}")
    return runs[0]


def _uv_source_vllm(name: str, doc: Parsed, inp: Inputs, blocks: Blocks) -> Change:
    """NeMo-RL builds vLLM with uv from its git source in precompiled mode: the sync RUN mounts the wheel stage and
    finds the checked wheel through VLLM_PRECOMPILED_WHEEL_LOCATION (vLLM's setup.py takes it before the commit's
    download); build-custom-vllm.sh stays off (no BUILD_CUSTOM_VLLM)."""
    run = _sync_run(name, doc)
    return Change(
        name,
        f"RUN at line {run.start} (uv sync --extra vllm) mounts the wheel stage; uv builds vLLM {inp.vllm_commit} from "
        "NeMo-RL's git source with that wheel",
        [Edit.insert_after(name, run.start - 1, blocks("uv_source_env")), _wheel_mount(name, doc, inp, run)],
    )


def _vllm_run(name: str, doc: Parsed, inp: Inputs) -> Instruction:
    """The RUN that installs vLLM: the one that runs build-custom-vllm.sh, or with a uv git source the sync's."""
    return _sync_run(name, doc) if inp.uv_source else _script_run(name, doc)


def _script_run(name: str, doc: Parsed) -> Instruction:
    """The one RUN instruction that calls the vLLM build script (comments do not count)."""

    def calls_script(ins: Instruction) -> bool:
        lines = _instruction_text(doc, ins)
        return any("build-custom-vllm.sh" in line and not line.lstrip().startswith("#") for _, line in lines)

    runs = [i for i in doc.instructions if i.cmd == "RUN" and calls_script(i)]
    if len(runs) != 1:
        raise _fail(name, doc, f"one RUN that calls {SCRIPT}", f"found {len(runs)}")
    return runs[0]


def _wheel_mount(name: str, doc: Parsed, inp: Inputs, run: Instruction) -> Edit:
    """The RUN's first line, given a mount of the wheel stage."""
    first = doc.line(run.start)
    if not first[:4].upper() == "RUN ":
        raise _fail(name, doc, f"`RUN ` at the start of line {run.start}", f"found {excerpt(first)}")
    mount = WHEEL_MOUNT.format(dir=inp.wheel_dir)
    return Edit.replace(name, run.start, run.start, [f"RUN {mount} {first[4:]}"])


def _upstream_wheel_args(
    name: str, doc: Parsed, args: dict[str, list[Instruction]], values: dict[str, str]
) -> list[Edit]:
    """Upstream's own build args (later NeMo-RL): give them the locked values as defaults; its call stays."""
    edits: list[Edit] = []
    for key, value in values.items():
        if not args[key]:
            raise _fail(name, doc, f"`ARG {key}` beside ARG BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION")
        edits += [Edit.replace(name, i.start, i.end, [f"ARG {key}={value}"]) for i in args[key]]
    return edits


def _patched_script_call(
    name: str,
    doc: Parsed,
    inp: Inputs,
    blocks: Blocks,
    run: Instruction,
    args: dict[str, list[Instruction]],
    values: dict[str, str],
) -> list[Edit]:
    """An upstream whose script takes no wheel location: the declared patch makes it read the env var, which the
    script's call line sets from build args added after ARG BUILD_CUSTOM_VLLM."""
    if inp.script_text is None or not _ENV_WHEEL_RE.search(inp.script_text):
        raise _fail(
            name,
            doc,
            "a way to pass the wheel: upstream has no ARG BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION, and the "
            f"prepared {SCRIPT} does not read VLLM_PRECOMPILED_WHEEL_LOCATION from the environment",
            "declare the patch that makes it (patches/build-custom-vllm-wheel-location.patch) in nemo_rl.patches",
        )
    calls = [(n, line) for n, line in doc.body(run) if _CALL_RE.match(line)]
    call = _CALL_RE.fullmatch(calls[0][1].rstrip()) if len(calls) == 1 else None
    if call is None:
        found = f"found {len(calls)}" if len(calls) != 1 else f"line {calls[0][0]} is {excerpt(calls[0][1])}"
        raise _fail(name, doc, f"one `bash {SCRIPT}` line without arguments in the RUN script", found)
    number = calls[0][0]
    last = max(i.end for i in args["BUILD_CUSTOM_VLLM"])
    return [
        Edit.insert_after(name, last, [*blocks("custom_vllm_args"), *(f"ARG {k}={v}" for k, v in values.items())]),
        Edit.replace(name, number, number, [call["indent"] + b for b in blocks("custom_vllm_call", call["env"])]),
    ]


def wheel_env(doc: Parsed, inp: Inputs, blocks: Blocks) -> Change:
    """`VLLM_PRECOMPILED_WHEEL_COMMIT` and `_LOCATION` in the image's environment, set after the vLLM build (so its
    RUN's inputs do not change): whatever builds vLLM again from the image (NeMo-RL's Ray workers, in isolated venvs)
    takes the locked wheel, not main's newest (NeMo-RL d437cdb2c set the commit for this reason)."""
    name = "wheel_env"
    run = _vllm_run(name, doc, inp)
    return Change(
        name,
        f"VLLM_PRECOMPILED_WHEEL_COMMIT and VLLM_PRECOMPILED_WHEEL_LOCATION set after the RUN at line {run.start}",
        [Edit.insert_after(name, run.end, blocks("wheel_env"))],
    )


def vllm_overlay(doc: Parsed, inp: Inputs, blocks: Blocks) -> Change:
    """The source's paths laid over the install of the wheel commit, last in the target stage, so that a moved PR
    head re-runs this and nothing before it (models/overlay.py says when and why)."""
    name = "vllm_overlay"
    layers = inp.layers
    if layers is None or not layers.has_overlay:
        return Change(name, f"no overlay: {layers.said() if layers else 'the source is the install'}")
    run = _script_run(name, doc)
    workdirs = [i for i in doc.instructions if i.cmd == "WORKDIR" and i.start < run.start]
    if not workdirs or not workdirs[-1].value or not workdirs[-1].value[0].startswith("/"):
        raise _fail(name, doc, f"an absolute WORKDIR before the RUN at line {run.start} (where {SCRIPT} clones vLLM)")
    checkout = f"{workdirs[-1].value[0].rstrip('/')}/{CHECKOUT}"
    source_stage, target = doc.stage_named("nemo-rl"), doc.stage_named(inp.target)
    if source_stage is None or target is None:
        raise _fail(name, doc, f"the stages nemo-rl and {inp.target}")
    # The target stage is renamed: the overlay's stage takes its name, FROM it (or FROM a pushed image of it).
    named = _STAGE_NAME_RE.fullmatch(doc.line(target.start))
    earlier = {s.name for s in doc.stages if s.index < target.index}
    if named is None or target.end == target.start or target.base.lower() not in earlier:
        raise _fail(name, doc, f"the stage {inp.target} as `FROM <an earlier stage> AS {inp.target}` on one line")
    installed = installed_stage(inp.target)
    return Change(
        name,
        f"{layers.said()}: stages vllm-source and vllm-overlay; the stage {inp.target} renamed {installed}, and a "
        f"stage {inp.target} FROM it that lays the overlay over {checkout}",
        [
            Edit.insert_after(name, source_stage.end, ["", *blocks("vllm_source_stages")]),
            Edit.replace(name, target.start, target.start, [f"{named.group('head')}{installed}{named.group('tail')}"]),
            Edit.insert_after(name, target.end, ["", *blocks("vllm_overlay", checkout, inp.target)]),
        ],
    )


_STAGE_NAME_RE = re.compile(r"(?P<head>\s*FROM\s+\S+\s+[Aa][Ss]\s+)(?P<name>[A-Za-z0-9_.-]+)(?P<tail>\s*)")


# --- dropped extras ------------------------------------------------------------------------------------------------

_SYNC_RE = re.compile(r"\buv\s+sync\b")
_SEGMENT_END_RE = re.compile(r"&&|\|\||;|\||\\\s*$")
_EXTRA_RE = re.compile(r"--extra(?:=|\s+)([A-Za-z0-9_.-]+)")


def _groups(numbered: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """Shell commands as groups of physical lines joined by a trailing backslash; comments and blanks alone."""
    groups: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    for number, line in numbered:
        current.append((number, line))
        if current[0][1].lstrip().startswith("#") or not line.rstrip().endswith("\\"):
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def _segment(line: str, start: int) -> tuple[int, int]:
    """The span of the uv sync command starting at `start` on one physical line."""
    end = _SEGMENT_END_RE.search(line, start)
    stop = end.start() if end else len(line)
    while stop > start and line[stop - 1].isspace():
        stop -= 1
    return start, stop


def _needs_placeholder(numbered: list[tuple[int, str]], group: list[tuple[int, str]]) -> bool:
    """Whether commenting the group out would leave an empty `then`/`else`/`do` block (a bash syntax error)."""
    numbers = [n for n, _ in numbered]
    at, after = numbers.index(group[0][0]), numbers.index(group[-1][0])
    before = next((ln for _, ln in reversed(numbered[:at]) if ln.strip() and not ln.lstrip().startswith("#")), "")
    following = next((ln for _, ln in numbered[after + 1 :] if ln.strip() and not ln.lstrip().startswith("#")), "")
    opens = re.search(r"(\bthen|\belse|\bdo|\{)\s*$", before.strip()) is not None
    closes = re.match(r"(fi|else|elif|done|\})\b", following.strip()) is not None
    return opens and closes


def drop_extras(doc: Parsed, inp: Inputs, blocks: Blocks) -> Change:
    name = "drop_extras"
    if not inp.drop_extras:
        return Change(name, "no extras dropped (build.drop_extras is empty)")
    edits: list[Edit] = []
    hits: dict[str, list[str]] = {extra: [] for extra in inp.drop_extras}  # extra -> where and how it was dropped
    synced: set[str] = set()
    for ins in doc.instructions:
        if ins.cmd != "RUN":
            continue
        heredoc = is_heredoc(ins)
        numbered = doc.body(ins) if heredoc else _instruction_text(doc, ins)
        for group in _groups(numbered):
            if group[0][1].lstrip().startswith("#"):
                continue
            for number, line in group:
                for match in _SYNC_RE.finditer(line):
                    start, stop = _segment(line, match.start())
                    extras = _EXTRA_RE.findall(line[start:stop])
                    synced.update(extras)
                    dropped = [e for e in extras if e in inp.drop_extras]
                    all_extras = "--all-extras" in line[start:stop]
                    if all_extras:
                        dropped = [e for e in inp.drop_extras if e not in extras]
                    if not dropped:
                        continue
                    reasons = [inp.drop_extras[e] for e in dropped]
                    made, how = _drop(
                        name,
                        numbered,
                        group,
                        number,
                        line,
                        (start, stop),
                        dropped,
                        all_extras,
                        extras,
                        heredoc,
                        reasons,
                        blocks,
                    )
                    edits += made
                    for extra in dropped:
                        hits[extra].append(f"line {number} ({excerpt(line[start:stop].strip(), 120)}): {how}")
    missing = [extra for extra, lines in hits.items() if not lines]
    if missing:
        raise _fail(
            name,
            doc,
            "a `uv sync ... --extra " + "`/`--extra ".join(missing) + "` in a RUN",
            f"found none (upstream syncs: {', '.join(sorted(synced)) or 'no extras'})",
        )
    summary = "; ".join(f"{extra} at {', '.join(places)}" for extra, places in hits.items())
    return Change(name, f"dropped {summary}", _merge(edits))


def _drop(name, numbered, group, number, line, span, dropped, all_extras, extras, heredoc, reasons, blocks):
    """The edits that drop `dropped` from the sync at `span` of `line`, and how (for the record)."""
    start, stop = span
    segment = line[start:stop]
    if all_extras:
        # `uv sync --all-extras`: keep it, leaving the dropped ones out.
        kept = segment.replace("--all-extras", "--all-extras " + " ".join(f"--no-extra {e}" for e in dropped), 1)
        return [Edit.replace(name, number, number, [line[:start] + kept + line[stop:]])], "excluded with --no-extra"
    if len(dropped) < len(extras):
        # A multi-extra sync: take the dropped extras out, keep the others.
        kept = segment
        for extra in dropped:
            kept = re.sub(rf"\s*--extra(?:=|\s+){re.escape(extra)}(?![A-Za-z0-9_.-])", "", kept)
        return [Edit.replace(name, number, number, [line[:start] + kept + line[stop:]])], "taken out of the sync"
    joined = " ".join(text.rstrip().removesuffix("\\") for _, text in group)
    alone = not re.search(r"&&|\|\||;", joined)
    indent = group[0][1][: len(group[0][1]) - len(group[0][1].lstrip())]
    if heredoc and alone:
        # The whole command (with its pipes and continuation lines) is the sync: comment it out, with the reason.
        new = [indent + b for reason in reasons for b in blocks("dropped_extra", reason)]
        new += [f"{indent}# {text.lstrip()}" for _, text in group]
        if _needs_placeholder(numbered, group):
            new.append(f"{indent}true")
        return [Edit.replace(name, group[0][0], group[-1][0], new)], "commented out"
    # One command of several (or a RUN without a heredoc): the sync becomes `true`, the reason goes above the RUN
    # script line where a comment can stand.
    replaced = line[:start] + "true" + line[stop:]
    if heredoc:
        return [
            Edit.replace(
                name, number, number, [*(indent + b for r in reasons for b in blocks("dropped_extra", r)), replaced]
            )
        ], "replaced by `true`"
    return [Edit.replace(name, number, number, [replaced])], "replaced by `true`"


def _merge(edits: list[Edit]) -> list[Edit]:
    """Two rewrites of one line (two syncs of dropped extras in one command) are refused, never half made."""
    taken: set[int] = set()
    for edit in edits:
        lines = set(range(edit.start, edit.end + 1))
        if lines & taken:
            raise TransformationFailed(
                f"transformation drop_extras: line {min(lines & taken)} holds several syncs of dropped extras, "
                "which it cannot rewrite in one step",
                hint="report the upstream shape; until then, drop fewer extras",
            )
        taken |= lines
    return edits


def _lines(instructions: list[Instruction]) -> str:
    return ", ".join(str(i.start) for i in sorted(instructions, key=lambda i: i.start))


TRANSFORMATIONS = (
    syntax_directive,
    base_image_by_digest,
    nemo_rl_source_ref,
    wheel_stage,
    source_date_epoch,
    apt_log_cleanup,
    torch_cuda_arch_list,
    custom_vllm,
    wheel_env,
    drop_extras,
    nemo_rl_commit,
    vllm_overlay,
    labels,
)


def transform(doc: Parsed, inp: Inputs, blocks: Blocks) -> list[Change]:
    """Every transformation in order; each raises TransformationFailed when its target is not there."""
    return [t(doc, inp, blocks) for t in TRANSFORMATIONS]


def read_script(tree: Path) -> str | None:
    """tools/build-custom-vllm.sh as prepare left it; None when it is missing, not a plain file, or not text."""
    path = tree / SCRIPT
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_SCRIPT:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
