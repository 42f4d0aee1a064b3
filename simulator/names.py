"""Names made from what users typed, safe as Docker object names and as single path segments."""

from __future__ import annotations

import hashlib
import re


def safe(text: str) -> str:
    """`text` when it is already a plain name; otherwise its plain characters (never leading
    dots, so never `.` or `..`) followed by a short hash of it, so two names never meet."""
    cleaned = re.sub(r"[^a-zA-Z0-9_.-]", "", text).lstrip(".")[:40] or "x"
    if cleaned == text:
        return cleaned
    return f"{cleaned}-{hashlib.sha1(text.encode()).hexdigest()[:6]}"
