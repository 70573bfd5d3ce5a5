"""Figures to files: standalone HTML always, PNG where Kaleido and a Chrome/Chromium are installed.

User text inside figures is already escaped by the figure builders, so these functions only serialise.
"""
from __future__ import annotations

import threading
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_HELP = ("PNG export needs the `kaleido` package and a Chrome or Chromium browser on the server "
            "(`pip install kaleido` and `apt-get install chromium`). The HTML download works everywhere.")
# Each PNG render starts a headless browser; one at a time keeps memory bounded under load.
_PNG_LOCK = threading.Lock()


class ImageExportUnavailable(RuntimeError):
    """Raised when a PNG cannot be rendered on this machine; the message says what is missing."""


def figure_html(fig, path: Path) -> Path:
    """Standalone HTML with plotly.js inline, so the file works offline."""
    path = Path(path)
    path.write_text(fig.to_html(include_plotlyjs=True, full_html=True), encoding="utf-8")
    return path


def figure_png(fig, path: Path, scale: float = 2.0) -> Path:
    """Render `fig` to PNG with Kaleido. Raises ImageExportUnavailable (never a raw traceback) when it cannot."""
    try:
        import kaleido  # noqa: F401  (checked here so the error names the missing piece)
    except ImportError as e:
        raise ImageExportUnavailable(f"Kaleido is not installed. {PNG_HELP}") from e
    width = fig.layout.width or 900
    height = fig.layout.height or 600
    try:
        with _PNG_LOCK:
            data = fig.to_image(format="png", width=width, height=height, scale=scale, validate=False)
    except Exception as e:  # kaleido reports a missing browser with several exception types
        raise ImageExportUnavailable(f"Could not render PNG ({type(e).__name__}: {str(e)[:200]}). {PNG_HELP}") from e
    if not data.startswith(PNG_MAGIC):
        raise ImageExportUnavailable(f"Kaleido returned something that is not a PNG. {PNG_HELP}")
    path = Path(path)
    path.write_bytes(data)
    return path

