"""What the rendered target still fetches as it is on build day: found in its Dockerfile, not typed in per commit.

The lock pins the base image by digest, the tree by commit and the wheel by sha256; a RUN can still reach out:
`apt-get install` without versions, a `curl ... | sh` installer, a download no checksum guards, `git fetch`,
`pip install` without hashes, `uv lock` or `uv run` that may re-resolve, `uv python install`. Each is found in the
RUN scripts of the stages the target is built from (tools/build-custom-vllm.sh too, where a RUN calls it) and named
with its line, so the report's list follows upstream at the locked commit. A heuristic by nature: it lists what it
recognises, and says so in the report.
"""

from __future__ import annotations

import re
import shlex

from buildkit.dockerfile.text import Instruction, Parsed, is_heredoc
from buildkit.dockerfile.transforms import SCRIPT
from buildkit.errors import excerpt

_URL_RE = re.compile(r"(?:https?|ftp)://[^\s\"'|;&<>()]+")
_CHECKED_RE = re.compile(r"\b(?:sha(?:1|224|256|384|512)sum|gpg\s+--verify|cosign\s+verify)\b")
_SPLIT_RE = re.compile(r"&&|\|\||;|\n")
_FROM_FLAG_RE = re.compile(r"(?:^|,)from=([^,]+)")
_SHA_REF_RE = re.compile(r"#[0-9a-f]{40}(?::.*)?")  # fullmatch: a git URL's fragment naming a full commit


def _stages_of(doc: Parsed, target: str) -> set[int]:
    """The stages the target is built from: itself, its FROM chain, and every stage it copies or mounts from."""
    by_name = {s.name: s.index for s in doc.stages if s.name}
    start = by_name.get(target.lower())
    if start is None:
        return set()
    seen: set[int] = set()
    todo = [start]
    while todo:
        index = todo.pop()
        if index in seen:
            continue
        seen.add(index)
        stage = doc.stages[index]
        refs = [stage.base.lower()]
        for ins in doc.in_stage(stage):
            for flag in ins.flags:
                if flag.startswith("--from="):
                    refs.append(flag.removeprefix("--from=").lower())
                elif flag.startswith("--mount="):
                    refs += [m.lower() for m in _FROM_FLAG_RE.findall(flag.removeprefix("--mount="))]
        todo += [by_name[ref] for ref in refs if ref in by_name]
        todo += [int(ref) for ref in refs if ref.isdigit() and int(ref) < len(doc.stages)]
    return seen


def _script_lines(doc: Parsed, ins: Instruction) -> list[tuple[int, str]]:
    """The RUN's shell text as logical lines (continuations joined, comments dropped), each with its first line."""
    if is_heredoc(ins):
        physical = doc.body(ins)
    else:
        physical = [(n, doc.line(n)) for n in range(ins.start, ins.end + 1)]
        first = physical[0][1]
        cut = re.match(r"\s*RUN\s+(?:--\S+\s+)*", first, re.IGNORECASE)
        physical[0] = (physical[0][0], first[cut.end() :] if cut else first)
    return _logical(physical)


def _logical(physical: list[tuple[int, str]]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, text in physical:
        if not text.strip() and pending:  # bash ends a continued command at an empty line
            out.append(pending)
            pending = None
        if text.lstrip().startswith("#") or not text.strip():
            continue
        joined = (pending[0], pending[1] + " " + text.strip()) if pending else (number, text.strip())
        if joined[1].endswith("\\"):
            pending = (joined[0], joined[1][:-1].rstrip())
        else:
            out.append(joined)
            pending = None
    if pending:
        out.append(pending)
    return out


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:
        return command.split()


def _apt_packages(words: list[str]) -> list[str]:
    if "install" not in words or not ({"apt-get", "apt"} & set(words)):
        return []
    after = words[words.index("install") + 1 :]
    return [w for w in after if not w.startswith("-") and "=" not in w and not w.startswith("$")]


def findings(lines: list[tuple[int, str]], where: str, args: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """(line, finding) for every build-day fetch recognised in shell lines; `where` names the file they are in, and
    `args` the Dockerfile ARG defaults in scope (shown in URLs in place of their ${NAME})."""
    found: list[tuple[int, str]] = []
    lines = [(number, _expand(text, args or {})) for number, text in lines]
    checked = any(_CHECKED_RE.search(text) for _, text in lines)
    packages: list[str] = []
    apt_line = 0
    for number, text in lines:
        at = f"{where} line {number}"
        for command in _SPLIT_RE.split(text):
            piped = [part.strip() for part in command.split("|")]
            words = _words(piped[0])
            if not words:
                continue
            tool = next((w for w in words if "=" not in w), "")  # past leading VAR=value assignments
            rest = words[words.index(tool) + 1 :] if tool else []
            urls = _URL_RE.findall(piped[0])
            if installed := _apt_packages(words):
                packages += installed
                apt_line = apt_line or number
            if "--fetch-keys" in words:
                plain = " over plain HTTP" if any(u.startswith("http://") for u in urls) else ""
                found.append((number, f"a package signing key fetched{plain} from {_urls(urls)} ({at})"))
            elif tool in ("curl", "wget") and urls:
                if any(re.fullmatch(r"(?:ba|z)?sh", (_words(p) or [""])[0]) for p in piped[1:]):
                    found.append((number, f"an installer script from {_urls(urls)} run by a shell, unchecked ({at})"))
                elif not checked:
                    found.append((number, f"{_urls(urls)} downloaded with no checksum check ({at})"))
            elif tool == "git" and rest[:1] in (["clone"], ["fetch"], ["pull"]):
                what = f"git {rest[0]}" + (" --unshallow" if "--unshallow" in rest else "")
                source = f" from {_urls(urls)}" if urls else " from the clone's remote"
                found.append((number, f"`{what}`{source} on build day, not a build input BuildKit sees ({at})"))
            elif tool == "uv" and rest[:2] == ["python", "install"]:
                found.append((number, f"Python from `uv python install`, by version, no checksum ({at})"))
            elif (tool in ("pip", "pip3") and rest[:1] == ["install"]) or (
                tool == "uv" and rest[:2] == ["pip", "install"]
            ):
                if "--require-hashes" not in rest:
                    found.append(
                        (
                            number,
                            f"Python packages from `{excerpt(' '.join(words), 100)[1:-1]}`, by "
                            f"version, no hashes ({at})",
                        )
                    )
            elif tool == "uv" and rest[:1] == ["lock"] and "--check" not in rest and "--locked" not in rest:
                found.append((number, f"`uv lock` re-resolves Python packages on build day ({at})"))
            elif tool == "uv" and rest[:1] in (["sync"], ["run"]) and not {"--locked", "--frozen"} & set(rest):
                found.append((number, f"`uv {rest[0]}` without --locked or --frozen may re-resolve uv.lock ({at})"))
    if packages:
        shown = ", ".join(dict.fromkeys(packages))
        found.append(
            (
                apt_line,
                f"apt packages ({excerpt(shown, 160)[1:-1]}) at whatever versions `apt-get update` "
                f"finds ({where} line {apt_line})",
            )
        )
    return found


def _urls(urls: list[str]) -> str:
    return ", ".join(f"`{excerpt(u, 120)[1:-1]}`" for u in dict.fromkeys(urls))


def _args_before(doc: Parsed, ins: Instruction) -> dict[str, str]:
    """ARG defaults in scope at `ins`: the global ones, then its stage's (later ones win)."""
    values: dict[str, str] = {}
    for other in doc.instructions:
        if other.start >= ins.start:
            break
        if other.cmd == "ARG" and other.stage in (-1, ins.stage):
            for item in other.value:
                name, sep, default = item.partition("=")
                if sep:
                    values[name] = default
    return values


def _expand(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m[1] or m[2], m[0]), text)


def _runs_script(text: str) -> bool:
    """Whether a shell line runs tools/build-custom-vllm.sh (`bash tools/...`, `./tools/...`, `source ...`), not
    only names it: the smoke target checksums the file (`sha256sum -c`) and never runs what it fetches."""
    for command in _SPLIT_RE.split(text):
        words = [w for w in _words(command.split("|")[0]) if "=" not in w or w.startswith("-")]
        if words and words[0] in ("bash", "sh", "source", "."):
            words = [w for w in words[1:] if not w.startswith("-")]
        if words and words[0].removeprefix("./").endswith(SCRIPT):
            return True
    return False


def unpinned_inputs(doc: Parsed, target: str, script_text: str | None) -> list[str]:
    """What the rendered target fetches unpinned, in Dockerfile order; tools/build-custom-vllm.sh's findings follow
    the RUN that calls it."""
    out: list[tuple[int, int, str]] = []
    stages = _stages_of(doc, target)
    for ins in doc.instructions:
        if ins.stage not in stages:
            continue
        if ins.cmd == "ADD" and not any(f.startswith("--checksum=") for f in ins.flags):
            for source in ins.value[:-1]:
                source = _expand(source, _args_before(doc, ins))
                fragment = source.partition("#")[2]
                if _URL_RE.match(source) and not _SHA_REF_RE.fullmatch(f"#{fragment}"):
                    out.append(
                        (
                            ins.start,
                            0,
                            f"`ADD {excerpt(source, 120)[1:-1]}` with no checksum or commit "
                            f"(Dockerfile line {ins.start})",
                        )
                    )
        if ins.cmd != "RUN":
            continue
        lines = _script_lines(doc, ins)
        out += [(number, 0, text) for number, text in findings(lines, "Dockerfile", _args_before(doc, ins))]
        if script_text is not None and any(_runs_script(text) for _, text in lines):
            script = _logical(list(enumerate(script_text.split("\n"), start=1)))
            where = f"{SCRIPT} (run at Dockerfile line {ins.start})"
            out += [(ins.start, 1 + n, text) for n, text in findings(script, where)]
    return [text for _, _, text in sorted(out, key=lambda item: (item[0], item[1]))]
