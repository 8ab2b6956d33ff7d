"""The registry's errors: Confluent Schema Registry's HTTP status and error codes."""

from __future__ import annotations


class RegistryError(Exception):
    """An answer other than success: an HTTP status, Confluent's error_code, a message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(what: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, what)


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404,
        40404,
        f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
    )


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404,
        40405,
        f"Subject '{subject}' was not deleted first before being permanently deleted",
    )


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40406,
        f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to "
        "delete permanently",
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40407,
        f"Subject '{subject}' Version {version} was not deleted first before being "
        "permanently deleted",
    )


def subject_compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(
        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured"
    )


def subject_mode_not_configured(subject: str) -> RegistryError:
    return RegistryError(
        404, 40409, f"Subject '{subject}' does not have subject-level mode configured"
    )


def incompatible(message: str) -> RegistryError:
    return RegistryError(409, 409, message)


def invalid_schema(message: str) -> RegistryError:
    return RegistryError(422, 42201, message)


def invalid_version(version: object) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{version}' is not a valid version id. Allowed values are "
        'between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility_level(level: object) -> RegistryError:
    return RegistryError(
        422,
        42203,
        f"Invalid compatibility level. Valid values are none, backward, forward, full, "
        f"backward_transitive, forward_transitive, and full_transitive (got {level!r})",
    )


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(
        422, 42204, f"Invalid mode. Valid values are READWRITE, READONLY, IMPORT (got {mode!r})"
    )


def operation_not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


def reference_exists(message: str) -> RegistryError:
    return RegistryError(422, 42206, message)


def id_in_use(message: str) -> RegistryError:
    return RegistryError(422, 42207, message)


def unprocessable(message: str) -> RegistryError:
    """A body that is not what the operation takes (Confluent answers 422, code 422)."""
    return RegistryError(422, 422, message)


def bad_request(message: str) -> RegistryError:
    return RegistryError(400, 400, message)


def unauthorized(message: str = "Unauthorized") -> RegistryError:
    return RegistryError(401, 40101, message)


def forbidden(message: str) -> RegistryError:
    return RegistryError(403, 40301, message)


def store_error(message: str) -> RegistryError:
    return RegistryError(500, 50001, message)


def store_timeout(message: str) -> RegistryError:
    return RegistryError(500, 50002, message)


def forward_error(message: str) -> RegistryError:
    return RegistryError(500, 50003, message)


def unknown_writer(message: str) -> RegistryError:
    return RegistryError(500, 50004, message)
