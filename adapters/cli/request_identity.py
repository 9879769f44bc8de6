"""`torpor request-identity`: the key Torpor signs requests to deployments with.

    torpor request-identity generate key.pem     # a new Ed25519 key (PEM, mode 0600); prints its public key
    torpor request-identity public-key key.pem   # prints publickeyv1_… for the deployments' identity_keys

The key file is what `torpor dev --request-identity-key-file`, `TORPOR_REQUEST_IDENTITY_KEY_FILE` and the
AWS stack's SSM parameter or secret hold (see README "Signed requests").
"""

from __future__ import annotations

import os

import click

from adapters.request_identity import signer_from_file
from control_plane.errors import TorporError


@click.group("request-identity")
def request_identity() -> None:
    """The Ed25519 key Torpor signs requests to deployments with (Restate's request identity)."""


@request_identity.command("public-key")
@click.argument("path", type=click.Path(dir_okay=False))
def public_key(path: str) -> None:
    """Print the public key (publickeyv1_…) of the private key in the PEM file PATH.

    Deployments started with it (restate-sdk `identity_keys=[...]`) accept only requests signed with PATH.
    """
    try:
        click.echo(signer_from_file(path).public_key)
    except TorporError as exc:
        raise click.ClickException(exc.message) from exc


@request_identity.command("generate")
@click.argument("path", type=click.Path(dir_okay=False))
def generate(path: str) -> None:
    """Write a new Ed25519 private key to PATH (PEM, mode 0600) and print its public key.

    Refuses to overwrite an existing file.
    """
    if os.path.exists(path):
        raise click.ClickException(f"{path} exists: remove it first, or print its public key with `public-key`")
    try:
        click.echo(signer_from_file(path, create=True).public_key)
    except TorporError as exc:
        raise click.ClickException(exc.message) from exc
