#!/usr/bin/env bash
# Wait for the wheel check that .ci/run started in the background, print its log, and exit
# with its status: `make test` runs this between its parallel and its serial pass.
set -euo pipefail
cd "$(dirname "$0")/.."
until [ -e .ci-wheel.status ]; do sleep 1; done
cat .ci-wheel.log
status=$(cat .ci-wheel.status)
[ "$status" = 0 ] || echo "wheel check FAILED (exit $status)" >&2
exit "$status"
