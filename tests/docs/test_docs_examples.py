"""Every command and Python snippet of README.md and docs/*.md, executed (issue #27: docs that cannot drift).

Shell blocks run under ``bash -eo pipefail`` and Python blocks under this interpreter, in a copy of the
prepared workspace (tests/docs/conftest.py), one copy per document, blocks in document order. A failure
names the document line. A block runs exactly as written or is skipped with its reason (:func:`why_skipped`):
its ``<!-- docs-test: skip (reason) -->`` marker (network, GPU, a dataset), a name in UNAVAILABLE (weights that
need a download), a judge endpoint, or a serving port in use here. Nothing in a block is rewritten.
"""
from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.conftest import ROOT
from tests.docs.extract import Block, all_blocks, console_commands

pytestmark = pytest.mark.docs

# A block that names one of these runs nothing here: it is skipped with the reason (issue #33: the docs test
# once ran fpr-world-v3 where a block said miewid-msv2, hiding that the documented command needs a download).
UNAVAILABLE: tuple[tuple[str, str], ...] = (
    ("miewid-msv2", "MiewID's weights need a download (docs/real-data.md) and this machine is offline"),
)
TIMEOUT_S = 420
# A documented ``fpr ... serve`` line runs in the background, on its own host and port, until the block ends.
SERVE_LINE = re.compile(r"^(?P<cmd>[^#\n]*\bfpr\b[^#\n]*\sserve\s[^#\n]*?)\s*(?P<comment>#.*)?$", re.MULTILINE)
BLOCKS = all_blocks(ROOT)
RUN = [b for b in BLOCKS if b.kind != "output"]


def why_skipped(block: Block) -> str | None:
    """Why a block cannot run here as written (its marker's reason, a name that needs a download, a judge
    endpoint this machine has not, a run or gallery only a block skipped for a download makes), or None: it
    runs, exactly as written (nothing in it is rewritten)."""
    return SKIPPED.get(block.id)


def _own_reason(block: Block) -> str | None:
    if block.skip_marker:
        return block.skip_reason or "marked docs-test: skip"
    for name, why in UNAVAILABLE:
        if name in block.text:
            return f"names {name}: {why}"
    judge = re.search(r"OPENAI_BASE_URL=(\S+)", block.text)
    if judge:
        return f"needs the judge endpoint {judge.group(1)} the block names (the judges' tests use a loopback judge)"
    port = re.search(r"\bserve\b.*--port (\d+)", block.text)
    if port and not _port_free(int(port.group(1))):
        return f"the block serves on port {port.group(1)}, which is in use on this machine"
    return None


MADE = re.compile(r"--(?:run|name) ([\w@.-]+)")  # the runs, galleries and indices a block stores


def _skipped(blocks: list[Block]) -> dict[str, str]:
    """Each skipped block's reason, in reading order: a block that uses a run, gallery or index that only a block
    skipped for a download would store is skipped too, naming that block (it would fail, not test the docs)."""
    out: dict[str, str] = {}
    missing: dict[str, str] = {}  # name -> the skipped block that stores it
    for b in blocks:
        why = _own_reason(b)
        if why is None:
            used = [n for n in missing if re.search(rf"(?<![\w.@-]){re.escape(n)}(?![\w@-])", b.text)]
            if used:
                why = f"uses {used[0]}, which {missing[used[0]]} stores (skipped there)"
        if why is None:
            continue
        out[b.id] = why
        if not b.skip_marker:  # a download or endpoint this machine lacks: what the block stores does not exist
            for name in MADE.findall(b.text):
                missing.setdefault(name, b.id)
    return out


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


SKIPPED = _skipped(RUN)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serving(script: str) -> str:
    """A documented ``fpr ... serve`` line started in the background (its host and port as written), ready
    (every worker) before the next line runs; stopped when the block ends. Only lines are appended after the
    server's own line (on it, so failures keep their line numbers): the block's text is unchanged."""
    m = SERVE_LINE.search(script)
    if not m:
        return script
    port = re.search(r"--port (\d+)", m.group("cmd"))
    health = f"http://127.0.0.1:{port.group(1) if port else 8080}/v1/health"
    # on exit: stop the server, wait for it, and keep the block's own exit status (not the server's 143)
    wait = (f'trap \'rc=$?; trap - ERR; kill $FPR_DOCS_SERVER 2>/dev/null; '
            f'wait $FPR_DOCS_SERVER || true; exit $rc\' EXIT; '
            f'for _ in $(seq 600); do '
            f'curl -sf {health} | grep -q \'"workers_ready": *[1-9]\' && break; '
            f'kill -0 $FPR_DOCS_SERVER || exit 9; sleep 0.5; done')
    return SERVE_LINE.sub(lambda m: f"{m.group('cmd')} & FPR_DOCS_SERVER=$!; {wait}", script)


def _tail(text: str, n: int = 40) -> str:
    return "\n".join(text.splitlines()[-n:])


def _run_shell(block: Block, workdir: Path, env: dict) -> str:
    body = console_commands(block.text) if block.lang == "console" else block.text
    # line 1 of the script is this header, so the block's line k is the script's line k + 1
    header = "set -eo pipefail; trap 'echo \"docs-test: failed at script line $LINENO\" >&2' ERR\n"
    r = subprocess.run(["bash", "-c", header + _serving(body)], cwd=workdir, env=env, capture_output=True,
                       text=True, timeout=TIMEOUT_S, check=False)
    if r.returncode != 0:
        m = re.search(r"docs-test: failed at script line (\d+)", r.stderr)
        where = f"{block.path}:{block.doc_line(int(m.group(1)) - 1)}" if m else block.id
        pytest.fail(f"{where}: exit {r.returncode}\n--- stdout\n{_tail(r.stdout)}\n--- stderr\n{_tail(r.stderr)}",
                    pytrace=False)
    return r.stdout


def _run_python(block: Block, workdir: Path, env: dict) -> str:
    script = workdir / f"docs-block-{block.line}.py"
    script.write_text(block.text)
    r = subprocess.run([sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT_S, check=False)
    if r.returncode != 0:
        lines = re.findall(rf'File "{re.escape(str(script))}", line (\d+)', r.stderr)
        where = f"{block.path}:{block.doc_line(int(lines[-1]))}" if lines else block.id
        pytest.fail(f"{where}: exit {r.returncode}\n--- stderr\n{_tail(r.stderr)}", pytrace=False)
    return r.stdout


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_docs_example_runs(block: Block, docs_world, workdirs):
    why = why_skipped(block)
    if why:
        pytest.skip(f"{block.id}: {why}")
    workdir = workdirs(block.path)
    env = docs_world.env(workdir)
    if block.kind == "python":
        _run_python(block, workdir, env)
    else:
        _run_shell(block, workdir, env)
