#!/usr/bin/env bash
# Sets up .venv (first run only) and starts the server; prints the URL to open.
# Any arguments go to `omni-agent serve` (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/omni-agent serve "$@"
