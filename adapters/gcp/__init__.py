"""Google Cloud adapters: the Cloud Run invoker (Google ID tokens, service names resolved to URLs).

Importing this package imports no Google library: google-auth and google-cloud-run (the `gcp` extra,
`pip install 'torpor[gcp]'`) are imported on first use.
"""

from adapters.gcp.cloud_run import CloudRunInvoker, fetch_google_id_token

__all__ = ["CloudRunInvoker", "fetch_google_id_token"]
