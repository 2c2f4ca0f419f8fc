"""Builds the optional native parts: the shard canonicalizer (cached_dist/bitcode/_shard.c),
the job-file scanner (cached_dist/jobfile/_scan.c), the input reader
(cached_dist/keys/_read.c), the output placer (store/_link.c) and the warm
server's client (cached_dist/serve/client.c, an executable in the package).

Everything else is declared in pyproject.toml. All are optional: when they cannot be built
(no C compiler or Python headers) the install still succeeds; cached-dist then uses the
pure-Python reference decoder (``cached-dist stats`` and ``--verbose`` say so) and reader,
and ``cached-dist serve`` says the client is missing.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CLIENT_SOURCE = "cached_dist/serve/client.c"


class BuildWithClient(build_ext):
    """build_ext, then the client, with the same compiler (in place for editable installs)."""

    def run(self) -> None:
        super().run()
        try:
            self.build_client()
        except Exception as e:  # optional, like the extension
            print(f"warning: the warm server's client was not built: {e}")

    def build_client(self) -> None:
        if self.compiler is None or isinstance(self.compiler, str):
            from setuptools._distutils.ccompiler import new_compiler
            from setuptools._distutils.sysconfig import customize_compiler

            self.compiler = new_compiler(compiler=self.compiler)
            customize_compiler(self.compiler)
        objects = self.compiler.compile([CLIENT_SOURCE], output_dir=self.build_temp,
                                        extra_postargs=["-O2", "-std=c99", "-Wall"])  # fmt: skip
        where = "" if self.inplace else self.build_lib
        out_dir = os.path.join(where, "cached_dist", "serve")
        self.compiler.link_executable(objects, "cached-dist-client", output_dir=out_dir)


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
