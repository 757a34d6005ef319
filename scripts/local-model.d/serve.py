"""llama.cpp's HTTP server (OpenAI-compatible /v1) through PyPI's xllamacpp.

Started by scripts/local-model: `python serve.py MODEL PORT CTX THREADS [TEMPLATE]`.
Listens on 127.0.0.1:PORT until SIGTERM. With TEMPLATE (a Jinja chat template
file) it replaces the model's own; either way the Jinja path is used, so tool
calls come back as native `tool_calls`.
"""
import signal
import sys
import threading

import xllamacpp


def main() -> int:
    if len(sys.argv) not in (5, 6):
        print("usage: serve.py MODEL PORT CTX THREADS [TEMPLATE]", file=sys.stderr)
        return 2
    model, port, ctx, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    params = xllamacpp.CommonParams()
    params.model.path = model
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.use_jinja = True
    if len(sys.argv) == 6:
        with open(sys.argv[5], encoding="utf-8") as f:
            params.chat_template = f.read()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address}", file=sys.stderr, flush=True)
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
