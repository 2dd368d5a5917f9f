"""Build a zeroc-ice wheel from its unpacked sdist, compiling the C++ sources on every core.

Ice for Python is one extension of ~200 C++ files, and setuptools compiles one extension's sources one after
another (its ``parallel`` option only runs separate extensions side by side). This runs the sdist's own
``setup.py bdist_wheel`` with the compile loop spread over a thread pool; each thread only waits on a compiler
process. The caller sets CFLAGS/CXXFLAGS (scripts/bootstrap.sh explains why they must name -O2).

    python scripts/build_ice_wheel.py SDIST_DIR WHEEL_DIR [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from setuptools._distutils import ccompiler


def parallel_compile(jobs: int) -> None:
    """Replace ``CCompiler.compile`` by one that runs ``_compile`` for all sources on ``jobs`` threads."""

    def compile(
        self: Any,
        sources: Sequence[str],
        output_dir: str | None = None,
        macros: Any = None,
        include_dirs: Any = None,
        debug: bool = False,
        extra_preargs: Any = None,
        extra_postargs: Any = None,
        depends: Any = None,
    ) -> list[str]:
        macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs
        )
        cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj: str) -> None:
            src, ext = build[obj]
            self._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for _ in pool.map(one, [obj for obj in objects if obj in build]):
                pass  # re-raises the first CompileError
        return list(objects)

    ccompiler.CCompiler.compile = compile  # type: ignore[method-assign,assignment]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sdist_dir", help="the unpacked zeroc-ice sdist (holds setup.py)")
    parser.add_argument("wheel_dir", help="where the wheel goes")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compilers run at once")
    args = parser.parse_args(argv)
    wheel_dir = os.path.abspath(args.wheel_dir)
    parallel_compile(max(1, args.jobs))
    os.chdir(args.sdist_dir)
    sys.argv = ["setup.py", "-q", "bdist_wheel", "-d", wheel_dir]
    sys.path.insert(0, os.getcwd())
    runpy.run_path("setup.py", run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
