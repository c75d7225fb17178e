#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds ferry's Debian packages (ferryd, libferry0, libferry-dev,
# python3-ferry) from this tree with dpkg-buildpackage, in a copy of the
# tree's files under OUT (default build/deb), and runs lintian on them.
#   bash scripts/deb-build.sh [OUT]
# The .deb files land in OUT. Needs debhelper, dh-python, dpkg-dev, lintian
# and the build dependencies of debian/control (scripts/setup.sh installs
# them all).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/build/deb}" && cd "${1:-$root/build/deb}" && pwd)
rm -rf "$out/src" "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
mkdir -p "$out/src/ferry"
# The files git knows of (committed or not, less what it ignores): a build
# from a clean clone and one from a working tree see the same sources.
(cd "$root" && { git ls-files; git ls-files --others --exclude-standard; } | sort -u |
  while IFS= read -r f; do [[ -e $f ]] && printf '%s\n' "$f"; done |
  tar -cf - -T -) | tar -xf - -C "$out/src/ferry"
echo "deb-build: building the packages with dpkg-buildpackage (about 2-3 minutes; log: $out/build.log)"
(cd "$out/src/ferry" && dpkg-buildpackage -us -uc -b -j"$(nproc)") >"$out/build.log" 2>&1 || {
  tail -40 "$out/build.log"
  echo "deb-build: dpkg-buildpackage failed (whole log: $out/build.log)" >&2
  exit 1
}
mv "$out/src"/*.deb "$out/src"/*.changes "$out/src"/*.buildinfo "$out/"
echo "deb-build: $(cd "$out" && ls ./*.deb | grep -v dbgsym | tr '\n' ' ')"
echo "deb-build: running lintian on them"
# Every tag lintian prints (info and pedantic included) fails the build,
# unless an override in debian/*.lintian-overrides justifies it.
tags=$(cd "$out" && lintian --info --display-info --pedantic --fail-on none ./*.changes 2>&1 | grep -v -e "^N:" -e "running with root privileges" || true)
if [[ -n $tags ]]; then
  echo "$tags"
  echo "deb-build: lintian reported the tags above" >&2
  exit 1
fi
echo "deb-build: lintian clean"
