"""Builds the optional native shard canonicalizer (cached_dist/bitcode/_shard.c).

Everything else is declared in pyproject.toml. The extension is optional: when it cannot be
built (no C compiler or Python headers) the install still succeeds and cached-dist uses the
pure-Python reference decoder (``cached-dist stats`` and ``--verbose`` say so).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cached_dist.bitcode._shard",
            ["cached_dist/bitcode/_shard.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c99"],
        )
    ]
)
