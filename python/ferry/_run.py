# SPDX-License-Identifier: MIT
"""The `ferry-run` command of the wheel: runs the ferry-run that came in this
package (ferry/_native), which finds its interposers and libferry beside it.
The command and its options are ferry-run's own (`ferry-run --help`)."""

import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", "ferry-run")
    if not os.access(exe, os.X_OK):
        sys.exit(
            "ferry-run: this ferry package carries no ferry-run (it was installed from the source tree, "
            "not from the wheel scripts/wheel.sh makes): run the ferry-run of the ferry packages"
        )
    os.execv(exe, ["ferry-run", *sys.argv[1:]])


if __name__ == "__main__":
    main()
