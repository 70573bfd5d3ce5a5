"""Every environment variable the app reads goes through ui.settings."""
from __future__ import annotations

import re
from pathlib import Path

from ui import settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_environment():
    assert settings.read({}) == settings.Settings()
    s = settings.read({"ATTN_DEVICE": "cuda", "ATTN_QUEUE_SIZE": "5", "ATTN_TORCH_THREADS": "3",
                       "SPACES_ZERO_GPU": "true", "GRADIO_SERVER_PORT": "8001", "ATTN_MODEL_CONCURRENCY": "x"})
    assert (s.device, s.queue_size, s.torch_threads, s.zero_gpu, s.port) == ("cuda", 5, 3, True, 8001)
    assert s.model_concurrency == 1  # not a number: the default, not a crash
    assert settings.read({"ATTN_QUEUE_SIZE": "0"}).queue_size == 1


def test_no_other_module_of_the_app_reads_the_environment():
    readers = [p.relative_to(ROOT).as_posix() for p in [ROOT / "app.py", *sorted((ROOT / "ui").rglob("*.py"))]
               if re.search(r"os\.environ|os\.getenv", p.read_text(encoding="utf-8"))]
    assert readers == ["ui/settings.py"]
