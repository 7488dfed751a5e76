"""What a child is given as `context=`, host side: the blob the parent's kernel packed
(kernel_ext.child_context), checked and kept as bytes. The host never unpickles it; the
child's kernel decodes it into its variable `context` (rlm.app.inputs.put_context).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from kernel_ext.child_context import MAGIC, PACKED, to_blob, too_big
from rlm.errors import RlmError


def context_blob(param: Any, bound: int, method: str = "rlm_spawn") -> bytes | None:
    """The blob a spawn request's `context` holds (None: no context). A packed context is
    base64 of at most `bound` bytes (the user's `child_context_max_bytes`: the kernel checks
    it too, but the kernel is not trusted); any other value is plain JSON data (a cell that
    called the bridge itself), packed here."""
    if param is None:
        return None
    if isinstance(param, dict) and PACKED in param:
        text, what = param[PACKED], str(param.get("type") or "value")[:200]
        if not isinstance(text, str):
            raise RlmError(f"{method}(context=...): the packed context is not base64 text")
        if len(text) * 3 // 4 > bound + 3:
            raise RlmError(too_big(what, len(text) * 3 // 4, bound))
        try:
            blob = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as e:
            raise RlmError(f"{method}(context=...): the packed context is not base64: {e}") \
                from None
        if len(blob) > bound:
            raise RlmError(too_big(what, len(blob), bound))
        if not blob.startswith(MAGIC):
            raise RlmError(f"{method}(context=...): not a context packed by kernel_ext")
        return blob
    try:
        return to_blob(param, bound)
    except (TypeError, ValueError) as e:
        raise RlmError(str(e)) from None
