#!/usr/bin/env bash
# Sets up everything the tests need, then runs ruff and the whole test suite.
# As root the suite runs in a fresh network namespace whose only interface is
# loopback (`unshare -n`), so no test can reach any address but 127.0.0.1.
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
.venv/bin/ruff check agent media tests benchmarks
run=(.venv/bin/python -m pytest -p no:cacheprovider -rs "$@")  # -rs: every skip says why
if [[ $(id -u) == 0 ]] && unshare -n true 2>/dev/null; then
  echo "test: running in a loopback-only network namespace"
  exec unshare -n bash -c 'ip link set lo up && exec "$@"' _ "${run[@]}"
fi
echo "test: not root, so no private network namespace; peers still offer only 127.0.0.1"
exec "${run[@]}"
