"""The test services as a Lambda handler, for the conformance suite's lambda mode:
`torpor dev --lambda ConformanceServices=tests.conformance.services_py.aws_lambda:handler`.

The emulator imports this module with `AWS_LAMBDA_FUNCTION_NAME` set, so `restate.app(...)` returns
the SDK's Lambda handler; `torpor dev` runs the app behind it with in-process checkpoints.
`TORPOR_CONFORMANCE_IDENTITY_KEY` (inherited from `torpor dev`) makes it accept only signed requests.
"""

from __future__ import annotations

from tests.conformance.services_py import make_app

handler = make_app()
