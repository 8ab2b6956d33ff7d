"""Kafka's security model: listeners' TLS, SASL authentication, principals, ACLs, quotas.

Nothing here does socket I/O: the connection feeds bytes and tokens in and writes what
comes back, so every exchange can be tested (and fuzzed) without a network.
"""
