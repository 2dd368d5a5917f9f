"""Only what pyproject.toml cannot say: the wheel carries the Slice contract.

``slice/crawler.ice`` sits at the top of the source tree, where every role's docs point; an installed wheel has no
source tree, so the build copies the file into the ``icecrawler`` package (``icecrawler/slice/crawler.ice``), where
``icecrawler.rpc`` looks when there is no checkout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SLICE_FILES = sorted(Path("slice").glob("*.ice"))


class BuildPyWithSlice(build_py):  # type: ignore[misc]
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "icecrawler" / "slice"
        target.mkdir(parents=True, exist_ok=True)
        for path in SLICE_FILES:
            shutil.copy2(path, target / path.name)


setup(cmdclass={"build_py": BuildPyWithSlice})
