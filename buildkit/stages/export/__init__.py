"""`buildkit export`: the built image as an enroot squashfs (`.sqsh`) for Slurm with pyxis (`srun
--container-image=FILE`), laid out as `enroot import` lays out an image, the same bytes for the same image, and a
record the report shows.

How enroot imports an image (NVIDIA/enroot at 8ea147d, src/docker.sh): `docker::import` (lines 448-495) has
`docker::_prepare_layers` (312-336) unpack each layer into a directory of its own (`tar --exclude='dev/*' -px`), fix
permissions (`common::fixperms`, src/common.sh 230-237: u+rX, u+w on directories) and turn whiteouts into overlayfs
ones (bin/enroot-aufs2ovlfs.c); `docker::configure` (338-397) writes the image's configuration into a directory "0"
that goes on top; then mksquashfs runs on the overlay of them all (line 494):

    mksquashfs <overlay> <file> [-mkfs-time $SOURCE_DATE_EPOCH -all-time $SOURCE_DATE_EPOCH] -all-root
               -processors $ENROOT_MAX_PROCESSORS $ENROOT_SQUASH_OPTIONS

with ENROOT_SQUASH_OPTIONS "-comp lzo -noD -exit-on-error" (enroot.in line 88) and ENROOT_MAX_PROCESSORS $(nproc).
`docker::configure` writes, in "0":

    /etc/fstab        each of the config's Volumes (sorted): `${ENROOT_ROOTFS}<path> <path> none x-create=dir,...`
    /etc/environment  the config's Env, one entry a line
    /etc/rc           `# enroot-provenance: <uri>`, the Labels as `# key value` comments, a blank line, then: make and
                      enter the WorkingDir, source /etc/rc.local, and exec the Entrypoint with the arguments given,
                      or with the Cmd (`/bin/sh` when the image names neither)
    /etc/rc.local     two comment lines

and makes /etc and the working directory there, so the overlay shows them with that layer's mode (0755).

Here the layers come from the local engine (`docker save`, read by buildkit.image.ocilayout, each checked against its
digest), buildkit.image.unpack stacks them into one directory (what enroot's overlay shows), `configure` writes the same
four files, and mksquashfs runs with enroot's options. The one input enroot takes from the registry, the URI, is
`dockerd://<image>`: what `enroot import dockerd://<image>` writes for an image in the local Docker.

The same image gives the same bytes (with the same mksquashfs version, which the record names):
- every timestamp, the filesystem's and each file's, is SOURCE_DATE_EPOCH (-mkfs-time, -all-time): the build's, i.e.
  the NeMo-RL commit time, as enroot does when SOURCE_DATE_EPOCH is set; mksquashfs gets no SOURCE_DATE_EPOCH in its
  environment (it refuses both);
- owners are root's (-all-root), modes are the layers' as enroot fixes them, no extended attributes (-no-xattrs:
  enroot's `tar -px` keeps none, and the disk this runs on may add its own, such as SELinux labels);
- mksquashfs 4.4 and later order their output the same whatever the number of processors (`-reproducible`, their
  default; a test holds it), and sort each directory by name;
- the unpacked tree depends on the layers alone: never on who runs it (no owners, no device nodes) or the umask
  (every mode is set explicitly).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from buildkit import __version__
from buildkit.errors import BuildkitError, InputError, excerpt
from buildkit.files import (
    read_local,
    read_record,
    replaced_atomically,
    sha256_bytes,
    sha256_file,
    utc_now,
    work_dir_beside,
    write_atomic,
    write_error,
)
from buildkit.image.ocilayout import OciLayout, resolve_image
from buildkit.image.unpack import Rootfs, Unpacked, unpack_image
from buildkit.models.grammar import DIGEST_RE, image_ref, parse_image_ref
from buildkit.models.lock import Lock, lock_sha256
from buildkit.models.paths import Paths
from buildkit.models.plan import repository, source_date_epoch
from buildkit.models.records import RecordHeader, belongs, header, repo_digests
from buildkit.models.records.attest import AttestRecord
from buildkit.models.records.build import BuildRecord, latest_successful_build, pushed
from buildkit.models.records.index import IndexRecord
from buildkit.models.records.squashfs import MAX_SIDECAR, EnrootLayout, SquashfsRecord, sidecars, srun
from buildkit.models.results import Exported
from buildkit.models.slsa import subjects
from buildkit.options import ExportOptions
from buildkit.stages.context import Context, load_inputs
from buildkit.stages.export import evidence, publish
from buildkit.world import artifacts, cosign
from buildkit.world.engine import Engine, ImageEngine, pull_image
from buildkit.world.http import Http
from buildkit.world.mksquashfs import Mksquashfs, find_mksquashfs, squash
from buildkit.world.registry import Registry

ENROOT_SQUASH_OPTIONS = ("-comp", "lzo", "-noD", "-exit-on-error")  # enroot.in: ENROOT_SQUASH_OPTIONS
SPACE_MARGIN = 256 * 1024 * 1024  # beside twice the image: the archive's tar headers, the tree's directories
FSTAB_OPTIONS = "none x-create=dir,bind,rw,nosuid,nodev"
RC_LOCAL = (
    "# This file is sourced by /etc/rc when the container starts.\n"
    "# It can be used to manipulate the entrypoint or the command of the container.\n"
)

# /etc/environment holds one entry a line; /etc/fstab separates its fields with blanks; /etc/rc has the working
# directory in double quotes: what would break out of those is refused.
_ENV_RE = re.compile(r"[^=\n\x00]+=[^\n\x00]*")
_WORKDIR_RE = re.compile(r"(?:/[^/\x00-\x1f\x7f\"$`\\]+)*/?")
_VOLUME_RE = re.compile(r"(?:/[^/\s\x00-\x1f\x7f]+)+/?")
# bash's ${word@Q} ($'...' quoting) for the control characters it names.
_ANSI_C = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\x1b": "\\E"}


class Source(NamedTuple):
    """The image to export: the reference a person knows, and the build that made it when there is a record."""

    ref: str
    record_path: Path | None
    record: BuildRecord | None


def run(ctx: Context[ExportOptions]) -> None:
    """The image the options name (ExportOptions; the newest build's when none) as a .sqsh, and its record: the
    record and where it was written in ctx.made.export. Which image and build it is goes to ctx.say, each step
    to ctx.step."""
    opts = ctx.options
    tool = find_mksquashfs()  # before anything else: without it nothing can be made
    lock = load_inputs(ctx.paths, on_note=ctx.on_note).lock
    directory = publish.checked_dir(opts.to) if opts.to is not None else None
    source = choose_source(ctx.paths, opts.image, platform=lock.build.platform)
    if source.record_path:
        ctx.say(f"image {source.ref}, from {source.record_path}")
    if directory is None:
        record, where = export_squashfs(ctx.paths, lock, source, tool, opts.output, on_step=ctx.on_step)
        ctx.made.export = Exported.of(record, where)
        return
    manifest = platform_manifest(source, lock.build.platform)
    output = directory / publish.published_name(source.ref, manifest)
    with publish.turn(directory):
        size = publish.whole_squashfs(output)
        if size is not None and (opts.key is None or all(p.is_file() for p in sidecars(output))):
            ctx.step(f"hashing {output.name}, already there")
            ctx.made.export = kept(output, size, _workdir(source))
            if opts.key is not None:
                _attach(ctx, source, manifest, output)
            return
        statement = attested(ctx.paths, source) if opts.key else None
        packages: list[dict[str, Any]] = []
        tree = (lambda root: packages.extend(evidence.python_packages(root))) if opts.key else None
        record, where = export_squashfs(ctx.paths, lock, source, tool, output, on_step=ctx.on_step, on_tree=tree)
        ctx.made.export = Exported.of(record, where)
        if opts.key is not None and statement is not None:
            ctx.step(f"signing the evidence beside {output.name}")
            _evidence(lock, source, record, manifest, packages, statement, opts.key)
            _attach(ctx, source, manifest, output)


def _attach(ctx: Context[ExportOptions], source: Source, manifest: str, output: Path) -> None:
    """The SBOM and the signed statement beside `output`, attached in the registry as OCI referrers of the image's
    platform manifest and of what the build pushed (an index, with attestations), once each."""
    assert source.record is not None and source.record.image.digest
    ctx.step("attaching the evidence in the registry")
    sbom_path, bundle_path = sidecars(output)
    files = [
        (artifacts.SBOM_TYPE, sbom_path.name, read_local(sbom_path, "the SBOM", MAX_SIDECAR)),
        (artifacts.BUNDLE_TYPE, bundle_path.name, read_local(bundle_path, "the bundle", MAX_SIDECAR)),
    ]
    tag = source.record.image.tag
    for subject in dict.fromkeys((manifest, source.record.image.digest)):
        how = artifacts.attach_files(f"{repository(tag)}@{subject}", subject, files)
        ctx.say(f"attached the SBOM and the signed statement to {repository(tag)}@{subject[:19]}... ({how})")


def attested(paths: Paths, source: Source) -> dict[str, Any]:
    """The statement `buildkit attest` wrote for the build being exported, as it wrote it (its sha256 the attest
    record's, its subject the build's image): export --key signs it again with the published files added, so it is
    read before anything is made, and refused when it is missing or of another build."""
    record = source.record
    assert record is not None, "a published image is a recorded, pushed build"
    kept = read_record(paths.attest_record(record.smoke), AttestRecord)
    hint = "run `buildkit attest --key KEY` first: it writes the build's statement, which export signs again"
    if kept is None or not belongs(kept, record.build()):
        raise InputError(
            f"no statement of the build of {source.ref}: export --key signs the one attest writes", hint=hint
        )
    where = paths.statement(record.smoke)
    data, statement = _statement_of(where, record.image.digest or "", hint)
    if sha256_bytes(data) != kept.statement_sha256:
        raise InputError(f"{where} is not the statement attest wrote (its sha256 differs)", hint=hint)
    return statement


def _statement_of(where: Path, digest: str, hint: str) -> tuple[bytes, dict[str, Any]]:
    """A statement `attest` wrote (its bytes, and it read), refused unless it is a statement of `digest`."""
    try:
        data = read_local(where, "the statement", MAX_SIDECAR)
    except FileNotFoundError:
        raise InputError(f"{where}: no such statement", hint=hint) from None
    try:
        statement = json.loads(data)
    except (ValueError, RecursionError):
        statement = None
    if not isinstance(statement, dict) or digest.removeprefix("sha256:") not in subjects(statement):
        raise InputError(f"{where} is not a statement of {excerpt(digest, 80)}", hint=hint)
    return data, statement


def _evidence(
    lock: Lock,
    source: Source,
    made: SquashfsRecord,
    manifest: str,
    packages: list[dict[str, Any]],
    statement: dict[str, Any],
    key: str,
) -> None:
    """The SBOM and the signed statement beside a published .sqsh (evidence.py), each written atomically, the
    bundle last: a file with a bundle beside it has its SBOM too."""
    output = Path(made.path)
    sbom_path, bundle_path = sidecars(output)
    record = source.record
    assert record is not None
    base = repo_base(statement) or lock.base_image.pinned
    name = repository(record.image.tag)
    bom = evidence.sbom(lock, record, name, manifest, packages, base)
    bom_text = json.dumps(bom, indent=2) + "\n"
    write_atomic(sbom_path, bom_text)
    files = [(output.name, made.sha256), (sbom_path.name, sha256_bytes(bom_text.encode()))]
    signed = evidence.statement_for(statement, name, manifest, files)
    with replaced_atomically(bundle_path) as tmp:
        cosign.attest_blob(cosign.binary(), key, evidence.canonical(signed), tmp)


def repo_base(statement: dict[str, Any]) -> str | None:
    """The base image the statement names (a smoke build's stand-in, or the lock's), as name@digest."""
    deps = ((statement.get("predicate") or {}).get("buildDefinition") or {}).get("resolvedDependencies") or []
    base = next((d for d in deps if isinstance(d, dict) and d.get("name") == "base-image"), None)
    uri, sha = (base or {}).get("uri"), ((base or {}).get("digest") or {}).get("sha256")
    if not isinstance(uri, str) or not uri.startswith("pkg:docker/") or not isinstance(sha, str):
        return None
    return f"{uri.removeprefix('pkg:docker/').split('?', 1)[0].split('@', 1)[0]}@sha256:{sha}"


def publish_index(paths: Paths, key: str) -> str | None:
    """For a push of several platforms (the newest index record, smoke or not): the statement `attest` wrote for the
    image index, signed into a Sigstore bundle and attached as an OCI referrer of the index, beside the platforms'
    own evidence; the index's name@digest, or None when no index was pushed."""
    found = [
        (r.created, smoke, r) for smoke in (False, True) if (r := read_record(paths.index_record(smoke), IndexRecord))
    ]
    if not found:
        return None
    _, smoke, index = max(found, key=lambda item: item[0])
    if not index.index_digest or not DIGEST_RE.fullmatch(index.index_digest):
        return None
    where = paths.index_statement(smoke)
    statement, _ = _statement_of(where, index.index_digest, "run `buildkit attest --key KEY` first")
    name = f"{repository(index.tag)}@{index.index_digest}"
    with work_dir_beside(where) as work:
        bundle = work / "index.sigstore.json"
        cosign.attest_blob(cosign.binary(), key, statement, bundle)
        payload = read_local(bundle, "the bundle", MAX_SIDECAR)
    title = f"{repository(index.tag).rsplit('/', 1)[-1]}@{index.index_digest.replace(':', '-')}.sigstore.json"
    artifacts.attach_files(name, index.index_digest, [(artifacts.BUNDLE_TYPE, title, payload)])
    return name


def kept(output: Path, size: int, workdir: str) -> Exported:
    """A published file of the same digest, left untouched: its bytes hashed (read only) for the user to compare."""
    return Exported(output, sha256_file(output), size, srun(str(output), workdir), None, None)


def platform_manifest(source: Source, platform: str) -> str:
    """The digest of the image's platform manifest, as the registry serves it: what names a published file. Only a
    pushed image has one (a loaded image is known by its config alone)."""
    record = source.record
    if record is None or not record.image.digest or not pushed(record):
        raise InputError(
            f"{source.ref} was not pushed: a published squashfs is named by the digest of the image's manifest in "
            "its registry",
            hint="build with --push (then export --to DIR), or write the file with -o PATH",
        )
    try:
        found = Registry(Http()).resolve(f"{repository(record.image.tag)}@{record.image.digest}", platform)
    except BuildkitError as exc:
        raise type(exc)(f"the pushed image {source.ref}: {exc.message}", hint=exc.hint) from None
    return found.manifest_digest


def _workdir(source: Source) -> str:
    """The image's working directory for the srun line, when the local engine has the image ("/" otherwise)."""
    wanted = source.record.image.id if source.record and source.record.image.id else source.ref
    attrs = Engine().image_attrs(wanted) or {}
    return str((attrs.get("Config") or {}).get("WorkingDir") or "/")


def choose_source(
    paths: Paths, image: str | None, engine: ImageEngine | None = None, platform: str | None = None
) -> Source:
    """The newest build's image (as `verify` and `report` pick the build), or `image` as given: with the record of
    the build that made it, when one did (`built_by`)."""
    if image is None:
        record_path_, record = latest_successful_build(
            paths,
            "to export",
            no_build_hint="run `buildkit build` first",
            failed_hint="run `buildkit build` again, or name the image: `buildkit export IMAGE`",
        )
        return Source(record.image.tag, record_path_, record)
    if not DIGEST_RE.fullmatch(image):
        try:
            image_ref(image)
        except ValueError as exc:
            raise InputError(f"IMAGE: {exc}") from None
    named = Source(image, None, None)
    attrs = _engine_image(engine or Engine(), named, platform)
    for smoke in (False, True):
        path = paths.build_record(smoke)
        built = read_record(path, BuildRecord)
        if built is not None and built.outcome == "succeeded" and built_by(attrs, built):
            return Source(image, path, built)
    return named


class _EngineImage(NamedTuple):
    """An image of the local engine as a record (a headerless one, for records.belongs): the lock and target its
    labels name (a buildkit build sets them), and its image ID."""

    lock_sha256: str | None
    smoke: bool
    image_id: str


def built_by(attrs: dict[str, Any], record: BuildRecord) -> bool:
    """Whether the engine's image (`attrs`, as the engine inspects it) is the one `record`'s build made, by the one
    rule (records.belongs): the lock and target its labels name are the record's, and its ID is one of the record's
    image identities. A tag that now names another image has no record."""
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    image = _EngineImage(labels.get("buildkit.lock.sha256"), labels.get("buildkit.smoke") == "true", str(attrs["Id"]))
    return belongs(image, record.build())


def export_squashfs(
    paths: Paths,
    lock: Lock,
    source: Source,
    tool: Mksquashfs,
    output: Path | None = None,
    *,
    engine: ImageEngine | None = None,
    processors: int | None = None,
    on_step: Callable[[str], None] | None = None,
    on_tree: Callable[[Path], None] | None = None,
) -> tuple[SquashfsRecord, Path]:
    """Export `source`'s image from the local engine to a .sqsh (default: `Paths.squashfs`), atomically, and write
    the record beside the build's records. Returns the record and where it was written. Nothing half-made is left
    behind: the working directory (the saved archive and the unpacked tree) and the temp file are removed whatever
    happens, and `output` is replaced only by a finished, fsynced file."""
    step = on_step or (lambda _text: None)
    started, begun = utc_now(), time.monotonic()
    engine = engine or Engine()
    record = source.record
    attrs = _engine_image(engine, source, lock.build.platform)
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    smoke = record.smoke if record else labels.get("buildkit.smoke") == "true"
    epoch = record.source_date_epoch if record else source_date_epoch(lock)
    output = (output or paths.squashfs(smoke, source.ref)).absolute()
    if output.is_dir():
        raise InputError(f"{output} is a directory", hint="give the .sqsh file's path: -o DIR/NAME.sqsh")
    _check_space(output.parent, int(attrs.get("Size") or 0))
    options = squash_options(epoch, enroot_squash_options(os.environ.get("ENROOT_SQUASH_OPTIONS")))
    made = _make(engine, attrs, lock, source, tool, output, options, processors, step, on_tree)
    config_digest, unpacked, layout, options, digest, written = made
    result = SquashfsRecord(
        buildkit_version=__version__,
        lock_sha256=record.lock_sha256 if record else lock_sha256(lock),
        smoke=smoke,
        image=source.ref,
        image_id=str(attrs["Id"]),
        config_digest=config_digest,
        manifest_digest=record.image.digest if record else None,
        build_record=str(source.record_path) if source.record_path else None,
        path=str(output),
        sha256=digest,
        size=written,
        source_date_epoch=epoch,
        created=datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        mksquashfs=tool.version,
        options=options,
        layout=layout,
        entries=unpacked.entries,
        skipped=unpacked.skipped,
        skipped_count=unpacked.skipped_count,
        exported_at=started,
        seconds=round(time.monotonic() - begun, 3),
        header=_header(attrs, record, lock, smoke, config_digest),
    )
    where = paths.squashfs_record(smoke)
    write_atomic(where, result.to_json())
    return result, where


def _header(
    attrs: dict[str, Any], record: BuildRecord | None, lock: Lock, smoke: bool, config_digest: str
) -> RecordHeader:
    """The export record's header: the image is the build's manifest digest when the engine's image is the one that
    build made, else the engine's image ID; the image ID, config digest and repo digests name it too."""
    return header(
        "squashfs",
        (record.image.digest if record and built_by(attrs, record) else None) or str(attrs["Id"]),
        record.lock_sha256 if record else lock_sha256(lock),
        smoke,
        (str(attrs["Id"]), config_digest, *repo_digests(attrs)),
    )


class _Made(NamedTuple):
    config_digest: str
    unpacked: Unpacked
    layout: EnrootLayout
    options: list[str]
    sha256: str
    size: int


def _make(
    engine: ImageEngine,
    attrs: dict[str, Any],
    lock: Lock,
    source: Source,
    tool: Mksquashfs,
    output: Path,
    options: list[str],
    processors: int | None,
    step: Callable[[str], None],
    on_tree: Callable[[Path], None] | None = None,
) -> _Made:
    """Save the image, unpack it beside `output`, add enroot's files, and mksquashfs it into `output` (replaced
    atomically); the working directory goes whatever happens."""
    size = int(attrs.get("Size") or 0)
    with work_dir_beside(output) as work:
        archive = work / "image.tar"
        step(f"saving {source.ref} from the engine")
        saving = _every(64 * 2**20, f"saving {source.ref}", step)
        engine.save_image(attrs["Id"], archive, 2 * size + 2**30, saving, reported=output)
        rootfs = work / "rootfs"
        rootfs.mkdir(mode=0o700)
        config_digest, unpacked, config = _unpack(archive, rootfs, attrs, lock, source, output, step)
        archive.unlink()  # the tree and the .sqsh need the space now
        if on_tree:
            on_tree(rootfs)  # the image's files as the .sqsh will hold them (export --to --key reads its packages)
        step("writing enroot's configuration files")
        layout = _put_enroot_files(rootfs, config, source.ref, output)
        with replaced_atomically(output) as tmp:
            step(f"mksquashfs {tool.version}: {output.name}")
            squash(tool, rootfs, tmp, options, processors, output)
            step(f"hashing {output.name}")
            return _Made(config_digest, unpacked, layout, options, sha256_file(tmp), tmp.stat().st_size)


def _engine_image(engine: ImageEngine, source: Source, platform: str | None) -> dict[str, Any]:
    """The image's attributes from the local engine: the build's image ID when its record names one. A pushed build
    (not loaded into Docker) is pulled by its manifest digest, for its platform (issue 41: an arm64 build pushed
    from an amd64 machine); an image named that the engine lacks is not fetched from anywhere, the hint says how."""
    record = source.record
    wanted = record.image.id if record and record.image.id else source.ref
    attrs = engine.image_attrs(wanted)
    if attrs is not None:
        return attrs
    if record is not None and record.image.id is None and record.image.digest:
        return pull_image(engine, parse_image_ref(record.image.tag).at(record.image.digest), platform)
    pull = f"`docker pull --platform {platform} {source.ref}`" if platform else f"`docker pull {source.ref}`"
    raise InputError(
        f"no image {source.ref} in the local engine",
        hint=f"run `buildkit build` first: it loads the image into Docker; or {pull} if a registry has it",
    )


def _unpack(
    archive: Path,
    rootfs: Path,
    attrs: dict[str, Any],
    lock: Lock,
    source: Source,
    output: Path,
    step: Callable[[str], None],
) -> tuple[str, Unpacked, dict[str, Any]]:
    """The saved image's layers stacked into `rootfs`: its config digest (checked against the build record's),
    what was unpacked, and its config."""
    record = source.record
    with OciLayout(archive) as saved:
        image = resolve_image(saved, _platform(attrs, lock))
        config_digest = image.config_descriptor.digest
        if record and record.image.config_digest and record.image.config_digest != config_digest:
            wanted = record.image.id or source.ref
            raise InputError(
                f"the engine's image {wanted} has config {config_digest}, not {record.image.config_digest} as "
                f"{source.record_path} records",
                hint="build again, or name the image to export: `buildkit export IMAGE`",
            )
        unpacked = unpack_image(saved, image, rootfs, _layers(source.ref, step), reported=output)
        return config_digest, unpacked, image.config


def _put_enroot_files(rootfs: Path, config: dict[str, Any], ref: str, output: Path) -> EnrootLayout:
    """enroot's configuration files (`configure`) written into the unpacked tree, on top of the layers."""
    layout, files = configure(config, f"dockerd://{ref}")
    with Rootfs(rootfs, reported=output) as root:
        root.put_dir(("etc",))
        root.put_dir(_parts(layout.workdir))
        for parts, data in files.items():
            root.put_file(parts, data)
        root.finish()
    return layout


def squash_options(epoch: int, enroot: tuple[str, ...] = ENROOT_SQUASH_OPTIONS) -> list[str]:
    """The options that shape the bytes, in enroot's order: its timestamps (given SOURCE_DATE_EPOCH), -all-root, its
    ENROOT_SQUASH_OPTIONS; then -no-xattrs."""
    return ["-mkfs-time", str(epoch), "-all-time", str(epoch), "-all-root", *enroot, "-no-xattrs"]


# What $ENROOT_SQUASH_OPTIONS may hold (enroot reads the same variable): how the data is compressed and laid out.
# Options that read other files (-e, -ef, -pf, -sort), change owners, modes or times, or append to a file are not
# the image's to choose, and are refused.
_SQUASH_FLAGS = {
    "-noD", "-noI", "-noF", "-noX", "-noId", "-no-fragments", "-always-use-fragments", "-no-duplicates",
    "-exit-on-error", "-nopad",
}  # fmt: skip
_SQUASH_VALUES = {
    "-comp": re.compile(r"gzip|lzo|lz4|xz|zstd"),
    "-b": re.compile(r"(4|8|16|32|64|128|256|512)K|1M|[0-9]{4,7}"),
    "-Xcompression-level": re.compile(r"[1-9]|1[0-9]|2[0-2]"),
}


def enroot_squash_options(text: str | None) -> tuple[str, ...]:
    """$ENROOT_SQUASH_OPTIONS as mksquashfs options (enroot's own when unset), each checked; InputError otherwise."""
    if text is None or not text.strip():
        return ENROOT_SQUASH_OPTIONS
    words, out = text.split(), []
    while words:
        word = words.pop(0)
        if word in _SQUASH_FLAGS:
            out.append(word)
        elif word in _SQUASH_VALUES and words and _SQUASH_VALUES[word].fullmatch(words[0]):
            out += [word, words.pop(0)]
        else:
            raise InputError(
                f"ENROOT_SQUASH_OPTIONS: {excerpt(word, 40)} is not an option buildkit passes to mksquashfs",
                hint="-comp gzip|lzo|lz4|xz|zstd, -b SIZE, -Xcompression-level N, -noD -noI -noF -noX, -no-fragments, "
                "-no-duplicates, -exit-on-error (unset: enroot's own, -comp lzo -noD -exit-on-error)",
            )
    return tuple(out)


def configure(config: dict[str, Any], uri: str) -> tuple[EnrootLayout, dict[tuple[str, ...], bytes]]:
    """enroot's `docker::configure` (src/docker.sh 338-397) on an image config: the four files it writes, by path,
    and what they say. Values that would break out of a line of /etc/environment or /etc/fstab, or out of /etc/rc's
    quotes, are refused (exit 2)."""
    section = given if isinstance(given := config.get("config"), dict) else {}
    env = _strings(section.get("Env"), "Env")
    for entry in env:
        if not _ENV_RE.fullmatch(entry):
            raise InputError(f"the image's ENV entry {excerpt(entry, 80)} cannot be a line of /etc/environment")
    workdir = section.get("WorkingDir") or "/"
    if not isinstance(workdir, str) or not _WORKDIR_RE.fullmatch(workdir) or {".", ".."} & set(workdir.split("/")):
        raise InputError(f"the image's working directory {excerpt(workdir, 80)} is not a plain absolute path")
    volumes = section.get("Volumes") or {}
    if not isinstance(volumes, dict):
        raise InputError("the image config's Volumes is not an object")
    for volume in volumes:
        if not _VOLUME_RE.fullmatch(volume) or ".." in volume.split("/"):
            raise InputError(f"the image's volume {excerpt(volume, 80)} cannot be a line of /etc/fstab")
    entrypoint = _strings(section.get("Entrypoint"), "Entrypoint")
    cmd = _strings(section.get("Cmd"), "Cmd")
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    labels = section.get("Labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise InputError("the image config's Labels is not an object of strings")
    if "\n" in uri:
        raise InputError(f"image {excerpt(uri, 80)}: not one line")

    # A label becomes a comment: a line break in its key or value would end it (enroot replaces those in values).
    rc = [f"# enroot-provenance: {uri}\n"]
    rc += [f"# {key.replace(chr(10), ' ')} {value.replace(chr(10), ' ')}\n" for key, value in labels.items()]
    words = " ".join(bash_quote(word) for word in entrypoint)
    rc += [
        "\n",
        f'mkdir -p "{workdir}" 2> /dev/null\n',
        f'cd "{workdir}" && unset OLDPWD || exit 1\n',
        "\n",
        "if [ -s /etc/rc.local ]; then\n",
        "    . /etc/rc.local\n",
        "fi\n",
        "\n",
        "if [ $# -gt 0 ]; then\n",
        f'    exec {words} "$@"\n',
        "else\n",
        f"    exec {words} {' '.join(bash_quote(word) for word in cmd)}\n",
        "fi\n",
    ]
    sorted_volumes = sorted(volumes)  # jq's `keys`
    files = {
        ("etc", "fstab"): "".join(f"${{ENROOT_ROOTFS}}{v} {v} {FSTAB_OPTIONS}\n" for v in sorted_volumes),
        ("etc", "environment"): "".join(f"{entry}\n" for entry in env),
        ("etc", "rc"): "".join(rc),
        ("etc", "rc.local"): RC_LOCAL,
    }
    layout = EnrootLayout(
        uri=uri, environment=env, workdir=workdir, entrypoint=entrypoint, cmd=cmd, volumes=sorted_volumes
    )
    return layout, {parts: text.encode("utf-8", "surrogateescape") for parts, text in files.items()}


def bash_quote(word: str) -> str:
    """`${word@Q}` as bash 5 writes it (enroot quotes the entrypoint and command so): '...' with ' as '\\'', or
    $'...' when the word holds a control character (where enroot's readarray would split a word at a line break,
    the word here stays one)."""
    if not any(ord(c) < 0x20 or ord(c) == 0x7F for c in word):
        return "'" + word.replace("'", "'\\''") + "'"
    out = []
    for c in word:
        if c in _ANSI_C:
            out.append(_ANSI_C[c])
        elif c in "\\'":
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\{ord(c):03o}")
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def _strings(value: object, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"the image config's {what} is not a list of strings")
    if any("\x00" in v for v in value):
        raise InputError(f"the image config's {what} holds a NUL character")
    return value


def _parts(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)


def _platform(attrs: dict[str, Any], lock: Lock) -> str:
    os_name, arch, variant = attrs.get("Os"), attrs.get("Architecture"), attrs.get("Variant")
    if isinstance(os_name, str) and isinstance(arch, str):
        return "/".join(p for p in (os_name, arch, variant if isinstance(variant, str) else "") if p)
    return lock.build.platform


def _check_space(directory: Path, image_size: int) -> None:
    """The archive and the unpacked tree, then the tree and the .sqsh, side by side: about twice the image."""
    need = 2 * image_size + image_size // 10 + SPACE_MARGIN
    try:
        directory.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(directory).free
    except OSError as exc:
        raise write_error(directory, exc) from None
    if free < need:
        raise InputError(
            f"{directory} has {_mib(free)} free; exporting an image of {_mib(image_size)} needs about {_mib(need)} "
            "there (the unpacked image and the .sqsh side by side)",
            hint="free some space, or write the .sqsh elsewhere (-o DIR/NAME.sqsh, --to DIR)",
        )


def _layers(ref: str, step: Callable[[str], None]) -> Callable[[int, int], None]:
    return lambda index, count: step(f"unpacking {ref}: layer {index + 1} of {count}")


def _every(interval: int, what: str, step: Callable[[str], None]) -> Callable[[int], None]:
    """A byte counter that tells `step` each time another `interval` bytes went by (not on every chunk)."""
    told = [-1]

    def count(done: int) -> None:
        if done // interval != told[0]:
            told[0] = done // interval
            step(f"{what}: {_mib(done)}")

    return count


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"
