# SPDX-License-Identifier: MIT
"""The version comes from the source tree's VERSION file (CMake's too), and
goes into ferry/_build.py of the built package; see pyproject.toml.

scripts/wheel.sh builds the platform wheel through here: it names a folder of
native parts (FERRY_WHEEL_NATIVE: libferry, ferry-run, its interposers, the
simulated driver), which go into ferry/_native, and the wheel's platform tag
(FERRY_WHEEL_PLATFORM); that wheel also installs the `ferry-run` command.
Without them the package is pure Python over the system's libferry."""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

here = os.path.dirname(os.path.abspath(__file__))
native = os.environ.get("FERRY_WHEEL_NATIVE")
platform = os.environ.get("FERRY_WHEEL_PLATFORM")


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
            f.write(f'VERSION = "{version()}"\nLIBRARY = None  # found at import (FERRY_LIBRARY, ferry/_native, or the system\'s)\n')
        if native:
            dest = os.path.join(self.build_lib, "ferry", "_native")
            os.makedirs(dest, exist_ok=True)
            for name in sorted(os.listdir(native)):
                shutil.copy2(os.path.join(native, name), os.path.join(dest, name))  # modes kept: ferry-run runs


options = {"version": version(), "cmdclass": {"build_py": BuildPy}}
if native:
    if not platform:
        raise RuntimeError("ferry: FERRY_WHEEL_NATIVE needs FERRY_WHEEL_PLATFORM (scripts/wheel.sh sets both)")
    from setuptools.dist import Distribution
    from wheel.bdist_wheel import bdist_wheel

    class NativeParts(Distribution):
        """Has native parts: its files go where platform files go (not purelib)."""

        def has_ext_modules(self):
            return True

    class PlatformWheel(bdist_wheel):
        """Python over ctypes (any Python 3, no ABI of its own), native parts for one platform."""

        def get_tag(self):
            return "py3", "none", platform

    options["distclass"] = NativeParts
    options["cmdclass"]["bdist_wheel"] = PlatformWheel
    options["entry_points"] = {"console_scripts": ["ferry-run = ferry._run:main"]}

setup(**options)
