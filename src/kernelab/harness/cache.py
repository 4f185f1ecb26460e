"""The user's cache directory: measured ceilings and bench records live here.

$KERNELAB_CACHE wins; otherwise ~/.cache/kernelab (XDG_CACHE_HOME is honoured). The folder
is created on first use, never at import time.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The folder kernelab caches into, created if it does not exist yet."""
    override = os.environ.get("KERNELAB_CACHE")
    if override:
        path = Path(override).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base).expanduser() / "kernelab"
    path.mkdir(parents=True, exist_ok=True)
    return path


def safe_name(text: str) -> str:
    """`text` made safe for a file name: "NVIDIA H200 / 580.65" -> "nvidia-h200-580.65"."""
    kept = "".join(ch.lower() if ch.isalnum() or ch in ".-_" else "-" for ch in text.strip())
    while "--" in kept:
        kept = kept.replace("--", "-")
    return kept.strip("-") or "unknown"
