#!/usr/bin/env bash
# The GPU device check for the Qwen3-Omni engine, in one go under 8 minutes (`timeout 480` around it all).
# Run from the repository root on the GPU machine, with benchmarks/device/wheels carried
# (bash benchmarks/device/fetch_wheels.sh makes it):
#
#     bash benchmarks/device/check.sh
#
# 1. installs the pinned wheels (wheels.txt) into a private target, first on PYTHONPATH with the repo root;
# 2. preflight.py: versions, CUDA, the engine's imports (fails in seconds, before any model is built);
# 3. the tiny random model on CUDA: CUDA graphs against eager on staggered sessions (float32; tokens and codes
#    identical, samples within float rounding; captured against the same steps uncaptured: to the bit), then
#    1 and 4 sessions end to end;
# 4. the published 30B-A3B config with random bf16 weights, with graphs, at 1, 4, 8 and 16 sessions; the
#    16-session level runs if time allows (the benchmark writes its JSON after each level, so a level cut short
#    loses only itself).
#
# Output in $OUT (./results if unset): device-check.log (everything printed), device-env.json,
# graphs-vs-eager-tiny-cuda.json, bench-qwen3-omni-tiny-cuda.json, bench-qwen3-omni-h200.json. Exit status 0
# only if every step passed.
#
# Knobs: CHECK_DRY_RUN=1 stops after the preflight; CHECK_NO_GPU=1 is a rehearsal on a CPU machine (no wheels
# installed: this Python's packages; preflight --no-gpu; the tests run it with the dry run);
# CHECK_PYTHON (python3); CHECK_BUDGET_S (480);
# CHECK_FULL_MIN_S (300, kept for the full run) and CHECK_TINY_MAX_S (150, the tiny run's cap): for tests.

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if [[ -z "${_DEVICE_CHECK_INNER:-}" ]]; then
    # The outer shell: the time limit around everything, and a copy of everything printed in the log.
    OUT="${OUT:-$repo/results}"
    mkdir -p "$OUT"
    OUT="$(cd "$OUT" && pwd)"
    budget="${CHECK_BUDGET_S:-480}"
    export OUT _DEVICE_CHECK_INNER=1 _DEVICE_CHECK_T0="$(date +%s)" CHECK_BUDGET_S="$budget"
    # timeout signals its process group: this script's inner run, which forwards it to a running step
    timeout --kill-after=10 "$budget" bash "${BASH_SOURCE[0]}" "$@" 2>&1 | tee "$OUT/device-check.log"
    rc=${PIPESTATUS[0]}
    if ((rc == 124 || rc == 137)); then
        echo "device check: stopped by the ${budget} s limit (exit $rc); the JSON written so far is in $OUT" |
            tee -a "$OUT/device-check.log"
    fi
    exit "$rc"
fi

set -euo pipefail
cd "$repo"
py="${CHECK_PYTHON:-python3}"
wheels="$here/wheels"
target="${TMPDIR:-/tmp}/omni-deps"

elapsed() { echo $(($(date +%s) - _DEVICE_CHECK_T0)); }
left() { echo $((CHECK_BUDGET_S - $(elapsed))); }
say() { printf '\n[%3d s] == %s\n' "$(elapsed)" "$*"; }

say "device check: repo $repo, out $OUT, budget ${CHECK_BUDGET_S} s"
date -u +"%Y-%m-%dT%H:%M:%SZ"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv || true
fi

preflight_args=(--target "$target" --env-json "$OUT/device-env.json")
if [[ -n "${CHECK_NO_GPU:-}" ]]; then
    say "CHECK_NO_GPU: a rehearsal on this machine; no wheels installed, the GPU checks skipped"
    export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
    if ! "$py" "$here/preflight.py" --no-gpu --env-json "$OUT/device-env.json"; then
        echo "FAIL: preflight (above)" >&2
        exit 3
    fi
    [[ -n "${CHECK_DRY_RUN:-}" ]] && { say "dry run: stopping after the preflight"; exit 0; }
    echo "FAIL: CHECK_NO_GPU goes no further than the preflight: set CHECK_DRY_RUN=1" >&2
    exit 2
fi

# 1. The wheels: the "always" ones into the target (ahead of the machine's own copies), the "if-missing:MOD" ones
#    only where MOD does not import.
say "installing the pinned wheels into $target"
[[ -d "$wheels" ]] || { echo "FAIL: $wheels is missing: run benchmarks/device/fetch_wheels.sh and carry it" >&2; exit 2; }
ls -l "$wheels"
specs=()
while read -r spec when; do
    case "$when" in
        always) specs+=("$spec") ;;
        if-missing:*)
            if "$py" -c "import ${when#if-missing:}" 2>/dev/null; then
                echo "$spec: not needed, ${when#if-missing:} imports here"
            else
                specs+=("$spec")
            fi
            ;;
        *) echo "FAIL: wheels.txt: unknown 'when' $when for $spec" >&2; exit 2 ;;
    esac
done < <(sed 's/#.*//' "$here/wheels.txt" | awk 'NF')
rm -rf "$target"
mkdir -p "$target"
if "$py" -m pip --version >/dev/null 2>&1; then
    PIP_ROOT_USER_ACTION=ignore "$py" -m pip install --quiet --disable-pip-version-check --no-compile --no-index \
        --no-deps --find-links "$wheels" \
        --target "$target" "${specs[@]}"
else
    # No pip on the machine: a wheel is a zip; these have no scripts or data to place.
    echo "no pip for $py: unpacking the wheels"
    "$py" - "$wheels" "$target" "${specs[@]}" <<'EOF'
import sys, zipfile
from pathlib import Path

wheels, target, specs = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
for spec in specs:
    name, _, version = spec.partition("==")
    prefix = f"{name.lower().replace('-', '_')}-{version}-"
    [wheel] = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(prefix)]
    zipfile.ZipFile(wheel).extractall(target)
    print("unpacked", wheel.name)
EOF
fi
echo "installed: ${specs[*]}"
export PYTHONPATH="$target:$repo${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export TOKENIZERS_PARALLELISM=false

# 2. Versions, the GPU and the engine's imports.
say "preflight"
if ! "$py" "$here/preflight.py" "${preflight_args[@]}"; then
    echo "FAIL: preflight (above); no model was built" >&2
    exit 3
fi
if [[ -n "${CHECK_DRY_RUN:-}" ]]; then
    say "dry run: stopping after the preflight"
    exit 0
fi

# run_step NAME LIMIT_S COMMAND...: the command under its own time limit; its exit status in step_rc.
# The step's timeout runs in its own process group (it kills the python and anything the python started);
# the outer 480 s limit reaches it through the trap below, which forwards the signal.
step_pid=""
stop() {
    echo "device check: stopped by a signal; stopping the running step" >&2
    if [[ -n "$step_pid" ]]; then
        kill -TERM "$step_pid" 2>/dev/null || true
        wait "$step_pid" 2>/dev/null || true
    fi
    exit 143
}
trap stop TERM INT HUP
run_step() {
    local name="$1" limit="$2"
    shift 2
    say "$name (limit $limit s): $*"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" &
    step_pid=$!
    # in the background + wait: a signal to this shell runs the trap at once, not after the step ends
    step_rc=0
    wait "$step_pid" || step_rc=$?
    step_pid=""
    say "$name: exit $step_rc after $((SECONDS - t0)) s"
}

# 3. The tiny random model on CUDA: graphs against eager, then end to end.
compare_json="$OUT/graphs-vs-eager-tiny-cuda.json"
tiny_json="$OUT/bench-qwen3-omni-tiny-cuda.json"
full_json="$OUT/bench-qwen3-omni-h200.json"
rm -f "$compare_json" "$tiny_json" "$full_json"
full_min="${CHECK_FULL_MIN_S:-300}"  # the full run keeps at least this
tiny_max="${CHECK_TINY_MAX_S:-150}"
tiny_limit=$(($(left) - full_min))
((tiny_limit > tiny_max)) && tiny_limit=$tiny_max
if ((tiny_limit < tiny_max / 5)); then
    echo "FAIL: only $(left) s left before the tiny run" >&2
    exit 4
fi
t_tiny=$SECONDS
run_step "tiny model, CUDA: graphs against eager" "$((tiny_limit / 2))" \
    "$py" -m benchmarks.qwen3_omni --device cuda --compare-graphs --out "$compare_json"
compare_rc=$step_rc
if ((compare_rc != 0)); then
    # where the samples part, frame by frame, and how far the conv stack carries a rounding (a graph fault or
    # float sensitivity), on the IEEE float32 the comparison ran in
    run_step "tiny model, CUDA: where eager and graphed samples part" 60 \
        "$py" -m benchmarks.device.code2wav_precision --device cuda --fp32 ieee
fi
run_step "tiny model, CUDA" "$((tiny_limit - (SECONDS - t_tiny)))" \
    "$py" -m benchmarks.qwen3_omni --device cuda --sessions 1,4 --seconds 4 --max-tokens 16 --max-frames 16 \
    --out "$tiny_json"
tiny_rc=$step_rc
((compare_rc != 0)) && tiny_rc=$compare_rc
# A tiny failure does not stop the full run: one go on the machine should show all it can.

# 4. The full-size config, random bf16 weights; whatever time is left, less 25 s for the kill and the summary.
full_limit=$(($(left) - 25))
full_rc=4
if ((full_limit >= full_min / 5)); then
    run_step "full config, random bf16, CUDA" "$full_limit" \
        "$py" -m benchmarks.qwen3_omni --full --device cuda --sessions 1,4,8,16 --batch-limit 16 --seconds 10 --max-tokens 48 \
        --max-frames 48 --out "$full_json"
    full_rc=$step_rc
else
    echo "FAIL: only $(left) s left: the full run was not started" >&2
fi

# Summary: the figures per level from the JSON; the verdict.
say "summary"
set +e
"$py" - "$tiny_json" "$tiny_rc" "$full_json" "$full_rc" "$compare_json" <<'EOF'
import json, sys
from pathlib import Path

compare = Path(sys.argv[5])
if compare.is_file():
    c = json.loads(compare.read_text()).get("compare_graphs", {})
    exact = c.get("captured_vs_uncaptured", {})
    print(
        f"{compare.name}: graphs {c.get('graphs')}, against eager: tokens identical {c.get('tokens_identical')}, "
        f"codes identical {c.get('codes_identical')}, max sample diff {c.get('max_sample_diff')}; against the same "
        f"steps uncaptured: {exact or '-'}; capture failed: {c.get('capture_failed')}"
    )
else:
    print(f"{compare.name}: not written")

def flat(r):
    out = []
    for k, v in r.items():
        if isinstance(v, bool) or k in ("sessions",):
            continue
        if isinstance(v, (int, float)):
            out.append(f"{k} {v:.4g}")
        elif isinstance(v, dict) and isinstance(v.get("median"), (int, float)):
            out.append(f"{k} median {v['median']:.4g} max {v.get('max', float('nan')):.4g}")
        elif isinstance(v, dict) and v and all(isinstance(x, (int, float)) for x in v.values()):
            out.append(f"{k} " + ", ".join(f"{s} {x:.4g}" for s, x in v.items()))
        elif isinstance(v, dict):  # per stage: {"thinker": {"median": ...}, "code2wav": None, ...}
            parts = [
                f"{s} {x['median']:.3g}"
                for s, x in v.items()
                if isinstance(x, dict) and isinstance(x.get("median"), (int, float))
            ]
            if parts:
                out.append(f"{k} (median) " + ", ".join(parts))
    return "; ".join(out)

verdict = 0
for path, rc, need in ((sys.argv[1], int(sys.argv[2]), {1, 4}), (sys.argv[3], int(sys.argv[4]), {1, 4, 8})):
    p = Path(path)
    doc = json.loads(p.read_text()) if p.is_file() else {"results": []}
    levels = [r.get("sessions") for r in doc.get("results", [])]
    print(f"{p.name}: exit {rc}, levels done {levels}, {doc.get('model', '-')}, {doc.get('device_name', '-')}")
    for r in doc.get("results", []):
        print(f"  {r.get('sessions')} sessions: {flat(r)}")
    if rc == 0:
        status = "ok"
    elif rc in (124, 137) and need <= set(levels):
        status = f"ok: levels {sorted(need)} done, the next cut by the time limit"
    else:
        status = "FAILED" + (" (time limit)" if rc in (124, 137) else "")
        verdict = 1
    print(f"  -> {status}")
sys.exit(verdict)
EOF
verdict=$?
say "device check $([[ $verdict == 0 ]] && echo PASSED || echo FAILED) in $(elapsed) s; files in $OUT:"
ls -l "$OUT"
exit "$verdict"
