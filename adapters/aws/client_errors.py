"""What an AWS API refused with: the code and message of a botocore `ClientError`."""

from __future__ import annotations

from botocore.exceptions import ClientError


def error_code(exc: ClientError) -> str:
    """The error code AWS answered (`ConflictException`, `TooManyRequestsException`, ...), "" if none."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def error_message(exc: ClientError) -> str:
    """The error message AWS answered, else the exception's own text."""
    return str(exc.response.get("Error", {}).get("Message", "")) or str(exc)
