"""Screenshots of the web UI for docs/how-to/ui.md: the same floe and headless Chromium as
tests/test_ui_browser.py (tests/ui_stack.py), each page saved as docs/img/ui-*.png.

Usage (from the repository's root): .venv/bin/python scripts/docs/ui_screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from ui_stack import BUSY_TABLE, browser_missing, chromium, served_floe  # noqa: E402

PAGES = {
    "ui-groups.png": "/",
    "ui-tables.png": "/tables",
    "ui-table.png": f"/tables/{BUSY_TABLE}",
    "ui-queue.png": "/queue",
}
"""Each screenshot's file, in docs/img/, and the page it shows."""


def main() -> int:
    """Serve a floe, photograph each page at its full height; 1 when no browser is installed."""
    missing = browser_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    out = ROOT / "docs" / "img"
    with tempfile.TemporaryDirectory() as workdir, served_floe(Path(workdir)) as floe, chromium() as driver:
        for name, path in PAGES.items():
            driver.set_window_size(1280, 600)  # the page's own height, not the last page's
            driver.get(floe.url + path)
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1280, min(int(height) + 120, 2400))
            driver.save_screenshot(str(out / name))
            print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
