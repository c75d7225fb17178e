# SPDX-License-Identifier: MIT
# Sourced by the scripts that run the README's commands as written
# (scripts/test.sh, tests/package_test.sh, tests/install_test.sh); needs $root.

# The first fenced block after the README line that starts with $1 (a
# heading, or a paragraph's bold lead such as "**From Debian packages**").
readme_block() {
  awk -v h="$1" 'index($0, h) == 1 && !found { found = 1; next }
    found && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$root/README.md"
}

# The command of BLOCK ($1) that starts with $2, with its continuation lines
# (those after a line ending in a backslash).
# The first code block under heading $1 that holds the text $2 (before the
# next heading), for a section with several.
readme_block_with() {
  awk -v h="$1" -v t="$2" 'index($0, h) == 1 && !found { found = 1; next }
    found && !inside && /^#/ { exit }
    found && /^```/ { if (inside) { if (index(b, t)) { printf "%s", b; exit } inside = 0; b = ""; next } inside = 1; next }
    inside { b = b $0 "\n" }' "$root/README.md"
}

readme_command() {
  awk -v p="$2" 'index($0, p) == 1 { on = 1 } on { print; if ($0 !~ /\\$/) exit }' <<<"$1"
}
