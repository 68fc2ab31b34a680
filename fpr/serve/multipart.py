"""Stream a multipart body into an :class:`~fpr.serve.uploads.Upload` as it arrives (bounded, never buffered)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from fpr.serve.uploads import MAX_FIELD_BYTES, Upload, UploadError


@dataclass
class _Part:
    """The part being parsed: its headers, then either an open file or a text field's bytes."""

    headers: dict[bytes, bytes] = field(default_factory=dict)
    hname: bytes = b""
    hval: bytes = b""
    field: str | None = None
    buf: bytearray | None = None
    out: BinaryIO | None = None

    def close(self) -> None:
        if self.out is not None:
            self.out.close()
            self.out = None


def boundary_of(content_type: str | None) -> bytes | None:
    ctype, params = parse_options_header(content_type)
    return params.get(b"boundary") if ctype == b"multipart/form-data" else None


def _callbacks(up: Upload, holder: list[_Part]) -> dict:
    def begin():
        holder[0] = _Part()

    def header_field(data, start, end):
        holder[0].hname += data[start:end]

    def header_value(data, start, end):
        holder[0].hval += data[start:end]

    def header_end():
        p = holder[0]
        p.headers[p.hname.strip().lower()] = p.hval.strip()
        p.hname, p.hval = b"", b""

    def headers_finished():
        p = holder[0]
        disp, opts = parse_options_header(p.headers.get(b"content-disposition", b""))
        if disp != b"form-data" or b"name" not in opts:
            raise UploadError(400, "every multipart part needs 'Content-Disposition: form-data; name=...'")
        name = opts[b"name"].decode("utf-8", "replace")
        if b"filename" in opts:
            try:
                filename = opts[b"filename"].decode("utf-8")
            except UnicodeDecodeError:
                raise UploadError(400, "file name is not UTF-8") from None
            p.out = up.open_target(name, filename)
        else:
            p.field, p.buf = name, bytearray()

    def data(chunk_src, start, end):
        p, chunk = holder[0], chunk_src[start:end]
        if p.out is not None:
            up.write(p.out, chunk)
        elif p.buf is not None:
            p.buf += chunk
            if len(p.buf) > MAX_FIELD_BYTES:
                raise UploadError(413, f"form field '{p.field}' is longer than {MAX_FIELD_BYTES} bytes")

    def part_end():
        p = holder[0]
        if p.out is not None:
            p.close()
        elif p.field is not None:
            up.set_field(p.field, bytes(p.buf or b""))
            p.field, p.buf = None, None

    return {"on_part_begin": begin, "on_header_field": header_field, "on_header_value": header_value,
            "on_header_end": header_end, "on_headers_finished": headers_finished, "on_part_data": data,
            "on_part_end": part_end}


async def receive(request: Request, up: Upload, boundary: bytes) -> None:
    """Parse the body into ``up`` chunk by chunk, counting every byte against its limit."""
    holder = [_Part()]
    parser = MultipartParser(boundary, _callbacks(up, holder))
    try:
        async for chunk in request.stream():
            up.count(len(chunk))
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as exc:
        raise UploadError(400, f"malformed multipart body ({str(exc).splitlines()[0][:200]})") from None
    finally:
        holder[0].close()
