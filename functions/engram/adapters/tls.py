"""One TLS context for every httpx client of the process.

httpx builds a new ``ssl.SSLContext`` per client and loads the CA bundle into it: ~40-60 ms of CPU each
(bench/README.md, "Cold start per HTTP function"), paid at init by each OpenSearch index (memories and
conversations) and on first use by each model client. A context holds no connection state, so one,
built as httpx would build it (certifi's bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), serves them
all. httpcore sets the context's ALPN protocols on each connection: every Engram client speaks HTTP/1.1
(none asks for ``http2``), so the shared context sees the same setting from all of them.
"""

from __future__ import annotations

import ssl
from functools import cache


@cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS context for httpx clients (``httpx.Client(verify=tls_context())``)."""
    import httpx

    return httpx.create_ssl_context()
