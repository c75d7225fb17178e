# SPDX-License-Identifier: MIT
"""The version comes from the source tree's VERSION file (CMake's too), and
goes into ferry/_build.py of the built package; see pyproject.toml."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

here = os.path.dirname(os.path.abspath(__file__))


def version():
    for path in (os.path.join(here, "..", "VERSION"), os.path.join(here, "VERSION")):
        if os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
    raise RuntimeError("ferry: no VERSION file beside python/ (build from the ferry source tree)")


class BuildPy(build_py):
    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "ferry", "_build.py")
        with open(out, "w") as f:
            f.write('"""Written by pip\'s build: the version this package was built as."""\n\n')
            f.write(f'VERSION = "{version()}"\nLIBRARY = None  # found at import (FERRY_LIBRARY, or the system\'s)\n')


setup(version=version(), cmdclass={"build_py": BuildPy})
