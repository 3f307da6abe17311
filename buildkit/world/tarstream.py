"""A tar stream the engine exports (a path in an image), walked member by member under a budget: each header
counted before its data is read, extended headers bounded (BoundedInfo), and no header kept after its
member (tarfile keeps every one it read: 4,000,000 entries would hold about 1.8 GB)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable, Iterator

from buildkit.budget import Budget
from buildkit.errors import UpstreamMalformed
from buildkit.files import ChunkReader


class BoundedInfo(tarfile.TarInfo):
    """A header whose extended header (PAX, or GNU's long name) tarfile would read whole, at any size the tar
    declares: refused past MAX_EXTENDED_HEADER (real ones are hundreds of bytes)."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _EXTENDED_TYPES and self.size > MAX_EXTENDED_HEADER:
            raise tarfile.HeaderError(f"an extended header of {self.size:,} bytes (at most {MAX_EXTENDED_HEADER:,})")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


_EXTENDED_TYPES = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
MAX_EXTENDED_HEADER = 1 << 20


def members(chunks: Iterable[bytes], where: str, budget: Budget) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    """(the open tar, a member) for each member, in stream order; a broken stream is UpstreamMalformed."""
    stream = io.BufferedReader(ChunkReader(chunks), 1 << 20)
    try:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=BoundedInfo) as tar:
            while (member := tar.next()) is not None:
                tar.members = []  # type: ignore[attr-defined]  # (typeshed omits .members)
                budget.entry()
                budget.tick()
                yield tar, member
    except tarfile.TarError as exc:
        raise UpstreamMalformed(f"{where}: not a readable tar stream: {exc}") from None
