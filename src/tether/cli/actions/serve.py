"""``tether serve``: MCP over streamable HTTP (many conversations) on 127.0.0.1.

Prints the URL, the bearer token and ready-to-paste client configuration (``client_configs``)
before serving, and "Ready." with the panel's sign-in link only once requests are answered. Without
the panel's browser assets it still serves MCP and says why there is no panel. Binding to a
non-loopback address needs ``--allow-remote`` and prints a warning: anyone who can reach the port
and holds the token gets a shell.

Ctrl+C (or SIGTERM, or SIGHUP) always ends it: the first signal starts a graceful shutdown, and a
shutdown that has not finished ``_FORCE_EXIT_S`` later ends the process outright, SIGKILLing what
its commands still run. Nothing is lost that way — every acknowledged audit record is already on
disk, and the shells live on in tmux.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import uvicorn

from tether.cli.client_configs import Endpoint, banner_text, explicit_env, tether_command
from tether.config import Config, ensure_home, load_config, resolve_home
from tether.errors import UsageError
from tether.mcp.http import MCP_PATH, HttpSettings, build_http_app, host_name, is_loopback
from tether.mcp.http_conn import HeadDeadlineProtocol
from tether.mcp.logs import configure_logging
from tether.mcp.server import McpFrontDoor, settle_heap
from tether.mcp.token import load_or_create_token
from tether.panel.app import build_panel_app, login_url, missing_assets, unavailable_panel_routes
from tether.process.container import prepare as prepare_container
from tether.process.seal import seal_environment
from tether.process.tree import kill_live_trees
from tether.shell.sandbox import with_sandbox
from tether.tools.catalog import build_catalog

logger = logging.getLogger(__name__)

_FORCE_EXIT_S = 10.0
# What stops the server gracefully. SIGHUP (the terminal it runs in closed) too: its default
# action ended the process at once, and where no command container ends the commands with it,
# they ran on.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_watchdog_lock = threading.Lock()
_watchdog: threading.Timer | None = None


def _force_exit() -> None:
    print(
        f"tether serve: shutdown did not finish within {_FORCE_EXIT_S:g} s; exiting now "
        "(the shells keep running in tmux)",
        file=sys.stderr,
        flush=True,
    )
    # A command still within its grace would outlive us where no command container ends it.
    kill_live_trees()
    os._exit(1)


def _arm_watchdog() -> None:
    """Once per process: the shutdown a signal asked for ends within ``_FORCE_EXIT_S``."""
    global _watchdog
    with _watchdog_lock:
        if _watchdog is None:
            _watchdog = threading.Timer(_FORCE_EXIT_S, _force_exit)
            _watchdog.daemon = True
            _watchdog.start()


def _interrupted(signum: int, frame: object) -> None:
    """Before uvicorn serves (and after): what Python does on SIGINT, with the watchdog armed."""
    _arm_watchdog()
    raise KeyboardInterrupt


def _bind(host: str, port: int, *, host_from: str, port_from: str) -> socket.socket:
    """The listening socket; a ``UsageError`` naming the setting to change (as the person gave it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            fix = f"another program listens there; pick another {port_from} (0 picks a free port)"
        elif exc.errno == errno.EACCES:
            fix = f"a port below 1024 needs privileges; pick a {port_from} of 1024 or more"
        else:  # no interface has that address, or the name does not resolve
            fix = f"pick a {host_from} that is an address of this machine"
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}; {fix}") from exc
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


def banner(url: str, token: str, token_path: Path, endpoint: Endpoint) -> str:
    return "\n".join(
        [
            "tether serve: MCP over streamable HTTP",
            f"  URL:    {url}",
            f"  token:  {token}",
            f"          (stored in {token_path}; send it as 'Authorization: Bearer <token>')",
            f"  stdio:  {' '.join(endpoint.command)} mcp",
            "",
            "Connect a client: the stdio entries start their own tether; the HTTP entries use this",
            "server while it runs. Keep either or both.",
            "",
            banner_text(endpoint),
            "",
        ]
    )


class _Server(uvicorn.Server):
    """uvicorn's server without re-raising SIGINT/SIGTERM after a graceful shutdown (exit 0, no
    traceback), telling ``on_ready`` once it answers requests: the app's startup (MCP session
    manager) has run and the socket is being served. A failed startup exits before that."""

    def __init__(
        self, config: uvicorn.Config, on_ready: Callable[[], None], on_signal: Callable[[str], None]
    ) -> None:
        super().__init__(config)
        self._on_ready = on_ready
        self._on_signal = on_signal

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            settle_heap()
            self._on_ready()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handle(signum: int, frame: object) -> None:
            _arm_watchdog()
            self._on_signal(signal.Signals(signum).name)  # before anything is cancelled by it
            self.handle_exit(signum, None)

        originals = {sig: signal.signal(sig, handle) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


async def _serve(
    config: Config,
    settings: HttpSettings,
    sock: socket.socket,
    on_ready: Callable[[], None],
    panel_unavailable: str | None,
) -> None:
    catalog = build_catalog(config)
    prepare_container()  # started while the first call is on its way, not by it
    catalog.start()
    try:
        front_door = McpFrontDoor(
            catalog.registry,
            instructions=catalog.instructions(),
            on_conversation_end=catalog.end_conversation,
        )
        lifespans = []
        if panel_unavailable is None:
            panel = build_panel_app(
                registry=catalog.registry,
                config=config,
                token=settings.token,
                bind_host=settings.host,
                extra_hosts=settings.allowed_hosts,
            )
            routes, lifespans = panel.routes, [panel.lifespan]
        else:
            routes = unavailable_panel_routes()
        app = build_http_app(front_door, settings, routes=routes, lifespans=lifespans)
        server = _Server(
            uvicorn.Config(
                app, http=HeadDeadlineProtocol, log_level="warning", lifespan="on", access_log=False
            ),
            on_ready=on_ready,
            # Every call the shutdown cancels is audited as ended by this signal (server-stopped).
            on_signal=catalog.stop.begin,
        )
        await server.serve(sockets=[sock])
    finally:
        with anyio.CancelScope(shield=True):
            await catalog.aclose()


def run(args: argparse.Namespace) -> int:
    # First of all, before the banner that says "Press Ctrl+C": a signal that comes while the app
    # is still starting (before uvicorn takes the signals over) ends the start-up, watchdog armed.
    # Installed explicitly because a parent may have left SIGINT ignored (Python then keeps it so).
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _interrupted)
    home = ensure_home(resolve_home())
    config = load_config(home)
    if args.sandbox:
        config = with_sandbox(config)
    seal_environment(config.env)  # before any thread, child or tmux server exists
    host = (args.host or config.server.host).strip()
    port = config.server.port if args.port is None else args.port
    # Named as the person gave it: on the command line, or in config.toml.
    port_from = "config.toml: [server].port" if args.port is None else "--port"
    host_from = "config.toml: [server].host" if not args.host else "--host"
    if not 0 <= port <= 65535:
        raise UsageError(f"{port_from} {port} is out of range; allowed: 0-65535 (0 picks a free port)")
    if not is_loopback(host) and not args.allow_remote:
        raise UsageError(
            f"{host_from} {host} is not a loopback address; binding it exposes a shell to the network. "
            "Add --allow-remote if that is what you want"
        )
    allowed = []
    for value in args.allowed_host:
        name = host_name(value)
        if name is None:
            raise UsageError(
                f"--allowed-host {value!r} is not a host name a client can send; give a name such as "
                "box.lan or an address such as 192.168.1.5 (no scheme, port, path or wildcard)"
            )
        allowed.append(name)
    configure_logging(home, "serve")
    if not is_loopback(host):
        print(
            f"WARNING: serving on {host}: anyone who can reach this port and holds the token gets a shell",
            file=sys.stderr,
        )
    token = load_or_create_token(home)
    sock = _bind(host, port, host_from=host_from, port_from=port_from)
    bound_port = sock.getsockname()[1]
    if host in ("0.0.0.0", "::"):
        # A wildcard address is not something a client can dial: advertise a name that reaches us
        # (and accept it as a Host), the first --allowed-host or else this machine's name.
        allowed.append(socket.gethostname())
        url_host = allowed[0]
    else:
        url_host = f"[{host}]" if ":" in host else host
    url = f"http://{url_host}:{bound_port}{MCP_PATH}"
    endpoint = Endpoint(command=tether_command(), url=url, token=token, env=explicit_env())
    print(banner(url, token, home / "token", endpoint), flush=True)
    unavailable = missing_assets()
    if unavailable is not None:
        # MCP does not need the panel: serve it, and say plainly why there is no panel.
        print(f"Panel: unavailable: {unavailable}", flush=True)
        logger.warning("panel unavailable: %s", unavailable)
    panel_link = login_url(f"http://{url_host}:{bound_port}", token)

    def ready() -> None:
        logger.info("tether serve listening on %s (pid %d)", url, os.getpid())
        print("Ready. Press Ctrl+C to stop.", flush=True)
        if unavailable is None:
            print(f"Panel (open this link once; it signs you in): {panel_link}", flush=True)

    settings = HttpSettings(host=host, token=token, allowed_hosts=tuple(allowed))
    try:
        anyio.run(_serve, config, settings, sock, ready, unavailable)
    except KeyboardInterrupt:
        return 130  # stopped while starting: nothing was served yet
    finally:
        sock.close()
    return 0
