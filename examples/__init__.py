"""Example Restate services that Torpor runs in its tests, benchmarks and docs.

Every service here is written with the official Restate Python SDK only; nothing in this
package knows about Torpor. ``examples.app`` bundles them into one ASGI app (request/response
mode) and ``python -m examples.serve`` serves that app over HTTP/1.1.
"""
