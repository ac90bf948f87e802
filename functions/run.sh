#!/bin/bash
# Lambda Web Adapter bootstrap (handler "run.sh"; AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap runs it).
# The dependency layer is in /opt/python; the engram package is next to this file.
# ENGRAM_SURFACE picks what the app serves (all | api | mcp); settings come from ENGRAM_* env + the secret.
export PYTHONPATH="/opt/python:${LAMBDA_TASK_ROOT:-$(dirname "$0")}:${LAMBDA_RUNTIME_DIR:-/var/runtime}:${PYTHONPATH:-}"
exec python -m uvicorn --factory engram.entrypoints.http.factory:create_app \
  --host 127.0.0.1 --port "${AWS_LWA_PORT:-${PORT:-8080}}" \
  --no-access-log --no-proxy-headers --timeout-keep-alive 75 --log-level warning
