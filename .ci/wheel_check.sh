#!/usr/bin/env bash
# The package as a pip user gets it (issue 26): build the sdist and, from it, the wheel; check
# both hold what they must; install the wheel (not editable) into a fresh venv; and from a
# folder outside the repository run the first commands a user runs, checking each one's exit
# status and printed accuracy. A file missing from the wheel, a package left out of
# pyproject's list, or data read relative to the checkout fails here.
#
#   bash .ci/wheel_check.sh            (needs `make setup` first: it builds with .venv's tools)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY="$REPO/.venv/bin/python"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "wheel check FAILED: $*" >&2; exit 1; }

echo "== build (sdist, then the wheel from the sdist)"
# --no-isolation: build with .venv's setuptools instead of downloading one per build.
"$PY" -m build --no-isolation --outdir "$WORK/dist" "$REPO" >"$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log"; fail "the build failed"; }
if grep -iE "deprecat|would be ignored" "$WORK/build.log"; then fail "the build warns (above)"; fi
rm -rf "$REPO/build"  # setuptools' scratch folder; the egg-info stays for the editable install
WHEEL=$(ls "$WORK"/dist/*.whl)
SDIST=$(ls "$WORK"/dist/*.tar.gz)
"$PY" "$REPO/.ci/package_contents.py" "$REPO" "$WHEEL" "$SDIST" || fail "package contents"

echo "== install the wheel into a fresh venv"
python3 -m venv --without-pip "$WORK/venv"
VPY="$WORK/venv/bin/python"
# pip's notes about index folders this machine lacks are noise here; its errors still fail.
pip_install() { "$VPY" -m pip install -q "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }
# What pip unpacked and compiled into .venv is not unpacked again (.ci/link_installed.py:
# hard links, 1-2 s against 20-35 s for torch and as much for the rest). pip first: .venv's,
# which make setup upgraded from the same index (ensurepip and an upgrade took 5-8 s). The
# CPU build of torch next (see Makefile): .venv's, with its requirements, where it is the
# version pinned. Then the wheel's dependencies as pip resolves them from the wheel's own
# metadata (its --dry-run report): those .venv holds at the version pip chose are linked,
# pip installs the others and the wheel, and checks that every requirement is met.
TORCH="${TORCH_SPEC:-torch==2.13.0}"
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
link_installed() { "$PY" "$REPO/.ci/link_installed.py" "$SITE" "$@"; }
link_installed pip || { "$VPY" -m ensurepip -q && pip_install --upgrade pip; }
link_installed "$TORCH" || pip_install "$TORCH"
pip_install --dry-run --report "$WORK/resolved.json" "$WHEEL"
link_installed --report "$WORK/resolved.json" || true
pip_install "$WHEEL"
"$VPY" -m pip check >/dev/null || { "$VPY" -m pip check; fail "pip check"; }

echo "== a user's first commands, from a folder outside the repository"
mkdir "$WORK/user" && cd "$WORK/user"
export DANE_CACHE="$WORK/cache" PATH="$WORK/venv/bin:$PATH"
where=$("$VPY" -c 'import dask_dane, pathlib; print(pathlib.Path(dask_dane.__file__).parent)')
case "$where" in "$WORK/venv/"*) ;; *) fail "dask_dane was imported from $where" ;; esac

version=$(dane --version)
expected=$(grep -m1 '^version' "$REPO/pyproject.toml" | cut -d'"' -f2)
[ "$version" = "dask-dane $expected" ] || fail "dane --version printed '$version'"
echo "dane --version: $version"
[ "$("$VPY" -m dask_dane --version)" = "$version" ] || fail "python -m dask_dane --version"

# accuracy LINE MIN: the test accuracy a `dane train` line prints, at least MIN.
accuracy() {
  "$VPY" - "$1" "$2" <<'PY'
import re, sys
found = re.search(r"test accuracy (\d\.\d+)", sys.argv[1])
sys.exit(0 if found and float(found.group(1)) >= float(sys.argv[2]) else f"no accuracy >= {sys.argv[2]} in: {sys.argv[1]}")
PY
}

line=$(dane train --out run-default | tail -n 1) || fail "dane train on the embedded default"
accuracy "$line" 0.9 || fail "dane train on the embedded default"
echo "embedded default: $line"

dane prepare digits --shards 2 --out small.zarr >/dev/null
line=$(dane train small.zarr --config preset:skew-dane --model small-cnn --rounds 3 \
  --out run-preset | tail -n 1) || fail "dane train --config preset:skew-dane"
accuracy "$line" 0.8 || fail "dane train --config preset:skew-dane"
echo "preset skew-dane: $line"
grep -q '^algorithm = "feddyn"' run-preset/config.toml || fail "the preset's algorithm not used"

dane presets --path gpu-check | grep -q "$WORK/venv/" || fail "dane presets --path"
[ -s "$(dane presets --path gpu-check)" ] || fail "the shipped script is empty"

api=$("$VPY" -c '
import dask_dane
result = dask_dane.train("small.zarr", model="small-cnn", rounds=3, out="run-api")
print(f"test accuracy {result.test_accuracy:.4f}")
') || fail "dask_dane.train from Python"
accuracy "$api" 0.8 || fail "dask_dane.train from Python"
echo "python API: $api"
echo "wheel check passed in ${SECONDS} s"
