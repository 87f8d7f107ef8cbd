"""Build switches and the native extension modules; all metadata lives in pyproject.toml.

Switches (environment variables, read at build time):
  KRAFTCORE_PURE=1         build no extension: the package runs on the pure-Python kernels.
  KRAFTCORE_REQUIRE_EXT=1  a failed extension build is an error (it already is by default;
                           the switch exists so CI and wheel builds state it explicitly).
  KRAFTCORE_DEBUG=1        compile with -O0 -g and Cython's bounds checks on.

The extension never uses -march=native: hardware CRC instructions are chosen at run time.
"""
import os
import sys

from setuptools import Extension, setup


def _flag(name):
    return os.environ.get(name, "") not in ("", "0")


def _extensions():
    if _flag("KRAFTCORE_PURE"):
        return []
    from Cython.Build import cythonize

    debug = _flag("KRAFTCORE_DEBUG")
    if sys.platform == "win32":
        cflags = ["/O2"]
    else:
        cflags = ["-O0", "-g"] if debug else ["-O3"]
        cflags += ["-fno-strict-aliasing", "-Wno-unused-function"]
    # (module, source): the kernels, twins of kraftcore._py, and the Raft driver's helper,
    # twin of kraftcore.runtime.appends
    modules = [(f"kraftcore._c.{name}", f"ext/{name}.pyx")
               for name in ("crc32c", "varint", "records", "segment", "protocol")]
    modules.append(("kraftcore.runtime._appends", "ext/driver_appends.pyx"))
    extensions = [
        Extension(
            module,
            [source],
            include_dirs=["ext"],
            extra_compile_args=cflags,
        )
        for module, source in modules
    ]
    directives = {
        "language_level": 3,
        "boundscheck": debug,
        "wraparound": False,
        "initializedcheck": debug,
        "cdivision": True,
        "embedsignature": True,
    }
    # Cython does not notice changed directives: regenerate the C when debugging is toggled.
    return cythonize(extensions, compiler_directives=directives, include_path=["ext"], force=debug)


setup(ext_modules=_extensions())
