"""A headless Chromium driven over the DevTools protocol (tests and benchmarks only).

No sandbox, no GPU, and no network: every host name resolves to nothing, and the
report's own Content-Security-Policy forbids any fetch anyway.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless browser with one page; collects console errors and uncaught exceptions."""

    def __init__(self, exe: str, *, width: int = 1280, height: int = 900, timeout: float = 60.0):
        import websocket  # websocket-client, from the test extra

        self.profile = tempfile.mkdtemp(prefix="fpr-chromium-")
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={self.profile}",
             "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = self._port(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5).read())
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("chromium opened no page")
            time.sleep(0.1)
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout,
                                              suppress_origin=True)
        self._id = 0
        self.errors: list[str] = []
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _port(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            if "DevTools listening on ws://" in line:
                return int(line.split("ws://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        raise RuntimeError("chromium did not report its DevTools port")

    def _record(self, msg: dict) -> None:
        method = msg.get("method")
        params = msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                      for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            self.errors.append("exception: " + str(d.get("exception", {}).get("description", d.get("text"))))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append("log: " + params["entry"].get("text", ""))
        if method:
            self.events.append(msg)

    def call(self, method: str, **params) -> dict:
        self._id += 1
        my = self._id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._record(msg)

    def wait_event(self, method: str, timeout: float = 60.0) -> dict:
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self._record(msg)
            if msg.get("method") == method:
                self.events.remove(msg)
                return msg
        raise TimeoutError(method)

    def eval(self, expression: str, *, await_promise: bool = False):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression[:60]}: {res['exceptionDetails'].get('text')}")
        return res.get("result", {}).get("value")

    def open(self, path: Path, *, ready: str = "window.fprReady === true", timeout: float = 60.0) -> float:
        """Navigate to a local file; return seconds until ``ready`` holds (after the load event)."""
        self.events.clear()
        start = time.perf_counter()
        self.call("Page.navigate", url=Path(path).resolve().as_uri())
        self.wait_event("Page.loadEventFired", timeout)
        while not self.eval(f"!!({ready})"):
            if time.perf_counter() - start > timeout:
                raise TimeoutError(f"page not ready: {ready}")
            time.sleep(0.01)
        return time.perf_counter() - start

    def screenshot(self, out: Path, *, full_page: bool = False) -> Path:
        params = {"format": "png"}
        if full_page:
            m = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": m["width"], "height": min(m["height"], 6000), "scale": 1})
        data = self.call("Page.captureScreenshot", **params)["data"]
        out = Path(out)
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def in_ci() -> bool:
    return bool(os.environ.get("CI"))
