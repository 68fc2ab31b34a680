"""What does the HTML report look like on a laptop and on a phone? (``python benchmarks/report_screens.py
REPORT.html [--out benchmarks/results/report-screens] [--name after]``)

Opens the report in headless Chromium (no network) at 1440 and 390 CSS pixels wide and, per width, measures
the page's content width (``document.documentElement.scrollWidth``: more than the window is a horizontal
scroll), the widest element that sticks out of the window (not counting those inside a box that scrolls on its own), what the first screen shows (the first section headings and
the first cards' methods), and saves a PNG of the first screen. Prints one Markdown row per width.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.browser import Browser, find_chromium  # noqa: E402

WIDTHS = (1440, 390)

# the widest element wider than the window (tag.class and its right edge), and the order of the page
PROBE = """(() => {
  const vw = document.documentElement.clientWidth;
  let worst = null;
  // an element inside a box that scrolls on its own (a wide table) does not widen the page
  const boxed = el => { for (let p = el.parentElement; p; p = p.parentElement) {
    if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX) && p !== document.body) return true; }
    return false; };
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (boxed(el)) continue;
    if (r.right > vw + 1 && (!worst || r.right > worst.right)) worst = {tag: el.tagName.toLowerCase() +
      (el.className && el.className.baseVal === undefined ? '.' + el.className : ''), right: Math.round(r.right)};
  }
  const heads = Array.from(document.querySelectorAll('h2')).map(h => h.textContent);
  const cards = Array.from(document.querySelectorAll('.card')).filter(c => c.offsetParent !== null)
    .slice(0, 5).map(c => c.dataset.method);
  const meta = document.querySelector('meta[name=viewport]');
  return {viewport: meta ? meta.content : null, client: vw, scroll: document.documentElement.scrollWidth, worst: worst, sections: heads,
          first_cards: cards};
})()"""


SECTIONS = ("sim-map", "queries")


def shrink(path: Path, max_width: int = 720, colours: int = 32) -> Path:
    """A small PNG to commit: at most ``max_width`` px wide, a palette of ``colours``."""
    from PIL import Image

    im = Image.open(path).convert("RGB")
    if im.width > max_width:
        im = im.resize((max_width, round(im.height * max_width / im.width)), Image.LANCZOS)
    im.quantize(colours).save(path, optimize=True)
    return path


def measure(report: Path, out: Path, name: str) -> list[dict]:
    exe = find_chromium()
    if exe is None:
        raise SystemExit("report_screens: chromium not found; install it (apt-get install chromium)")
    rows = []
    for width in WIDTHS:
        with Browser(exe, width=width, height=900) as b:
            b.open(report)
            # a desktop window of this width: what a phone shows when the page has a viewport meta (without
            # one a phone lays the page out 980 px wide and shrinks it: 'viewport' says which)
            b.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)
            got = b.eval(PROBE)
            shot = b.screenshot(out / f"{name}-{width}.png")
            shots = [shrink(shot)]
            for section in SECTIONS:  # the charts and the first cards, where the page has them
                if b.eval(f"!!document.getElementById({section!r})"):
                    b.eval(f"document.getElementById({section!r}).scrollIntoView()")
                    shots.append(shrink(b.screenshot(out / f"{name}-{width}-{section}.png")))
            rows.append({"width": width, **got, "screenshot": str(shot), "screenshots": [str(p) for p in shots],
                         "errors": b.errors})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/report-screens"))
    ap.add_argument("--name", default="report")
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = measure(args.report, args.out, args.name)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| window px | viewport meta | content px (scrollWidth) | widest overflow | sections | first cards | "
          "screenshot |")
    print("|---:|---|---:|---|---|---|---|")
    for r in rows:
        worst = f"{r['worst']['tag']} to {r['worst']['right']} px" if r["worst"] else "none"
        print(f"| {r['width']} | {r['viewport'] or 'none'} | {r['scroll']} | {worst} | {', '.join(r['sections'])} | "
              f"{', '.join(r['first_cards'])} | {Path(r['screenshot']).name} |")


if __name__ == "__main__":
    main()
