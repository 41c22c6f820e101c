#!/usr/bin/env bash
# Regenerate the protocol stubs from the protocol's source of truth,
# crates/sluice-remote/proto/process_worker.proto (needs grpcio-tools==1.85.1,
# the version scripts/test.sh pins: each release stamps itself into the stubs).
# scripts/test.sh checks that the committed stubs match.
set -euo pipefail
cd "$(dirname "$0")"
out=sluice_worker/_proto
proto=../../crates/sluice-remote/proto
python3 -m grpc_tools.protoc -I "$proto" --python_out="$out" --grpc_python_out="$out" "$proto/process_worker.proto"
# grpc_tools writes an absolute import; the stubs live inside a package.
sed -i 's/^import process_worker_pb2 as/from . import process_worker_pb2 as/' "$out/process_worker_pb2_grpc.py"
