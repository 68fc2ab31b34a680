"""Uploads: names that leave the folder, oversize bodies, bombs and garbage are refused before anything is
queued; a client that disconnects mid-upload leaves nothing behind."""
from __future__ import annotations

import io
import socket
import struct
import time
import zipfile
import zlib
from pathlib import Path

import pytest

from fpr.serve.uploads import UploadError, safe_name
from tests.serve.conftest import INDEX, TOKENS, queries_csv, submission, upload_name


@pytest.mark.parametrize("raw", ["../x.png", "a/../../x.png", "/etc/passwd", "C:/x.png", "a\\..\\x.png",
                                 "x\x00.png", "~/x.png", ".hidden.png", "a//b.png", "a/./b.png", "", "x\n.png"])
def test_safe_name_refuses(raw):
    with pytest.raises(UploadError) as e:
        safe_name(raw)
    assert e.value.status == 400


def test_safe_name_keeps_relative_names():
    assert safe_name("faithful/zebra/z-1.png") == "faithful/zebra/z-1.png"
    assert safe_name("éclair 2.PNG") == "éclair 2.PNG"


def png_claiming(width: int, height: int) -> bytes:
    """A PNG header that claims a huge 1-bit image; a few bytes on disk (a decompression bomb's shape)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


def _state(server) -> tuple[list, list]:
    up = server.workspace / "serve" / "uploads"
    jobs = server.workspace / "serve" / "jobs"
    return sorted(p.name for p in up.iterdir()), sorted(p.name for p in jobs.iterdir())


@pytest.fixture
def rows(world):
    return world[1][:2]


@pytest.mark.slow
def test_traversal_names_are_400(server, rows):
    c = server.client()
    before = _state(server)
    for bad in ["../evil.png", "/tmp/evil.png", "a/../../evil.png", "x\x00y.png", "..\\evil.png"]:
        # built by hand: httpx would escape the NUL byte
        body = (b"--B\r\nContent-Disposition: form-data; name=\"index\"\r\n\r\n" + INDEX.encode() + b"\r\n"
                b"--B\r\nContent-Disposition: form-data; name=\"images\"; filename=\"" + bad.encode() + b"\"\r\n"
                b"Content-Type: image/png\r\n\r\n" + Path(rows[0]["path"]).read_bytes() + b"\r\n--B--\r\n")
        r = c.post("/v1/runs", content=body, headers={"Content-Type": "multipart/form-data; boundary=B"})
        assert r.status_code == 400, (bad, r.text)
        assert "file name" in r.json()["error"]
    # a queries table naming a server path instead of an upload
    files = submission(rows)
    files[0] = ("queries", ("queries.csv", queries_csv(rows, names=lambda p: "../../" + Path(p).name), "text/csv"))
    r = c.post("/v1/runs", data={"index": INDEX}, files=files)
    assert r.status_code == 400 and "'..'" in r.json()["error"]
    files[0] = ("queries", ("queries.csv", queries_csv(rows, names=lambda p: "not/uploaded.png"), "text/csv"))
    r = c.post("/v1/runs", data={"index": INDEX}, files=files)
    assert r.status_code == 422
    assert r.json()["error"] == "queries row 2 names 'not/uploaded.png', which was not uploaded"
    assert _state(server) == before


@pytest.mark.slow
def test_zip_slip_is_400(server, rows):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("queries.csv", queries_csv(rows))
        zf.writestr("../../outside.png", Path(rows[0]["path"]).read_bytes())
    r = server.client().post("/v1/runs", data={"index": INDEX},
                             files=[("archive", ("a.zip", buf.getvalue(), "application/zip"))])
    assert r.status_code == 400 and "'..'" in r.json()["error"]
    assert not (server.workspace / "serve" / "outside.png").exists()
    assert not (server.workspace / "outside.png").exists()


@pytest.mark.slow
def test_oversize_upload_is_413(server, rows):
    big = b"\0" * (2 * 1024 * 1024 + 10)  # FPR_MAX_UPLOAD_MB=2 in the test server
    before = _state(server)
    files = submission(rows) + [("images", ("big.png", big, "image/png"))]
    r = server.client().post("/v1/runs", data={"index": INDEX}, files=files)
    assert r.status_code == 413 and "FPR_MAX_UPLOAD_MB" in r.json()["error"]

    # No Content-Length (chunked): the limit is enforced while streaming.
    import httpx

    req = httpx.Request("POST", "/v1/runs", data={"index": INDEX}, files=files)
    body = req.read()

    def chunks():
        for i in range(0, len(body), 65536):
            yield body[i:i + 65536]

    r = server.client().post("/v1/runs", content=chunks(), headers={"Content-Type": req.headers["content-type"]})
    assert r.status_code == 413
    assert _state(server) == before


@pytest.mark.slow
def test_bombs_and_garbage_are_422(server, rows):
    c = server.client()
    before = _state(server)
    cases = {
        "bomb.png": (png_claiming(30_000, 30_000), "image declares 900000000 pixels (more than 178956970 pixels: "
                                                  "refused as a possible decompression bomb) (bomb.png)"),
        "noise.png": (b"this is not an image at all" * 10, "not a readable image (unknown format) (noise.png)"),
        "cut.png": (Path(rows[0]["path"]).read_bytes()[:120], "image is truncated or corrupt"),
        "empty.png": (b"", "image file is empty (0 bytes) (empty.png)"),
    }
    for name, (data, message) in cases.items():
        bad_rows = [dict(rows[0], path=f"/x/y/{name}")] + rows[1:]
        files = [("queries", ("queries.csv", queries_csv(bad_rows, names=lambda p: Path(p).name if p.startswith("/x")
                                                         else upload_name(p)), "text/csv")),
                 ("images", (name, data, "image/png"))]
        files += [("images", (upload_name(r["path"]), Path(r["path"]).read_bytes(), "image/png")) for r in rows[1:]]
        r = c.post("/v1/runs", data={"index": INDEX}, files=files)
        assert r.status_code == 422, (name, r.text)
        assert r.json()["error"].startswith(message), r.json()
        assert str(server.workspace) not in r.json()["error"]
    r = c.post("/v1/runs", data={"index": INDEX},
               files=[("queries", ("queries.csv", b"\x00\x01garbage", "text/csv"))] + submission(rows)[1:])
    assert r.status_code == 422 and "queries file lacks required column(s)" in r.json()["error"]
    r = c.post("/v1/runs", data={"index": INDEX},
               files=[("archive", ("a.zip", b"PK\x03\x04 not really", "application/zip"))])
    assert r.status_code == 422 and r.json()["error"] == "'archive' is not a readable zip file"
    r = c.post("/v1/runs", data={"index": INDEX}, files=[("images", ("a.exe", b"MZ", "application/x-dosexec"))])
    assert r.status_code == 422 and "is not an image name" in r.json()["error"]
    r = c.post("/v1/runs", content=b"index=x", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415
    r = c.post("/v1/runs", data={"index": "no-such-index"}, files=submission(rows))
    assert r.status_code == 404 and r.json()["error"].startswith("no index named 'no-such-index'")
    r = c.post("/v1/runs", data={"index": INDEX, "scope": "planet"}, files=submission(rows))
    assert r.status_code == 422 and r.json()["error"].startswith("unknown scope 'planet'")
    assert _state(server) == before


@pytest.mark.slow
def test_client_disconnecting_mid_upload_leaves_nothing(server, rows):
    before = _state(server)
    host, port = server.url.removeprefix("http://").split(":")
    boundary = "fprtestboundary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"index\"\r\n\r\n{INDEX}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"images\"; filename=\"a/b.png\"\r\n"
            "Content-Type: image/png\r\n\r\n").encode() + b"\x89PNG" + b"\0" * 200_000
    with socket.create_connection((host, int(port))) as s:
        s.sendall((f"POST /v1/runs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKENS['alice']}\r\n"
                   f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                   f"Content-Length: 1500000\r\n\r\n").encode() + head)
        deadline = time.monotonic() + 10
        partial = server.workspace / "serve" / "uploads"
        while not list(partial.glob(".partial-*/a/b.png")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(partial.glob(".partial-*/a/b.png")), "the upload never reached the disk"
    deadline = time.monotonic() + 10
    while _state(server) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(server) == before
    assert '"event": "upload_aborted"' in server.log.read_text()
