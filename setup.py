"""Builds the optional C extensions: the record walk (kbroker/protocol/_recordwalk.c),
the request reader (kbroker/protocol/_requestread.c: headers, Produce and Fetch bodies,
batch headers), the Fetch response writer (kbroker/protocol/_responsewrite.c), the TLS
record reader (kbroker/security/_tlsread.c) and the record codec of the admin commands
and the coordinators' writes (kbroker/protocol/_recordcodec.c).

Everything else is in pyproject.toml. All are optional: without a compiler (or without
OpenSSL's headers, for the reader) the package installs and does the same work in
Python, only slower (see kbroker/protocol/record_validation.py, the *_py functions
beside each caller of _requestread, kbroker/protocol/fetch_response.py,
kbroker/security/tls_session.py and kbroker.protocol.record_codec.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kbroker.protocol._recordwalk",
            ["kbroker/protocol/_recordwalk.c"],
            optional=True,
        ),
        Extension(
            "kbroker.protocol._requestread",
            ["kbroker/protocol/_requestread.c"],
            optional=True,
        ),
        Extension(
            "kbroker.protocol._responsewrite",
            ["kbroker/protocol/_responsewrite.c"],
            optional=True,
        ),
        Extension(
            "kbroker.security._tlsread",
            ["kbroker/security/_tlsread.c"],
            libraries=["ssl", "crypto"],
            optional=True,
        ),
        Extension(
            "kbroker.protocol._recordcodec",
            ["kbroker/protocol/_recordcodec.c"],
            optional=True,
        ),
    ]
)
