"""Small derived facts kept between runs in deltachip's cache, each checked before use.

Takes: a record's file, its kind (what it holds), and the key of what it derives from
(a digest of the inputs, or facts about them the caller checks). Gives: :func:`read` (the
body, or why it cannot be used: absent, damaged or stale) and :func:`write` (atomic: a
temporary beside it renamed into place, so a reader sees the old record or the new one,
never half of one). A record only spares work: one that is damaged (not JSON, another
format, a body whose sha256 is not the one it records: a file cut short or changed on the
disk) or stale (made for another key) is never used; the caller makes the fact again,
says so on stderr (:func:`say`) and writes it anew. A record that cannot be written (a
read-only cache, a full disk) is skipped silently: the next run makes the fact again.

The file is one JSON object: ``{"format": "deltachip-record", "version": 1, "kind": KIND,
"key": KEY, "sha256": digest of BODY, "body": BODY}``, ``BODY`` the body as JSON text.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

FORMAT, VERSION = "deltachip-record", 1
#: the most bytes read of a record
LIMIT = 64 << 20


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read(path: Path, kind: str, key: Any) -> tuple[Any, str | None]:
    """``(body, None)`` when the record at ``path`` is whole, of ``kind`` and made for
    ``key``; ``(None, None)`` when there is none; ``(None, why)`` when it is damaged or stale
    (``why`` in words: ``damaged (…)``, ``stale (…)``)."""
    from common.inputs import InputTooLarge, read_bounded
    try:
        raw = read_bounded(path, LIMIT, f"a deltachip cache record ({kind})")
    except FileNotFoundError:
        return None, None
    except (OSError, InputTooLarge) as e:
        return None, f"damaged (it cannot be read: {e})"
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError) as e:
        return None, f"damaged (not JSON: {e})"
    if not isinstance(rec, dict) or rec.get("format") != FORMAT \
            or not isinstance(rec.get("body"), str) or not isinstance(rec.get("sha256"), str):
        return None, f"damaged (not a {FORMAT})"
    if rec.get("version") != VERSION or rec.get("kind") != kind:
        return None, (f"stale (a {rec.get('kind')!r} record of version {rec.get('version')!r}, "
                      f"not {kind!r} version {VERSION})")
    if _digest(rec["body"]) != rec["sha256"]:
        return None, "damaged (its body does not match its sha256 digest)"
    if rec.get("key") != key:
        return None, "stale (made for other inputs)"
    try:
        return json.loads(rec["body"]), None
    except (ValueError, RecursionError) as e:
        return None, f"damaged (its body is not JSON: {e})"


def write(path: Path, kind: str, key: Any, body: Any) -> bool:
    """Write the record of ``body`` (JSON-able) for ``key`` at ``path``, atomically; False
    when it could not be written (nothing is left behind)."""
    from common.outputs import temp_name_prefix
    text = json.dumps(body, separators=(",", ":"))
    rec = {"format": FORMAT, "version": VERSION, "kind": kind, "key": key,
           "sha256": _digest(text), "body": text}
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=temp_name_prefix(path), suffix=".tmp",
                                   dir=path.parent)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(rec) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return True
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        return False


def say(what: str, path: Path, why: str) -> None:
    """The stderr line for a record that cannot be used and is made again."""
    print(f"deltachip: {what} at {path} is {why}; making it again", file=sys.stderr,
          flush=True)


def cached(path: Path, kind: str, key: Any, what: str, make: Any) -> Any:
    """The body of the record at ``path`` when it can be used, else ``make()``, written as
    the record (a damaged or stale one named on stderr first, as ``what``)."""
    body, why = read(path, kind, key)
    if why is None and body is not None:
        return body
    if why is not None:
        say(what, path, why)
    body = make()
    write(path, kind, key, body)
    return body
