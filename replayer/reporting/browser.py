"""Headless Chromium for HTML reports: the rendered DOM (tests, benchmark) and PNG screenshots (``make demo``).

Uses the system's Chromium (Debian package ``chromium``: ``apt-get install -y
chromium``) in headless mode with everything that would reach the network
turned off, and a throw-away profile directory.  The page's scripts get a
virtual time budget so plotly finishes drawing before the DOM is dumped or
the screenshot is taken.

Chromium command-line switches: ``--headless``, ``--dump-dom``,
``--screenshot``, ``--window-size``, ``--virtual-time-budget`` (documented
in Chromium's headless mode docs and ``content_switches``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import TracekitError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_QUIET_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    "--disable-dev-shm-usage",
)


class BrowserError(TracekitError):
    """Chromium is missing, failed, or timed out."""


@dataclass(frozen=True)
class Rendered:
    """A page as Chromium rendered it: the DOM after scripts ran and the wall time of the whole run (s)."""

    dom: str
    wall_s: float


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable (``$TRACEKIT_CHROMIUM`` first), or None."""
    env = os.environ.get("TRACEKIT_CHROMIUM")
    if env:
        return env if os.path.isfile(env) else None
    if os.path.isfile("/usr/bin/chromium"):
        return "/usr/bin/chromium"
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(args: list[str], html_path: Path, timeout_s: float) -> tuple[subprocess.CompletedProcess, float]:
    exe = find_chromium()
    if exe is None:
        raise BrowserError("no Chromium found (install it: apt-get install -y chromium, or set TRACEKIT_CHROMIUM)")
    if not html_path.is_file():
        raise BrowserError("no such HTML file", path=html_path)
    with tempfile.TemporaryDirectory(prefix="tracekit-chromium-") as profile:
        cmd = [exe, *_QUIET_FLAGS, f"--user-data-dir={profile}", *args, html_path.resolve().as_uri()]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise BrowserError(f"Chromium did not finish within {timeout_s:g} s", path=html_path) from None
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise BrowserError(f"Chromium exited with {proc.returncode}: {' | '.join(tail)}", path=html_path)
    return proc, wall


def render_dom(html_path: str | os.PathLike[str], *, budget_ms: int = 10_000, timeout_s: float = 60.0) -> Rendered:
    """Load ``html_path`` in headless Chromium, let its scripts run, and return the serialised DOM.

    ``budget_ms`` is Chromium's virtual time budget: timers run until the
    page is idle or this much virtual time passed.

    Raises:
        BrowserError: no Chromium, it failed, or it ran longer than ``timeout_s``.
    """
    proc, wall = _run([f"--virtual-time-budget={budget_ms}", "--dump-dom"], Path(html_path), timeout_s)
    return Rendered(proc.stdout.decode("utf-8", errors="replace"), wall)


def screenshot_html(
    html_path: str | os.PathLike[str],
    png_path: str | os.PathLike[str],
    *,
    width: int = 1400,
    height: int = 2400,
    budget_ms: int = 10_000,
    timeout_s: float = 60.0,
) -> Path:
    """Save a PNG screenshot (``width`` x ``height`` CSS px, top of the page) of ``html_path``.

    The PNG is written next to ``png_path`` and renamed onto it.

    Raises:
        BrowserError: no Chromium, it failed, timed out, or wrote no image.
    """
    target = Path(png_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".png", dir=target.parent)
    from tracekit.io import _UMASK

    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600 and Chromium writes into the file: use the umask
    os.close(fd)
    try:
        _run(
            [f"--window-size={width},{height}", f"--virtual-time-budget={budget_ms}", f"--screenshot={tmp}"],
            Path(html_path),
            timeout_s,
        )
        if os.path.getsize(tmp) == 0:
            raise BrowserError("Chromium wrote an empty screenshot", path=html_path)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


__all__ = ["BrowserError", "Rendered", "find_chromium", "render_dom", "screenshot_html"]
