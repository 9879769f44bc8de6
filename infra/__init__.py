"""Torpor on AWS as a CDK app (Python, aws-cdk-lib v2); `template.yaml` is the SAM equivalent.

- `infra.constructs`: `TorporControlPlane` (table, wake queue, schedules, the five functions, two
  HTTP APIs, least-privilege IAM) and `RegisteredHandler` (registers a handler function's version
  as a deployment through the deploy hook custom resource).
- `infra.bundling`: the Lambda code asset (the repository's packages plus `requirements.txt`,
  installed for linux/arm64 and Python 3.11).
- `infra.app`: the stack that uses both with the example handler; `cdk.json` runs it.

Nothing here is imported by the control plane; importing `infra` itself imports no CDK module, so
`python -m infra.bundling` works without aws-cdk-lib.
"""
