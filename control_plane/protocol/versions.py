"""Version negotiation: the invocation protocol (V5..V7) and the endpoint manifest (v1..v4).

The invocation protocol version of a deployment is fixed at registration from the manifest's
`minProtocolVersion`/`maxProtocolVersion`; each invoke request names it in `content-type` and `accept`.
The manifest version is chosen by the deployment from the `accept` header of the discovery request
and echoed in the answer's `content-type`.
"""

from __future__ import annotations

import re

from control_plane.errors import UnsupportedProtocol

__all__ = [
    "DISCOVERY_ACCEPT",
    "MANIFEST_VERSIONS",
    "MAX_VERSION",
    "MIN_VERSION",
    "SUPPORTED_VERSIONS",
    "invocation_content_type",
    "manifest_content_type",
    "manifest_version_of",
    "negotiate",
]

SUPPORTED_VERSIONS: tuple[int, ...] = (5, 6, 7)
"""Invocation protocol versions Torpor speaks."""
MIN_VERSION = SUPPORTED_VERSIONS[0]
MAX_VERSION = SUPPORTED_VERSIONS[-1]

MANIFEST_VERSIONS: tuple[int, ...] = (4, 3, 2, 1)
"""Endpoint manifest versions Torpor reads, most preferred first."""


def manifest_content_type(version: int) -> str:
    """Return the media type of an endpoint manifest version.

    Args:
        version: Manifest version, e.g. 4.

    Returns:
        "application/vnd.restate.endpointmanifest.v{version}+json".
    """
    return f"application/vnd.restate.endpointmanifest.v{version}+json"


DISCOVERY_ACCEPT = ", ".join(manifest_content_type(v) for v in MANIFEST_VERSIONS)
"""`accept` header of a discovery request: manifest v4, v3, v2 and v1."""

_MANIFEST_TYPE = re.compile(r"application/vnd\.restate\.endpointmanifest\.v(\d+)\+json")


def negotiate(min_version: int, max_version: int) -> int:
    """Pick the invocation protocol version to use with a deployment.

    The choice is the highest version both sides support: `min(max_version, 7)`, provided it is not
    below `max(min_version, 5)`.

    Args:
        min_version: The deployment's `minProtocolVersion` from its manifest.
        max_version: The deployment's `maxProtocolVersion` from its manifest.

    Returns:
        The version, one of `SUPPORTED_VERSIONS`.

    Raises:
        UnsupportedProtocol: The ranges do not overlap (or the deployment's range is empty).
    """
    chosen = min(max_version, MAX_VERSION)
    if chosen >= max(min_version, MIN_VERSION):
        return chosen
    if max_version < MIN_VERSION:
        fix = (
            "upgrade the Restate SDK of the deployment to a release that speaks service protocol "
            f"V{MIN_VERSION} or newer"
        )
    elif min_version > MAX_VERSION:
        fix = f"upgrade Torpor, or use a Restate SDK release that still speaks service protocol V{MAX_VERSION} or older"
    else:
        fix = "the deployment's manifest announces an empty range; fix minProtocolVersion/maxProtocolVersion"
    raise UnsupportedProtocol(
        f"no common service protocol version: the deployment supports V{min_version}..V{max_version}, "
        f"Torpor supports V{MIN_VERSION}..V{MAX_VERSION}; {fix}"
    )


def invocation_content_type(v: int) -> str:
    """Return the `content-type`/`accept` value of invoke requests for a protocol version.

    Args:
        v: Invocation protocol version, e.g. 7.

    Returns:
        "application/vnd.restate.invocation.v{v}".
    """
    return f"application/vnd.restate.invocation.v{v}"


def manifest_version_of(content_type: str) -> int:
    """Read the manifest version from the `content-type` of a discovery answer.

    Parameters after `;` and letter case are ignored.

    Args:
        content_type: The header value, e.g. "application/vnd.restate.endpointmanifest.v4+json".

    Returns:
        The version, one of `MANIFEST_VERSIONS`.

    Raises:
        UnsupportedProtocol: Not an endpoint manifest media type, or a version Torpor does not read.
    """
    media = content_type.split(";", 1)[0].strip().lower()
    m = _MANIFEST_TYPE.fullmatch(media)
    if m is not None and int(m.group(1)) in MANIFEST_VERSIONS:
        return int(m.group(1))
    raise UnsupportedProtocol(
        f"the deployment answered discovery with content-type {content_type!r}; Torpor reads endpoint manifest "
        f"v{MANIFEST_VERSIONS[-1]}..v{MANIFEST_VERSIONS[0]} ({DISCOVERY_ACCEPT}); use a Restate SDK release "
        "that serves one of them"
    )
