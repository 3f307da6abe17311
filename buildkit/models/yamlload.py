"""Safe YAML loading for files that come with a repository (pins.yaml, a report's results): `load_yaml`.

YAML can do more than these files need, and some of it is a weapon: an alias is a copy of its anchor's value,
so ten nested anchors of ten aliases each expand a few hundred bytes into 10^10 values (billion laughs). So,
before anything is constructed, `load_yaml` refuses anchors and aliases, documents nested deeper than
MAX_DEPTH or holding more than MAX_NODES values, and texts larger than MAX_BYTES; while constructing, it refuses
duplicate keys (YAML keeps the last one silently) and keys that are not plain values, and turns values YAML
cannot build (an integer of 5,000 digits, a date like 2024-99-99) into input errors instead of crashes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from buildkit.errors import InputError, excerpt

MAX_BYTES = 1 << 20  # pins.yaml is a few KiB
MAX_DEPTH = 32  # pins.yaml nests 4 levels
MAX_NODES = 100_000  # pins.yaml holds about 100 values; results files a value per metric and step

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that these files may not use."""


# The type checker reads the mixin below as the loader it is always mixed into.
if TYPE_CHECKING:
    _Loader = yaml.BaseLoader
else:
    _Loader = object


class _Guarded(_Loader):
    """Mixin for a PyYAML loader (pure Python, so these hooks run): the checks described above."""

    def __init__(self, stream: str, max_depth: int, max_nodes: int) -> None:
        super().__init__(stream)
        self._max_depth, self._max_nodes = max_depth, max_nodes
        self._depth = self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(
                None,
                None,
                f"YAML aliases (*{(event.anchor or '')[:40]}) are not allowed: write the value out",
                # The pure-Python loader's marks are yaml.error.Mark; the stubs add libyaml's, never seen here.
                event.start_mark,  # type: ignore[arg-type]
            )
        if event.anchor is not None:
            raise _Refused(
                None,
                None,
                f"YAML anchors (&{event.anchor[:40]}) are not allowed: write each value out",
                event.start_mark,
            )
        self._nodes += 1
        if self._nodes > self._max_nodes:
            raise _Refused(None, None, f"more than {self._max_nodes:,} values in one file", event.start_mark)
        self._depth += 1
        try:
            if self._depth > self._max_depth:
                raise _Refused(None, None, f"nested deeper than {self._max_depth} levels", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:  # e.g. int() of 5,000 digits, a date with month 99
            raise _Refused(None, None, f"cannot read this value: {excerpt(str(exc))}", node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Refused(None, None, "a key must be a plain value, not a list or mapping", key_node.start_mark)
            if key_node.tag == _MERGE_TAG:
                raise _Refused(None, None, "merge keys (<<) are not allowed", key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _Refused(None, None, f"duplicate key {excerpt(key)}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _TypedLoader(_Guarded, yaml.SafeLoader):
    """Plain YAML types: numbers, booleans, null, dates."""


class _StringLoader(_Guarded, yaml.BaseLoader):
    """Every scalar stays the string it was written as."""


def load_yaml(
    text: str,
    path: object,
    *,
    keep_strings: bool = False,
    max_bytes: int = MAX_BYTES,
    max_depth: int = MAX_DEPTH,
    max_nodes: int = MAX_NODES,
) -> tuple[Any, yaml.Node | None]:
    """The data of one YAML document and its node tree (for line numbers), or InputError naming `path`:line.

    keep_strings: scalars stay as written ("1.50" is not 1.5), as yaml.BaseLoader does. An empty document gives
    (None, None).
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InputError(f"{path}: larger than {max_bytes:,} bytes ({size:,}); this file is never that big")
    loader = (_StringLoader if keep_strings else _TypedLoader)(text, max_depth, max_nodes)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or excerpt(str(exc))
        raise InputError(
            f"{where}: {problem}" if isinstance(exc, _Refused) else f"{where}: not valid YAML: {problem}"
        ) from None
    finally:
        loader.dispose()
    return data, root
