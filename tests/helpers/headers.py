"""Request headers that carry credentials in the wild, for tests of what an invocation keeps."""

from __future__ import annotations

CREDENTIAL_NAMES: tuple[str, ...] = (
    "x-amz-server-side-encryption-customer-key",  # S3 SSE-C key
    "x-ms-encryption-key",  # Azure Blob customer-provided key
    "x-goog-encryption-key",  # GCS customer-supplied key
    "x-functions-key",  # Azure Functions key
    "x-encryption-key",
    "x-signing-key",
    "x-master-key",
    "x-pass",
    "x-user-pin",
    "x-otp",
    "x-bearer",
    "x-refresh",
    "x-ssl-client-cert",  # nginx's client certificate
    "x-forwarded-client-cert",  # Envoy's XFCC
)
"""Names the `x-*` default once kept (issue item 12): each must be dropped by default."""
