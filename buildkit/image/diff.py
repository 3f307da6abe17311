"""Compare two OCI images, as diffoci does: are they identical and, if not, exactly what differs.

`build --check-reproducible` builds the same image twice (`--output type=oci,...,rewrite-timestamp=true`) and asks
this module about the two layouts. Identical means the same image manifest digest for the platform (which pins the
config and every layer); attestations beside the image (provenance, SBOM) carry times and are not part of it.
Otherwise the result names the manifest and config fields that differ, the layers whose digests differ, and, for the
first of them (or all, on request), the files: added, removed, or changed in which of their tar fields.

The result is data for the build record (JSON; its models are in buildkit/models/comparison.py). Every string in it
that came from an image is untrusted text; `summary` strips control characters before anything reaches a terminal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from buildkit.image.ocilayout import Image, Layer, OciLayout, TarEntry, display, resolve_image
from buildkit.models.comparison import (
    Change,
    FieldDifference,
    FileDifference,
    FileEntry,
    ImageComparison,
    LayerDifference,
)
from buildkit.text.sanitize import strip_controls

MAX_FILES = 200  # file differences listed in the result; the rest are counted
SUMMARY_FILES = 20
SUMMARY_FIELDS = 10

FILE_FIELDS = ("type", "size", "mode", "mtime", "uid", "gid", "uname", "gname", "linkname", "content", "pax")


def compare(
    a: Path | str,
    b: Path | str,
    platform: str = "linux/amd64",
    *,
    all_layers: bool = False,
    max_files: int = MAX_FILES,
) -> ImageComparison:
    """Compare the `platform` images of two OCI layouts (tar files or directories). Files are compared in the
    first differing layer, or in every differing layer with `all_layers`; at most `max_files` file differences
    are listed and the rest counted. Raises InputError for a layout that is missing, damaged or unsupported."""
    with OciLayout(a) as layout_a, OciLayout(b) as layout_b:
        image_a = resolve_image(layout_a, platform)
        image_b = resolve_image(layout_b, platform)
        result = ImageComparison(
            identical=image_a.manifest_descriptor.digest == image_b.manifest_descriptor.digest,
            platform=platform,
            manifest_digest_a=image_a.manifest_descriptor.digest,
            manifest_digest_b=image_b.manifest_descriptor.digest,
            config_digest_a=image_a.config_descriptor.digest,
            config_digest_b=image_b.config_descriptor.digest,
            layers_a=len(image_a.layers),
            layers_b=len(image_b.layers),
        )
        if result.identical:
            return result
        result.manifest_differences = [d for d in diff_json(image_a.manifest, image_b.manifest) if not _covered(d)]
        if result.config_digest_a != result.config_digest_b:
            result.config_differences = diff_json(image_a.config, image_b.config)
        result.layers = _differing_layers(image_a, image_b)
        if result.layers:
            result.first_differing_layer = result.layers[0].index
        budget = max_files
        for layer in result.layers if all_layers else result.layers[:1]:
            listed, more = _compare_layer(layout_a, image_a, layout_b, image_b, layer, budget)
            result.files.extend(listed)
            result.files_truncated += more
            budget -= len(listed)
        return result


def _covered(difference: FieldDifference) -> bool:
    # The config's and layers' digests and sizes are reported as config_digest_* and `layers`.
    return re.fullmatch(r"(config|layers\.\d+)\.(digest|size)", difference.path) is not None


def diff_json(a: JsonValue, b: JsonValue, path: str = "") -> list[FieldDifference]:
    """Every leaf where two JSON documents differ, in document order. Lists are compared by position: history
    entries and diff_ids are ordered, and an inserted entry shows as its own change plus a length change."""
    if isinstance(a, dict) and isinstance(b, dict):
        found: list[FieldDifference] = []
        for key in [*a, *(k for k in b if k not in a)]:
            where = _join(path, key)
            if key not in b:
                found.append(FieldDifference(path=where, change="removed", a=a[key]))
            elif key not in a:
                found.append(FieldDifference(path=where, change="added", b=b[key]))
            else:
                found.extend(diff_json(a[key], b[key], where))
        return found
    if isinstance(a, list) and isinstance(b, list):
        found = []
        for i in range(max(len(a), len(b))):
            where = _join(path, i)
            if i >= len(b):
                found.append(FieldDifference(path=where, change="removed", a=a[i]))
            elif i >= len(a):
                found.append(FieldDifference(path=where, change="added", b=b[i]))
            else:
                found.extend(diff_json(a[i], b[i], where))
        return found
    # The type too: JSON's 1, 1.0 and true are different values, though Python's == says otherwise.
    if type(a) is not type(b) or a != b:
        return [FieldDifference(path=path or "(document)", change="changed", a=a, b=b)]
    return []


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int) or re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return f"{path}.{key}" if path else str(key)
    return f"{path}[{json.dumps(key)}]"


def _layer_commands(config: dict[str, Any], layers: int) -> list[str | None] | None:
    """The history command that made each layer: history entries with `empty_layer` made none. None when the
    history does not account for exactly the layers there are (then it cannot be matched to them)."""
    history = config.get("history")
    if not isinstance(history, list):
        return None
    commands = [
        entry.get("created_by") if isinstance(entry.get("created_by"), str) else None
        for entry in history
        if isinstance(entry, dict) and not entry.get("empty_layer")
    ]
    return commands if len(commands) == layers else None


def _differing_layers(image_a: Image, image_b: Image) -> list[LayerDifference]:
    commands_a = _layer_commands(image_a.config, len(image_a.layers)) or []
    commands_b = _layer_commands(image_b.config, len(image_b.layers)) or []
    found = []
    for i in range(max(len(image_a.layers), len(image_b.layers))):
        da = image_a.layers[i] if i < len(image_a.layers) else None
        db = image_b.layers[i] if i < len(image_b.layers) else None
        if da is not None and db is not None and (da.digest, da.media_type) == (db.digest, db.media_type):
            continue
        created_by = (commands_a[i] if i < len(commands_a) else None) or (
            commands_b[i] if i < len(commands_b) else None
        )
        found.append(
            LayerDifference(
                index=i,
                digest_a=da.digest if da else None,
                digest_b=db.digest if db else None,
                media_type_a=da.media_type if da else None,
                media_type_b=db.media_type if db else None,
                diff_id_a=image_a.diff_id(i) if da else None,
                diff_id_b=image_b.diff_id(i) if db else None,
                created_by=created_by,
                compared=False,
            )
        )
    return found


def _read(layout: OciLayout, image: Image, index: int) -> Layer:
    if index >= len(image.layers):
        return Layer([], "")  # the other image has a layer here and this one has none: compare with nothing
    # Counted from 1 in messages, as in `summary`.
    return layout.read_layer(image.layers[index], image.diff_id(index), f"layer {index + 1} of {len(image.layers)}")


def _compare_layer(
    layout_a: OciLayout, image_a: Image, layout_b: OciLayout, image_b: Image, layer: LayerDifference, budget: int
) -> tuple[list[FileDifference], int]:
    """The file differences of one layer: at most `budget` listed, and how many more there are."""
    # One after the other: reading both in threads was no faster (the tar parsing holds the GIL), and a Ctrl-C
    # would have waited for the threads to finish a layer of GBs.
    read_a, read_b = _read(layout_a, image_a, layer.index), _read(layout_b, image_b, layer.index)
    files_a = {entry.name: entry for entry in read_a.entries}  # a name twice: the later entry wins, as on disk
    files_b = {entry.name: entry for entry in read_b.entries}
    found = list(_file_differences(files_a, files_b))
    layer.compared = True
    layer.file_differences = len(found)
    if not found:
        layer.note = _why_no_file_differs(read_a, read_b)
    listed = [
        FileDifference(
            layer=layer.index,
            path="/" + display(name),
            change=change,
            a=_file_entry(files_a.get(name)),
            b=_file_entry(files_b.get(name)),
            fields=fields,
        )
        for name, change, fields in found[: max(budget, 0)]
    ]
    return listed, len(found) - len(listed)


def _file_differences(
    files_a: dict[str, TarEntry], files_b: dict[str, TarEntry]
) -> Iterable[tuple[str, Change, list[str]]]:
    for name in sorted(files_a.keys() | files_b.keys()):
        ea, eb = files_a.get(name), files_b.get(name)
        if eb is None:
            yield name, "removed", []
        elif ea is None:
            yield name, "added", []
        elif fields := _changed_fields(ea, eb):
            yield name, "changed", fields


def _changed_fields(a: TarEntry, b: TarEntry) -> list[str]:
    pairs = {
        "type": (a.type, b.type),
        "size": (a.size, b.size),
        "mode": (a.mode, b.mode),
        "mtime": ((a.mtime, a.mtime_ns), (b.mtime, b.mtime_ns)),
        "uid": (a.uid, b.uid),
        "gid": (a.gid, b.gid),
        "uname": (a.uname, b.uname),
        "gname": (a.gname, b.gname),
        "linkname": (a.linkname, b.linkname),
        "content": (a.sha256, b.sha256),
        "pax": (a.pax, b.pax),
    }
    return [field for field in FILE_FIELDS if pairs[field][0] != pairs[field][1]]


def _why_no_file_differs(a: Layer, b: Layer) -> str:
    if a.diff_id == b.diff_id:
        return "the same uncompressed tar (diff_id): only the compression differs"
    if [e.name for e in a.entries] != [e.name for e in b.entries]:
        return "the same files with the same metadata, in a different order in the tar"
    return "the same files with the same metadata; the tars differ in header details not compared (format, devices)"


def _file_entry(entry: TarEntry | None) -> FileEntry | None:
    if entry is None:
        return None
    return FileEntry(
        type=entry.type,
        size=entry.size,
        mode=f"{entry.mode:04o}",
        mtime=entry.mtime,
        mtime_ns=entry.mtime_ns,
        uid=entry.uid,
        gid=entry.gid,
        uname=display(entry.uname),
        gname=display(entry.gname),
        linkname=display(entry.linkname) if entry.type in ("symlink", "hardlink") else None,
        sha256=entry.sha256,
        pax={display(k): display(v) for k, v in entry.pax},
    )


# --- the human summary -------------------------------------------------------------------------------------------


def _text(value: object, limit: int = 120) -> str:
    """Untrusted text for one terminal line: newlines and tabs shown as escapes, other control characters gone,
    the middle of long values elided."""
    text = strip_controls(str(value).replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r"))
    return text if len(text) <= limit else text[: limit - 21] + "…" + text[-20:]


def _value(value: JsonValue) -> str:
    return _text(json.dumps(value, ensure_ascii=False), 80)


def _short(digest: str | None) -> str:
    return f"{digest[:19]}…" if digest else "none"


def summary(comparison: ImageComparison) -> list[str]:
    """The comparison as a few lines for a person: the verdict first, then what differs. Layers are counted from 1
    here ("layer 4 of 9"), while the record's indexes are 0-based."""
    c = comparison
    if c.identical:
        return [f"identical: manifest {c.manifest_digest_a}, config {c.config_digest_a} ({c.layers_a} layers)"]
    lines = [f"differ: manifest {_short(c.manifest_digest_a)} vs {_short(c.manifest_digest_b)}"]
    lines += _field_lines("manifest", c.manifest_differences)
    if c.config_digest_a != c.config_digest_b:
        lines += _field_lines("config", c.config_differences)
        if not c.config_differences:
            lines.append("config: the bytes differ but the content does not (JSON formatting)")
    if c.layers_a != c.layers_b:
        lines.append(f"layers: {c.layers_a} vs {c.layers_b}")
    total = max(c.layers_a, c.layers_b)
    shown = 0
    for layer in c.layers:
        label = f"layer {layer.index + 1} of {total}"
        if layer.created_by:
            label += f" ({_text(layer.created_by, 80)})"
        if layer.digest_a is None or layer.digest_b is None:
            label += " only in " + ("b" if layer.digest_a is None else "a")
        if not layer.compared:
            lines.append(f"{label} differs too (files not compared)")
            continue
        count = layer.file_differences or 0
        lines.append(
            f"{label} differs: {count} file{'' if count == 1 else 's'}" + (f"; {layer.note}" if layer.note else "")
        )
        for difference in (f for f in c.files if f.layer == layer.index):
            if shown == SUMMARY_FILES:
                break
            lines.append("  " + _file_line(difference))
            shown += 1
    more = len(c.files) - shown + c.files_truncated
    if more:
        lines.append(f"  … and {more} more file difference{'' if more == 1 else 's'}")
    if len(lines) == 1:
        lines.append("manifest: the bytes differ but the content does not (JSON formatting)")
    return lines


def _field_lines(what: str, differences: list[FieldDifference]) -> list[str]:
    lines = []
    for d in differences[:SUMMARY_FIELDS]:
        if d.change == "changed":
            lines.append(f"{what} {_text(d.path, 80)}: {_value(d.a)} -> {_value(d.b)}")
        else:
            lines.append(f"{what} {_text(d.path, 80)} {d.change}: {_value(d.a if d.change == 'removed' else d.b)}")
    if len(differences) > SUMMARY_FIELDS:
        lines.append(f"{what}: … and {len(differences) - SUMMARY_FIELDS} more differences")
    return lines


def _file_line(d: FileDifference) -> str:
    path = _text(d.path)
    if d.change != "changed":
        entry = d.a if d.change == "removed" else d.b
        assert entry is not None
        what = _text(entry.type, 40)
        if entry.type == "file":
            what += f", {entry.size} bytes"
        elif entry.linkname is not None:
            what += f" -> {_text(entry.linkname, 60)}"
        return f"{path} {d.change} ({what})"
    a, b = d.a, d.b
    assert a is not None and b is not None
    shown = {
        "type": (a.type, b.type),
        "size": (a.size, b.size),
        "mode": (a.mode, b.mode),
        "mtime": (_mtime(a), _mtime(b)),
        "uid": (a.uid, b.uid),
        "gid": (a.gid, b.gid),
        "uname": (a.uname, b.uname),
        "gname": (a.gname, b.gname),
        "linkname": (a.linkname, b.linkname),
        "content": (_short(a.sha256), _short(b.sha256)),
        "pax": (_pax(a, b), _pax(b, a)),
    }
    details = ", ".join(f"{field} {_text(shown[field][0], 60)} -> {_text(shown[field][1], 60)}" for field in d.fields)
    return f"{path} changed ({details})"


def _mtime(entry: FileEntry) -> str:
    return str(entry.mtime) if entry.mtime_ns is None else f"{entry.mtime}.{entry.mtime_ns:09d}"


def _pax(entry: FileEntry, other: FileEntry) -> str:
    # Only the records that differ: an xattr or two, not every record the entry has.
    differing = {k: v for k, v in entry.pax.items() if other.pax.get(k) != v}
    return ", ".join(f"{k}={v}" for k, v in differing.items()) or "none"
