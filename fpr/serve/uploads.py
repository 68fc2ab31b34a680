"""Multipart uploads streamed straight to disk, with every check done before a run is queued.

* The body is parsed as it arrives (``python_multipart``), files are written under a
  private ``.partial-*`` folder and the byte count is checked against the total limit
  on every chunk: an oversize upload stops at the limit (413), not after it.
* A name may not leave the run's folder: absolute names, ``..``, backslashes, ``~``,
  NUL and control characters are refused (400). Zip members get the same check.
* Every image is fully decoded with :func:`fpr.images.check_image` (bombs, truncated
  files, non-images -> 422) and every ``path`` / ``reference_paths`` value in the
  queries table must name an uploaded image.
* Anything that fails, including a client that disconnects, removes the folder.
"""
from __future__ import annotations

import errno
import shutil
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO
from pathlib import Path, PurePosixPath

from fpr import keys
from fpr.errors import InputError
from fpr.images import IMAGE_SUFFIXES, check_image
from fpr.tables import TABLE_SUFFIXES, read_table

TEXT_FIELDS = ("index", "run", "scorers", "scope")
FILE_FIELDS = ("queries", "images", "archive")
MAX_FIELD_BYTES = 64 * 1024
FIELD_BLANKS = " \t\r\n"  # stripped around text fields (and scorer names); other characters stay and are checked
MAX_PARTS = 100_000
MAX_NAME_CHARS = 255
MAX_PART_BYTES = 255
QUERY_COLUMNS = ("path", "identity", "group", "method")


class UploadError(Exception):
    """A rejected upload: HTTP ``status`` and a one-line ``message``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def safe_name(raw: str) -> str:
    """A client file name as a relative POSIX path inside the run folder, or UploadError(400)."""
    if raw is None or raw == "":
        raise UploadError(400, "empty file name")
    shown = raw.encode("unicode_escape").decode("ascii")[:120]
    if len(raw) > MAX_NAME_CHARS:
        raise UploadError(400, f"file name is longer than {MAX_NAME_CHARS} characters: '{shown}'")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in raw):  # NUL, newlines, other control characters
        raise UploadError(400, f"file name contains a NUL or control character: '{shown}'")
    if "\\" in raw or raw.startswith(("/", "~")) or (len(raw) > 1 and raw[1] == ":"):
        raise UploadError(400, f"file name must be relative, with '/' separators: '{shown}'")
    parts = PurePosixPath(raw).parts
    if not parts or any(p in ("..", ".", "") or p.startswith(".") for p in raw.split("/")):
        raise UploadError(400, f"file name may not contain '..', '.' or hidden parts: '{shown}'")
    if any(len(p.encode("utf-8")) > MAX_PART_BYTES for p in parts):  # what file systems store (NAME_MAX)
        raise UploadError(400, f"a part of the file name is longer than {MAX_PART_BYTES} bytes in UTF-8: '{shown}'")
    return "/".join(parts)


def _fs_refusal(name: str, exc: OSError) -> UploadError:
    """A file-system failure storing an upload as a 4xx with the uploaded name, never the server path."""
    shown = name.encode("unicode_escape").decode("ascii")[:120]
    if isinstance(exc, (FileExistsError, NotADirectoryError, IsADirectoryError)):
        return UploadError(400, f"file name '{shown}' clashes with another uploaded name (a file and a folder "
                                "of the same name); rename one of them")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return UploadError(507, "the server has no space left for this upload; retry later or send less")
    return UploadError(400, f"file name '{shown}' cannot be stored on the server "
                            f"({exc.strerror or type(exc).__name__}); rename it")


def _inside(root: Path, rel: str) -> Path:
    dest = (root / rel).resolve()
    if not dest.is_relative_to(root.resolve()):
        raise UploadError(400, f"file name leaves the upload folder: '{rel}'")
    return dest


@dataclass
class Upload:
    """What a request carried: text fields, the queries table and image names, in ``folder``."""

    folder: Path
    limit: int
    fields: dict[str, str] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)
    queries: Path | None = None
    archive: Path | None = None
    n_bytes: int = 0
    n_parts: int = 0
    text_fields: tuple[str, ...] = TEXT_FIELDS  # a benchmark submission's are its method card's
    required: tuple[str, ...] = ("index",)
    columns: tuple[str, ...] = QUERY_COLUMNS  # a benchmark submission's queries have no method column

    @classmethod
    def begin(cls, uploads_dir: Path, limit: int, **form) -> "Upload":
        folder = uploads_dir / f".partial-{keys.random_hex(32)}"
        folder.mkdir(parents=True)
        return cls(folder, limit, **form)

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def count(self, n: int) -> None:
        self.n_bytes += n
        if self.n_bytes > self.limit:
            raise UploadError(413, f"upload exceeds the limit of {self.limit // (1024 * 1024)} MB "
                                   "(FPR_MAX_UPLOAD_MB)")

    # -- targets for file parts
    def open_target(self, field_name: str, filename: str | None) -> BinaryIO:
        """Open the file a part is written to; a name the file system refuses is a 4xx (:func:`_fs_refusal`)."""
        dest = self.target(field_name, filename)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            return open(dest, "xb")  # never over an earlier part's file
        except OSError as exc:
            raise _fs_refusal(filename or field_name, exc) from None

    def write(self, out: BinaryIO, chunk: bytes) -> None:
        try:
            out.write(chunk)
        except OSError as exc:
            raise _fs_refusal(Path(out.name).name, exc) from None

    def target(self, field_name: str, filename: str | None) -> Path:
        self.n_parts += 1
        if self.n_parts > MAX_PARTS:
            raise UploadError(400, f"more than {MAX_PARTS} parts in one request")
        if field_name == "queries":
            if self.queries is not None:
                raise UploadError(400, "more than one 'queries' file")
            suffix = Path(filename or "").suffix.lower()
            self.queries = self.folder / f"queries{suffix if suffix in TABLE_SUFFIXES else '.csv'}"
            return self.queries
        if field_name == "archive":
            if self.archive is not None:
                raise UploadError(400, "more than one 'archive' file")
            self.archive = self.folder / ".archive.zip"
            return self.archive
        if field_name == "images":
            return self._image_target(safe_name(filename or ""))
        raise UploadError(400, f"unknown file field '{field_name}'; expected one of {', '.join(FILE_FIELDS)}")

    def _image_target(self, name: str) -> Path:
        if Path(name).suffix.lower() not in IMAGE_SUFFIXES:
            raise UploadError(422, f"'{name}' is not an image name (expected {', '.join(IMAGE_SUFFIXES)})")
        if name in self.images:
            raise UploadError(400, f"image '{name}' uploaded twice")
        dest = _inside(self.folder, name)
        self.images.append(name)
        return dest

    def set_field(self, name: str, value: bytes) -> None:
        if name not in self.text_fields:
            raise UploadError(400, f"unknown form field '{name}'; expected one of "
                                   f"{', '.join(self.text_fields + FILE_FIELDS)}")
        if name in self.fields:
            raise UploadError(400, f"form field '{name}' given twice")
        try:
            self.fields[name] = value.decode("utf-8").strip(FIELD_BLANKS)
        except UnicodeDecodeError:
            raise UploadError(400, f"form field '{name}' is not UTF-8 text") from None

    # -- after the body
    def extract_archive(self) -> None:
        """Unpack the zip ``archive`` (queries table at its root, images anywhere), names checked, size counted."""
        if self.archive is None:
            return
        try:
            zf = zipfile.ZipFile(self.archive)
        except (zipfile.BadZipFile, OSError):
            raise UploadError(422, "'archive' is not a readable zip file") from None
        with zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                name = safe_name(info.filename)
                if "/" not in name and Path(name).suffix.lower() in TABLE_SUFFIXES and name.startswith("queries"):
                    if self.queries is not None:
                        raise UploadError(400, "the queries table is given twice (field and archive)")
                    self.queries = self.folder / f"queries{Path(name).suffix.lower()}"
                    dest = self.queries
                else:
                    dest = self._image_target(name)
                self._unpack(zf, info, dest, name)
        self.archive.unlink()
        self.archive = None

    def _unpack(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, name: str) -> None:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            out = open(dest, "xb")
        except OSError as exc:
            raise _fs_refusal(name, exc) from None
        try:
            with zf.open(info) as src, out:
                while chunk := src.read(1 << 20):
                    self.count(len(chunk))  # the uncompressed size counts: a zip bomb stops here
                    self.write(out, chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError) as exc:  # RuntimeError: encrypted member
            raise UploadError(422, f"'archive' member '{name}' cannot be read ({type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0][:80] if str(exc) else 'unreadable'})") from None
        except OSError as exc:
            raise UploadError(422, f"'archive' member '{name}' cannot be read ({exc.strerror or type(exc).__name__})"
                              ) from None

    def check(self) -> None:
        """Fields present, the queries table readable and naming only uploaded images, every image decodable."""
        if self.queries is None:
            raise UploadError(422, "no queries table: send a 'queries' file or an 'archive' with queries.csv")
        for name in self.required:
            if not self.fields.get(name):
                raise UploadError(422, f"form field '{name}' is required")
        try:
            df = read_table(self.queries, required=self.columns, what="queries file")
        except InputError as exc:
            raise UploadError(422, _relocate(exc, self.folder, "queries")) from None
        uploaded = set(self.images)
        for i, row in enumerate(df.to_dict("records")):
            names = [row["path"]] + [p.strip() for p in str(row.get("reference_paths") or "").split(";") if p.strip()]
            for raw in names:
                name = safe_name(raw)
                if name not in uploaded:
                    raise UploadError(422, f"queries row {i + 2} names '{name}', which was not uploaded")
        for name in self.images:
            try:
                check_image(self.folder / name)
            except InputError as exc:
                raise UploadError(422, _relocate(exc, self.folder, name)) from None


def _relocate(exc: InputError, folder: Path, name: str) -> str:
    """The error's one line with the server's folder replaced by the uploaded name (no server paths leak)."""
    text = exc.one_line()
    return text.replace(str(folder / name), name).replace(str(folder) + "/", "")
