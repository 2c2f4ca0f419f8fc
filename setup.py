"""Builds the optional native parts: the shard canonicalizer (cached_dist/bitcode/_shard.c),
the job-file scanner (cached_dist/jobfile/_scan.c), the input reader
(cached_dist/keys/_read.c), the output placer (store/_link.c), and executables in the
package: the warm server's client (cached_dist/serve/client.c), the runners' guard
(cached_dist/runners/guard.c: compilers end with their link) and the compiler launcher
(cached_dist/launcher/cc.c).

Everything else is declared in pyproject.toml. All are optional: when they cannot be built
(no C compiler or Python headers) the install still succeeds; cached-dist then uses the
pure-Python reference decoder (``cached-dist stats`` and ``--verbose`` say so) and reader,
and ``cached-dist serve`` and ``cached-dist flags --launcher`` say what is missing.
The output placer links libzstd (libzstd-dev) to place compressed blobs itself; where that
is missing it is built without (compressed blobs are then placed in Python).
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError, CompileError

CLIENT_SOURCE = "cached_dist/serve/client.c"
#: Executables in the package: (source, name, C standard).
EXECUTABLES = [
    (CLIENT_SOURCE, "cached-dist-client", "c99"),
    ("cached_dist/runners/guard.c", "cached-dist-guard", "gnu99"),
    ("cached_dist/launcher/cc.c", "cached-dist-cc", "c99"),
]
#: The extension built against libzstd when it can be (store/_link.c's HAVE_ZSTD).
WITH_ZSTD = "store._link"


class BuildWithClient(build_ext):
    """build_ext, then the executables, with the same compiler (in place for editable
    installs)."""

    def run(self) -> None:
        super().run()
        for source, name, std in EXECUTABLES:
            try:
                self.build_executable(source, name, std)
            except Exception as e:  # optional, like the extension
                print(f"warning: {name} was not built: {e}")

    def build_extension(self, ext: Extension) -> None:
        """The placer with libzstd, else (no zstd.h or libzstd.so) without it."""
        if ext.name != WITH_ZSTD:
            super().build_extension(ext)
            return
        ext.define_macros.append(("HAVE_ZSTD", "1"))
        ext.libraries.append("zstd")
        try:
            super().build_extension(ext)
            return
        except (CCompilerError, BaseError, CompileError) as e:
            print(f"warning: {ext.name} is built without libzstd (install libzstd-dev): {e}")
        ext.define_macros.remove(("HAVE_ZSTD", "1"))
        ext.libraries.remove("zstd")
        super().build_extension(ext)

    def build_executable(self, source: str, name: str, std: str) -> None:
        if self.compiler is None or isinstance(self.compiler, str):
            from setuptools._distutils.ccompiler import new_compiler
            from setuptools._distutils.sysconfig import customize_compiler

            self.compiler = new_compiler(compiler=self.compiler)
            customize_compiler(self.compiler)
        objects = self.compiler.compile([source], output_dir=self.build_temp,
                                        extra_postargs=["-O2", f"-std={std}", "-Wall"])  # fmt: skip
        where = "" if self.inplace else self.build_lib
        out_dir = os.path.join(where, os.path.dirname(source))
        self.compiler.link_executable(objects, name, output_dir=out_dir)


setup(
    ext_modules=[
        Extension(
            "cached_dist.bitcode._shard",
            ["cached_dist/bitcode/_shard.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c99"],
        ),
        Extension(
            "cached_dist.jobfile._scan",
            ["cached_dist/jobfile/_scan.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c99", "-Wall"],
        ),
        Extension(
            "cached_dist.keys._read",
            ["cached_dist/keys/_read.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=gnu99", "-Wall"],
        ),
        Extension(
            "store._link",
            ["store/_link.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=gnu99", "-Wall"],
        ),
    ],
    cmdclass={"build_ext": BuildWithClient},
)
