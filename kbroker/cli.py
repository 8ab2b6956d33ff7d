"""The `kbroker` command."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from kbroker import __version__

if TYPE_CHECKING:
    from kbroker.config import BrokerConfig


class CommandLine(argparse.ArgumentParser):
    """argparse with its complaints in one line naming the help to read, instead of a
    usage block; every subcommand's parser is one of these too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser(admin: bool = True) -> argparse.ArgumentParser:
    """The command line; `admin=False` leaves out the admin commands, whose modules (the
    client, rich tables) a serving broker never uses and need not spend its start on."""
    parser = CommandLine(prog="kbroker", description="Kafka-compatible broker")
    parser.add_argument("--version", action="version", version=f"kbroker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker node")
    serve.add_argument("--config", type=Path, help="Kafka-style server.properties file")
    serve.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set one broker property (repeatable); beats the environment and the file",
    )
    serve.add_argument("--log-level", help="overrides logging.level")
    serve.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="uvloop (default, when installed) or the standard library's loop",
    )
    from kbroker.format import add_parser as add_format_command

    add_format_command(sub)
    if admin:
        from kbroker.admin.commands import add_admin_commands
        from kbroker.devcluster import add_parser as add_dev_command
        from kbroker.schemas.cli import add_schemas_command

        add_admin_commands(sub)
        add_schemas_command(sub)
        add_dev_command(sub)
        completion = sub.add_parser(
            "completion", help="print a shell completion script (bash, zsh or fish)"
        )
        completion.add_argument("shell", choices=("bash", "zsh", "fish"))
    return parser


LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "CRITICAL")


def _log_level(name: str) -> str:
    """Kafka's and Python's level names, any case (TRACE is DEBUG); ValueError otherwise."""
    upper = name.strip().upper()
    if upper not in LOG_LEVELS:
        raise ValueError(f"unknown log level {name!r} (one of {', '.join(LOG_LEVELS)})")
    return "DEBUG" if upper == "TRACE" else upper


def _install_event_loop(choice: str) -> None:
    """uvloop roughly doubles the request rate of the stock loop; use it when present."""
    import asyncio

    if choice == "asyncio":
        return
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _serve(config) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from kbroker.broker import Broker
    from kbroker.controller_node import ControllerNode

    broker = Broker(config) if config.quorum.is_broker else ControllerNode(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A start can wait long (a controller-only node for its quorum, indefinitely): a
    # signal meanwhile ends it, cleaned up as a failed start is.
    starting = asyncio.create_task(broker.start())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        logging.getLogger("kbroker").info("stopping on signal before the start completed")
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        return
    stopping.cancel()
    starting.result()  # a failed start raises here
    await stop.wait()
    logging.getLogger("kbroker").info("shutting down on signal")
    await broker.stop()


def _log_inert_settings(config: BrokerConfig) -> None:
    """One line naming the inert settings the operator set, so none seems to work."""
    log = logging.getLogger("kbroker.config")
    explicit = config.inert_settings()
    if explicit:
        log.info(
            "settings accepted for compatibility but inert in kbroker: %s", ", ".join(explicit)
        )
    log.debug(
        "inert settings (accepted, no effect): %s",
        ", ".join(config.inert_settings(explicit_only=False)),
    )


def _skip_test_data_strategies() -> None:
    """Keep hypothesis (a test dependency) out of a serving broker and the admin
    commands: when it is importable, kio imports it and registers a strategy for each of
    its field types, a quarter of a second of every start in a test environment for test
    data neither ever makes."""
    if "kio" not in sys.modules:
        sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`kbroker consume ... | head`): end quietly, and keep the
        # interpreter's last flush of stdout from failing again on the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    serving = argv[:1] == ["serve"]
    _skip_test_data_strategies()
    parser = _parser(admin=not serving)
    args = parser.parse_args(argv)
    if args.command == "completion":
        from kbroker.admin.completion import script

        print(script(parser, args.shell), end="")
        return 0
    if args.command == "schemas":
        from kbroker.schemas.cli import run_schemas_command

        return run_schemas_command(args)
    if args.command == "format":
        from kbroker.format import run as run_format

        return run_format(args)
    if args.command == "dev":
        from kbroker.devcluster import run as run_dev_cluster

        return run_dev_cluster(args)
    if args.command != "serve":
        from kbroker.admin.commands import run_admin_command

        return run_admin_command(args)
    try:
        level = _log_level(args.log_level) if args.log_level else None
    except ValueError as exc:
        print(f"kbroker serve: {exc}", file=sys.stderr)
        return 2
    from kbroker.config import ConfigError, load_broker_config

    try:
        config = load_broker_config(args.config, args.override, os.environ)
    except ConfigError as exc:
        print(f"kbroker: configuration error: {exc}", file=sys.stderr)
        return 2
    from kbroker.config.logger_levels import parse_levels
    from kbroker.log_setup import configure_logging

    try:
        configure_logging(
            level or config.logging_level,
            config.logging_format,
            parse_levels(config.logging_levels),
        )
    except ValueError as exc:
        print(f"kbroker: configuration error: {exc}", file=sys.stderr)
        return 2
    _log_inert_settings(config)
    _install_event_loop(args.event_loop)
    import asyncio

    from kbroker.controller.errors import ControllerStartError
    from kbroker.storage.meta_properties import MetaPropertiesError

    try:
        asyncio.run(_serve(config))
    except ConfigError as exc:
        print(f"kbroker: configuration error: {exc}", file=sys.stderr)
        return 2
    except (OSError, MetaPropertiesError, ControllerStartError) as exc:
        print(f"kbroker: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
