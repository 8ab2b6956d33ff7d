"""Builds the optional C record walk (kbroker/protocol/_recordwalk.c).

Everything else is in pyproject.toml. The extension is optional: without a compiler
the package installs and validates produced records with the same rules in Python,
only slower (see kbroker/protocol/record_validation.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kbroker.protocol._recordwalk",
            ["kbroker/protocol/_recordwalk.c"],
            optional=True,
        )
    ]
)
