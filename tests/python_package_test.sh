#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python package as users install it: `pip install` from the source tree
# (offline, with Debian's setuptools) and `cmake --install` into a prefix;
# each copy imports, finds the library, and reports the build's version.
# usage: python_package_test.sh SOURCE_DIR BUILD_DIR LIBFERRY PYTHON3
set -euo pipefail
src=$1 build=$2 lib=$3 py=$4
want=$(head -n1 "$src/VERSION")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {  # $1: a directory holding the package; the rest: extra environment
  local dir=$1
  shift
  got=$(env "$@" PYTHONPATH="$dir" "$py" -c 'import ferry, os; print(ferry.__version__, ferry.library_version(), os.path.dirname(ferry.__file__))')
  read -r v lv at <<<"$got"
  [[ $v == "$want" && $lv == "$want" ]] || { echo "version: package $v, library $lv, VERSION $want"; exit 1; }
  [[ $at == "$dir/ferry" ]] || { echo "imported from $at, not $dir/ferry"; exit 1; }
}
# pip, setuptools and wheel come from Debian (scripts/setup.sh): no index is reached.
mkdir "$tmp/src"
cp -r "$src/python" "$tmp/src/python" && cp "$src/VERSION" "$tmp/src/VERSION"  # pip builds in the tree: a copy
"$py" -m pip install -q --no-build-isolation --no-deps --no-index --target "$tmp/pip" "$tmp/src/python" 2>&1 |
  grep -v "as the 'root' user" || true
check "$tmp/pip" FERRY_LIBRARY="$lib"
echo "pip install: ok ($want)"
# The documented command, in a virtual environment (Debian's python3 is
# externally managed), offline: --no-build-isolation builds with the
# environment's own setuptools instead of fetching one from an index.
if "$py" -m venv --system-site-packages "$tmp/venv" >/dev/null 2>&1; then
  "$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-index "$tmp/src/python" 2>&1 | grep -v "as the 'root' user" || true
  site_venv=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  got=$(FERRY_LIBRARY="$lib" "$tmp/venv/bin/python" -c 'import ferry, os; print(ferry.__version__, os.path.dirname(ferry.__file__))')
  [[ $got == "$want $site_venv/ferry" ]] || { echo "venv: $got, wanted $want from $site_venv/ferry"; exit 1; }
  echo "pip install --no-build-isolation in a venv: ok"
else
  echo "no venv module (python3-venv): the venv install is not checked"
fi
# cmake --install to a prefix: the package where that prefix's python3 looks,
# and it finds the library installed beside it without FERRY_LIBRARY.
cmake --install "$build" --prefix "$tmp/usr/local" >/dev/null
site=$("$py" -c 'import sysconfig as s; print(("lib/python%s/dist-packages" if "deb_system" in s.get_scheme_names() else "lib/python%s/site-packages") % s.get_python_version())')
[[ -f $tmp/usr/local/$site/ferry/__init__.py ]] || { echo "not installed in $site"; find "$tmp/usr/local" -name __init__.py; exit 1; }
check "$tmp/usr/local/$site" FERRY_LIBRARY=
echo "cmake --install: ok ($site)"
