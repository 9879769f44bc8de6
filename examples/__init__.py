"""Example Restate services that Torpor runs in its docs, tests and benchmarks.

The modules here are the tutorial services the README shows; ``examples.fixtures`` holds the
services that exist only for tests and benchmarks.

Every service here is written with the official Restate Python SDK only; nothing in this
package knows about Torpor. ``examples.app`` bundles them into one ASGI app (request/response
mode) and ``python -m examples.serve`` serves that app over HTTP/1.1.
"""
