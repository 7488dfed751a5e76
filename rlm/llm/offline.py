"""litellm's offline settings, applied when rlm.llm is imported (before any path to
litellm: the seam, the local provider). Without them litellm fetches its model cost map
from the network at import."""

from __future__ import annotations

import os

OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOG": "ERROR",
}


def apply() -> None:
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


apply()
