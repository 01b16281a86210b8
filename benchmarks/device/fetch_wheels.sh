#!/usr/bin/env bash
# Downloads the wheels the GPU machine lacks (benchmarks/device/wheels.txt) into benchmarks/device/wheels/
# (git-ignored), built for CPython 3.12 on manylinux x86_64, whatever Python runs this. Needs PyPI.
# Idempotent: wheels already there are kept; wheels no longer pinned are removed.
#
#     bash benchmarks/device/fetch_wheels.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="$here/wheels"
py="${PYTHON:-python3}"
max_mib=40  # the device tool carries 64 MiB in all

mapfile -t specs < <(sed 's/#.*//' "$here/wheels.txt" | awk 'NF { print $1 }')
((${#specs[@]})) || { echo "no requirements in $here/wheels.txt" >&2; exit 1; }
mkdir -p "$dest"

# The GPU machine: CPython 3.12, x86_64, glibc >= 2.28 (its torch 2.11 wheel is manylinux_2_28 itself).
# pip also accepts the older manylinux tags below each of these.
"$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --dest "$dest" "${specs[@]}"

# Check: one wheel per pin, every tag installable on CPython 3.12 / manylinux <= 2.28 x86_64; drop stale wheels.
"$py" - "$dest" "$max_mib" "${specs[@]}" <<'EOF'
import sys
from pathlib import Path

try:
    from packaging.tags import Tag, compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:  # pip vendors it
    from pip._vendor.packaging.tags import Tag, compatible_tags, cpython_tags
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

dest, max_mib, specs = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
platforms = [f"manylinux_2_{m}_x86_64" for m in range(28, 16, -1)] + ["manylinux2014_x86_64", "linux_x86_64"]
supported = set(cpython_tags((3, 12), platforms=platforms)) | set(compatible_tags((3, 12), "cp312", platforms))
wanted = {}
for spec in specs:
    name, _, version = spec.partition("==")
    wanted[canonicalize_name(name)] = version

found, bad = {}, []
for wheel in sorted(dest.glob("*.whl")):
    name, version, _, tags = parse_wheel_filename(wheel.name)
    if wanted.get(name) != str(version):
        print(f"stale, removed: {wheel.name}")
        wheel.unlink()
        continue
    if not tags & supported:
        bad.append(f"{wheel.name}: no tag for CPython 3.12 manylinux x86_64")
    found[name] = wheel

bad += [f"{name}=={version}: no wheel downloaded" for name, version in wanted.items() if name not in found]
total = 0
print(f"wheels in {dest}:")
for wheel in sorted(found.values()):
    size = wheel.stat().st_size
    total += size
    print(f"  {size / 2**20:7.2f} MiB  {wheel.name}")
print(f"  {total / 2**20:7.2f} MiB  total ({len(found)} wheels)")
if total > max_mib * 2**20:
    bad.append(f"{total / 2**20:.1f} MiB is over the {max_mib:.0f} MiB budget")
for line in bad:
    print(f"ERROR: {line}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
