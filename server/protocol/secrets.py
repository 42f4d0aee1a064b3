"""Masking of a job's secrets in the text that is stored and shown."""

from __future__ import annotations

import re

MASK = "******"
_TOP_LEVEL_SECRETS = re.compile(r"^secrets[ \t]*:.*?(?=^[^\s#]|\Z)", re.MULTILINE | re.DOTALL)


def mask_secrets(text: str) -> str:
    """Replace the whole top-level `secrets:` block with a mask, keeping everything else as written.

    Works on the text (as OpenPAI does) so comments and formatting of the rest survive.
    """
    return _TOP_LEVEL_SECRETS.sub(lambda m: f'secrets: "{MASK}"\n', text)
