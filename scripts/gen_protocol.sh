#!/usr/bin/env bash
# Regenerate control_plane/protocol/protocol_pb2.py and protocol_pb2.pyi from protocol.proto.
# Uses grpcio-tools (pinned in pyproject's `test` extra) so every machine produces identical bytes;
# tests/unit/test_protocol_sync.py fails when the committed files drift from the .proto.
# Usage: scripts/gen_protocol.sh   (PYTHON=/path/to/python to pick the interpreter)
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"

"$PYTHON" -m grpc_tools.protoc \
  -I control_plane/protocol \
  --python_out=control_plane/protocol \
  --pyi_out=control_plane/protocol \
  protocol.proto

echo "regenerated control_plane/protocol/protocol_pb2.py and protocol_pb2.pyi"
