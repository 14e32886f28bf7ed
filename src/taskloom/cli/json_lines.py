"""stream-json lines that a reader can take: each at most :data:`MAX_LINE_CHARS` long.

Only what is printed is shortened (a huge tool result, say): the model was given it all.
"""

from __future__ import annotations

import json
from typing import Any

from taskloom.untrusted import clean_text

#: Longest stream-json line written: claude-agent-sdk reads at most 1 MiB a line by default,
#: and fails the whole session on a longer one.
MAX_LINE_CHARS = 900_000


def fitted(obj: dict[str, Any]) -> str:
    """``obj`` as a line under :data:`MAX_LINE_CHARS`, its longest strings shortened."""
    for keep in (100_000, 20_000, 2_000, 200):
        line, _ = clean_text(json.dumps(_cut(obj, keep), ensure_ascii=False, separators=(",", ":")))
        if len(line) <= MAX_LINE_CHARS:
            return line
    return json.dumps({k: obj[k] for k in ("type", "session_id", "uuid") if k in obj})


def _cut(value: Any, keep: int) -> Any:
    if isinstance(value, str) and len(value) > keep:
        left = len(value) - keep
        return f"{value[:keep]}\n[{left} characters left out of this line; the model saw them]"
    if isinstance(value, dict):
        source = value.get("source")
        if value.get("type") == "image" and isinstance(source, dict):
            data = source.get("data")
            if isinstance(data, str) and len(data) > keep:
                # Cut base64 is no image at all: say what was there instead.
                what = source.get("media_type", "image")
                note = f"[{what}, {len(data):,} characters of base64 left out of this line; "
                return {"type": "text", "text": note + "the model saw it]"}
        return {k: _cut(v, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, keep) for v in value]
    return value
