"""Implementations of the ports in `control_plane.ports`: AWS (`aws/`), local development (`local/`), HTTP.

The core never imports this package; the edges (Lambda entry points, `torpor dev`, tests) build the
adapters and hand them to the core.
"""
