"""Fetching, verifying and unpacking corpus files, from the official sites or a mirror.

A *mirror* is a local folder or an ``http(s)`` URL laid out like the data
folder described in ``datasets/README.md``::

    sst/trainDevTestTrees_PTB.zip
    sick/sick_train.zip  sick/sick_trial.zip  sick/sick_test_annotated.zip
    sick/dependency_parses/{train,dev,test}/{a,b}.{toks,parents}  .../sim.txt  .../id.txt
    trec/train_5500.label  trec/TREC_10.label

It is chosen by the ``mirror=`` argument of a dataset, else by the
``GRAPHTREE_MIRROR`` environment variable, else the official URLs are used.

Every file lands atomically: it is written to a temporary name in the target
folder and renamed only once it is complete and its SHA-256 (where known)
matches, so an interrupted or corrupt download never looks like a good file.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import settings
from ..errors import GraphtreeError

__all__ = [
    "MIRROR_ENV",
    "CorruptFileError",
    "DatasetError",
    "DownloadError",
    "RemoteFile",
    "atomic_path",
    "atomic_torch_save",
    "count_lines",
    "extract_zip",
    "fetch",
    "obtain",
    "resolve_mirror",
    "sha256sum",
]

MIRROR_ENV = settings.ENVIRONMENT["mirror"]
"""Environment variable naming the default mirror (a folder or an http(s) URL)."""

_TIMEOUT_S = 60
_CHUNK = 1 << 20


class DatasetError(GraphtreeError):
    """A dataset cannot be built: wrong arguments, a wrong root folder, bad corpus content."""


class DownloadError(DatasetError):
    """A corpus file could not be obtained (no network, a mirror lacking the file, no official URL)."""


class CorruptFileError(DownloadError):
    """A file was obtained but is truncated or corrupt (wrong checksum, unreadable archive, wrong count)."""


@dataclass(frozen=True)
class RemoteFile:
    """One corpus file as it is published.

    Attributes:
        path: Its path inside a mirror, e.g. ``"sst/trainDevTestTrees_PTB.zip"``.
        url: The official download URL, or ``None`` when there is none (then
            only a mirror or a file placed by hand can provide it).
        sha256: Expected SHA-256 hex digest, or ``None`` when unknown.
    """

    path: str
    url: str | None = None
    sha256: str | None = None

    @property
    def name(self) -> str:
        """The file name (last component of :attr:`path`)."""
        return self.path.rsplit("/", 1)[-1]


def resolve_mirror(mirror: str | os.PathLike | None = None) -> str | None:
    """The mirror to use: ``mirror`` if given, else ``$GRAPHTREE_MIRROR``, else ``None`` (official URLs).

    Args:
        mirror: A local folder or an ``http(s)://`` URL laid out like the data folder.

    Returns:
        The mirror as a string (a URL, or an absolute folder path), or ``None``.

    Raises:
        DownloadError: ``mirror`` names a local folder that does not exist.
    """
    value = os.fspath(mirror) if mirror is not None else settings.current().mirror
    if not value:
        return None
    if _is_url(value):
        return value.rstrip("/") + "/"
    if value.startswith("file://"):
        value = urllib.parse.urlparse(value).path
    folder = Path(value).expanduser()
    if not folder.is_dir():
        origin = "mirror=" if mirror is not None else f"${MIRROR_ENV}="
        raise DownloadError(
            f"{origin}{value!r} is neither an http(s) URL nor an existing folder; point it at a folder "
            f"(or URL) laid out like the data folder, e.g. one holding sst/trainDevTestTrees_PTB.zip")
    return str(folder.resolve())


def fetch(remote: RemoteFile, dest: str | os.PathLike, mirror: str | os.PathLike | None = None,
          log: bool = True) -> Path:
    """Download (or copy from a mirror) ``remote`` to ``dest``, atomically, and verify its checksum.

    Args:
        remote: What to fetch.
        dest: Target file path; its folder is created.
        mirror: A mirror folder or URL; ``None`` uses ``$GRAPHTREE_MIRROR`` or the official URL.
        log: Print one line to stderr naming the source.

    Returns:
        ``dest`` as a ``Path``.

    Raises:
        DownloadError: the source is unreachable or lacks the file (the message
            says where the file was looked for and how to provide it).
        CorruptFileError: the SHA-256 does not match; nothing is left at ``dest``.
    """
    dest = Path(dest)
    base = resolve_mirror(mirror)
    if base is None:
        if remote.url is None:
            raise DownloadError(
                f"{remote.path} has no official download; pass mirror= (or set ${MIRROR_ENV}) to a folder or "
                f"URL that holds {remote.path}, or copy the file to {dest}")
        source = remote.url
    elif _is_url(base):
        source = base + urllib.parse.quote(remote.path)
    else:
        source = os.path.join(base, *remote.path.split("/"))
        if not os.path.isfile(source):
            raise DownloadError(
                f"the mirror {base} lacks {remote.path} (looked for {source}); add the file there, "
                f"or point mirror= / ${MIRROR_ENV} at a folder laid out like the data folder")
    if log:
        print(f"Fetching {source}", file=sys.stderr)

    with atomic_path(dest) as tmp:
        if _is_url(source):
            _download(source, tmp, remote, dest, from_mirror=base is not None)
        else:
            shutil.copyfile(source, tmp)
        if remote.sha256 is not None:
            digest = sha256sum(tmp)
            if digest != remote.sha256:
                raise CorruptFileError(
                    f"{remote.path} from {source} is truncated or corrupt: SHA-256 {digest}, expected "
                    f"{remote.sha256}; nothing was kept, so fix or replace the source and run again")
    return dest


def obtain(remote: RemoteFile, dest: str | os.PathLike, mirror: str | os.PathLike | None = None,
           log: bool = True) -> Path:
    """Use a copy of ``remote`` already at ``dest`` (placed by hand) if its checksum is right, else :func:`fetch` it.

    Raises:
        CorruptFileError: the copy at ``dest`` has the wrong SHA-256 (it is removed).
        DownloadError: as :func:`fetch`.
    """
    dest = Path(dest)
    if dest.is_file():
        if remote.sha256 is not None and sha256sum(dest) != remote.sha256:
            dest.unlink()
            raise CorruptFileError(f"{dest} has the wrong SHA-256: it is truncated or not the official "
                                   f"{remote.name}; it was removed, so the next run fetches it again")
        return dest
    return fetch(remote, dest, mirror, log)


def _download(url: str, tmp: Path, remote: RemoteFile, dest: Path, from_mirror: bool) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": "graphtree"})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response, open(tmp, "wb") as out:
            expected = response.headers.get("Content-Length")
            written = 0
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                written += len(chunk)
    except urllib.error.HTTPError as err:
        where = "the mirror lacks it" if from_mirror else "the official site refused it"
        raise DownloadError(
            f"could not fetch {remote.path} from {url}: HTTP {err.code} ({where}); add the file to the mirror, "
            f"use another mirror= / ${MIRROR_ENV}, or copy the file to {dest}") from None
    except http.client.HTTPException as err:  # e.g. IncompleteRead: the server closed early
        raise CorruptFileError(f"download of {remote.path} from {url} was cut short ({type(err).__name__}); "
                               f"nothing was kept, run again") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise DownloadError(
            f"could not fetch {remote.path} from {url}: {reason}. Without internet access, pass mirror= "
            f"(or set ${MIRROR_ENV}) to a local copy of the data folder, or copy the file to {dest}") from None
    if expected is not None and expected.isdigit() and int(expected) != written:
        raise CorruptFileError(
            f"download of {remote.path} from {url} was cut short ({written} of {expected} bytes); run again")


def sha256sum(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def count_lines(path: str | os.PathLike) -> int:
    """Number of non-empty lines of a text file (any encoding)."""
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def extract_zip(archive: str | os.PathLike, members: Mapping[str, str | os.PathLike],
                checksums: Mapping[str, str] | None = None,
                line_counts: Mapping[str, int] | None = None,
                remove_corrupt: bool = True) -> None:
    """Extract some members of a zip archive, all or nothing.

    Each member is unpacked to a temporary file next to its target and checked;
    only when every member passed are they renamed into place.

    Args:
        archive: The zip file.
        members: Member name inside the archive -> target path.
        checksums: Optional expected SHA-256 per member name.
        line_counts: Optional expected number of non-empty lines per member name.
        remove_corrupt: Delete ``archive`` when it proves corrupt, so the next
            run fetches it again instead of failing on the same bad file.

    Raises:
        CorruptFileError: the archive is unreadable or truncated, a member is
            missing, or a checksum or line count differs. No target is written.
    """
    archive = Path(archive)
    staged: dict[str, tuple[Path, Path]] = {}
    try:
        try:
            with zipfile.ZipFile(archive) as zf:
                names = set(zf.namelist())
                for member, target in members.items():
                    if member not in names:
                        raise CorruptFileError(f"{archive.name} has no member {member!r} (it holds "
                                               f"{sorted(names)[:8]}), so it is not the expected archive")
                    target = Path(target)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
                    staged[member] = (Path(tmp_name), target)
                    with os.fdopen(fd, "wb") as out, zf.open(member) as src:
                        shutil.copyfileobj(src, out, _CHUNK)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error) as err:
            raise CorruptFileError(f"{archive.name} is truncated or corrupt ({type(err).__name__}: {err})") from None
        for member, (tmp, _) in staged.items():
            if checksums and member in checksums and sha256sum(tmp) != checksums[member]:
                raise CorruptFileError(f"{member} inside {archive.name} has the wrong SHA-256, so the archive "
                                       f"is damaged or not the official release")
            if line_counts and member in line_counts:
                found = count_lines(tmp)
                if found != line_counts[member]:
                    raise CorruptFileError(
                        f"{member} inside {archive.name} has {found} lines, expected {line_counts[member]}, so "
                        f"the archive is truncated or not the official release")
        for tmp, target in staged.values():
            os.replace(tmp, target)
        staged.clear()
    except CorruptFileError as err:
        if remove_corrupt:
            archive.unlink(missing_ok=True)
            raise CorruptFileError(f"{err}; it was removed ({archive}), so the next run fetches it again: "
                                   f"if it came from a mirror, replace the mirror's copy") from None
        raise
    finally:
        for tmp, _ in staged.values():
            tmp.unlink(missing_ok=True)


@contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; rename it to ``dest`` on success, delete it on error.

    The temporary file lives in the same folder, so the final rename is atomic
    and a crash never leaves a partial file under the final name.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_torch_save(obj: Any, dest: str | os.PathLike) -> None:
    """``torch.save`` through :func:`atomic_path`, so a processed file is either whole or absent."""
    with atomic_path(dest) as tmp:
        torch.save(obj, tmp)


def _is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))
