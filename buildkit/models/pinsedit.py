"""Edits to pins.yaml that keep everything a person wrote: comments, order, quoting, blank lines and layout.

ruamel.yaml's round-trip composer gives every key and value with its exact place in the text, and each edit
replaces only the characters of the value it changes (or the lines of the entry or list item it removes). Every
other byte stays as it was. (Dumping ruamel's round-trip data instead moves a comment's column when the value
before it grows, and drops the blank line after a removed last entry: not the diff a reviewer should read.) The
result is read back with ruamel.yaml and must hold exactly the intended data, so a splice that went wrong is an
error, never a quietly different file.

Only text that already passed the guarded loader (buildkit/models/pins.py, buildkit/models/yamlload.py) comes
here: anchors, aliases and oversized files are refused before ruamel.yaml sees them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from buildkit.errors import InputError
from buildkit.models.grammar import FULL_SHA_RE


@dataclass(frozen=True)
class _Splice:
    start: int
    end: int
    new: str


def _yaml() -> YAML:
    return YAML(typ="rt", pure=True)


def _plain(value: Any) -> Any:
    """ruamel's round-trip types as plain dicts, lists and scalars, to compare data."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    return value


class PinsEditor:
    """Collects edits of one pins.yaml text; `text()` applies them and checks the result."""

    def __init__(self, text: str, name: str):
        self.original = text
        self.name = name
        try:
            self.root = _yaml().compose(text)
            self.expected = _plain(_yaml().load(text))
        except YAMLError as exc:
            raise InputError(f"{name}: ruamel.yaml cannot read it for editing: {exc}") from None
        if not isinstance(self.root, MappingNode):
            raise InputError(f"{name}: expected a mapping of keys at the top")
        self.splices: list[_Splice] = []

    # -- finding nodes -------------------------------------------------------------------------------------------

    def _entry(self, path: tuple[str, ...]) -> tuple[ScalarNode, Node] | None:
        node: Node = self.root
        found = None
        for key in path:
            if not isinstance(node, MappingNode):
                return None
            found = next(((k, v) for k, v in node.value if isinstance(k, ScalarNode) and k.value == key), None)
            if found is None:
                return None
            node = found[1]
        return found

    def _block_entry(self, path: tuple[str, ...]) -> tuple[ScalarNode, Node]:
        found = self._entry(path)
        if found is None:
            raise InputError(f"{self.name}: {'.'.join(path)} is not there to edit")
        key, value = found
        if not self._starts_line(key.start_mark.index):
            raise self._cannot(path, "it is not a key on a line of its own (flow style?)")
        return key, value

    def _starts_line(self, index: int) -> bool:
        line_start = self.original.rfind("\n", 0, index) + 1
        return not self.original[line_start:index].strip()

    def _cannot(self, path: tuple[str, ...], why: str) -> InputError:
        return InputError(
            f"{self.name}: cannot edit {'.'.join(path)} in place: {why}",
            hint="write that part of pins.yaml in block style (one `key: value` a line), or edit it by hand",
        )

    def _line_start(self, index: int) -> int:
        return self.original.rfind("\n", 0, index) + 1

    def _content_line_end(self, node: Node) -> int:
        """The end of the last line holding the node's content, its line break included (a block scalar's span
        runs on over the blank lines after it, which belong to what follows)."""
        end = node.end_mark.index
        while end > node.start_mark.index and self.original[end - 1] in " \t\r\n":
            end -= 1
        newline = self.original.find("\n", end)
        return len(self.original) if newline < 0 else newline + 1

    def line_of(self, path: tuple[str, ...]) -> int | None:
        """1-based line of a key, for messages."""
        found = self._entry(path)
        return found[0].start_mark.line + 1 if found else None

    # -- edits -------------------------------------------------------------------------------------------------

    def set_commit(self, path: tuple[str, ...], sha: str) -> None:
        """The value at path becomes the full commit SHA, quoted (unquoted hex can read as a number in YAML): in
        single quotes where it was, else double. The key must be there."""
        if not FULL_SHA_RE.fullmatch(sha):
            raise ValueError(f"not a full SHA: {sha!r}")
        key, value = self._block_entry(path)
        if not isinstance(value, ScalarNode) or value.style in ("|", ">"):
            raise self._cannot(path, "its value is not a one-line scalar")
        quote = "'" if value.style == "'" else '"'
        self.splices.append(_Splice(value.start_mark.index, value.end_mark.index, f"{quote}{sha}{quote}"))
        self._expect(path, sha)

    def set_text(self, path: tuple[str, ...], text: str) -> None:
        """The one-line value at path becomes `text`, double-quoted as JSON writes it (a YAML double-quoted scalar:
        no character of it can read as YAML syntax). The key must be there."""
        key, value = self._block_entry(path)
        if not isinstance(value, ScalarNode) or value.style in ("|", ">"):
            raise self._cannot(path, "its value is not a one-line scalar")
        self.splices.append(_Splice(value.start_mark.index, value.end_mark.index, json.dumps(text)))
        self._expect(path, text)

    def replace_entry(self, path: tuple[str, ...], new_key: str, sha: str) -> None:
        """The entry at path (`pr: 24322`) becomes `new_key: "<sha>"` in its place, comments around it kept."""
        key, value = self._block_entry(path)
        if not isinstance(value, ScalarNode) or value.style in ("|", ">"):
            raise self._cannot(path, "its value is not a one-line scalar")
        self.splices.append(_Splice(key.start_mark.index, value.end_mark.index, f'{new_key}: "{sha}"'))
        parent = self._expected_at(path[:-1])
        # Same place in the mapping's order: rebuild it with the key renamed.
        items = [(new_key, sha) if k == path[-1] else (k, v) for k, v in parent.items()]
        parent.clear()
        parent.update(items)

    def delete_entry(self, path: tuple[str, ...]) -> None:
        """The entry's lines go (a comment on its last line with them); comments above it stay."""
        key, value = self._block_entry(path)
        self.splices.append(_Splice(self._line_start(key.start_mark.index), self._content_line_end(value), ""))
        del self._expected_at(path[:-1])[path[-1]]

    def remove_items(self, path: tuple[str, ...], indexes: set[int]) -> None:
        """Items of the list at path go; a list left empty becomes `[]` after its key."""
        if not indexes:
            return
        key, seq = self._block_entry(path)
        if not isinstance(seq, SequenceNode):
            raise self._cannot(path, "it is not a list")
        if seq.flow_style:
            raise self._cannot(path, "it is a flow-style list ([...])")
        items = seq.value
        starts = []
        for item in items:
            dash = self.original.rfind("-", self._line_start(item.start_mark.index), item.start_mark.index)
            if dash < 0 or not self._starts_line(dash):
                raise self._cannot(path, "an item does not start its line with `- `")
            starts.append(self._line_start(dash))
        for index in sorted(indexes):
            end = starts[index + 1] if index + 1 < len(items) else self._content_line_end(items[index])
            self.splices.append(_Splice(starts[index], end, ""))
        if len(indexes) == len(items):
            # `patches:` and nothing under it would read as null: say "none" as the schema wants it.
            colon = self.original.find(":", key.end_mark.index)
            self.splices.append(_Splice(colon + 1, colon + 1, " []"))
        kept = [item for i, item in enumerate(self._expected_at(path)) if i not in indexes]
        self._expected_at(path[:-1])[path[-1]] = kept

    def _expected_at(self, path: tuple[str, ...]) -> Any:
        node = self.expected
        for key in path:
            node = node[key]
        return node

    def _expect(self, path: tuple[str, ...], value: Any) -> None:
        self._expected_at(path[:-1])[path[-1]] = value

    # -- the result --------------------------------------------------------------------------------------------

    def text(self) -> str:
        ordered = sorted(self.splices, key=lambda s: (s.start, s.end))
        for first, second in zip(ordered, ordered[1:], strict=False):
            if second.start < first.end:
                raise AssertionError(f"overlapping edits of {self.name}: {first} and {second}")
        out, position = [], 0
        for splice in ordered:
            out.append(self.original[position : splice.start])
            out.append(splice.new)
            position = splice.end
        out.append(self.original[position:])
        text = "".join(out)
        try:
            got = _plain(_yaml().load(text))
        except YAMLError as exc:
            raise AssertionError(f"the edited {self.name} is not YAML any more: {exc}") from None
        if got != self.expected:
            raise AssertionError(f"the edited {self.name} does not hold the intended values")
        return text
