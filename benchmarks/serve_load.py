"""Load test of `polyrl serve` on loopback: latency, throughput, and how the bounded queue sheds load.

    .venv/bin/python benchmarks/serve_load.py [--checkpoint DIR] [--requests 200] [--concurrency 32]
                                              [--max-tokens 16] [--max-waiting 16] [--threads T]
                                              [--time-limit 120]

Starts `polyrl serve` on 127.0.0.1 (a free port; nothing else is contacted) with ``DIR`` (default: the embedded
tiny model, untrained, saved to a temporary directory), sends ``--requests`` chat completions from
``--concurrency`` client threads, and prints latency p50/p99 of the answered requests, completions and tokens
per second, how many were refused with 503 (queue full), and the server's resident memory before and after.
Then it sends one 20 MB body (the size that used to take 51 s and 4.2 GB) and reports how the server answered.
Everything is bounded: at most 2,000 requests, ``--time-limit`` seconds of sending, and the server is stopped.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from machine import cpu_model

from polyrl.device import HOST as HOST_DEVICE

HOST = "127.0.0.1"  # loopback only


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def tiny_checkpoint(directory: Path) -> Path:
    from polyrl.policy.loading import ModelConfig, load_policy

    path = directory / "tiny_model"
    load_policy(ModelConfig(), device=HOST_DEVICE).save(path)
    return path


def start_server(checkpoint: Path, port: int, max_waiting: int, max_tokens: int, threads: int | None):
    command = [sys.executable, "-m", "polyrl", "serve", str(checkpoint), "--host", HOST, "--port", str(port)]
    command += ["--max-waiting", str(max_waiting), "--max-tokens", str(max_tokens)]
    command += ["--threads", str(threads)] if threads else []
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_healthy(client, url: str, server: subprocess.Popen, timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"polyrl serve exited with code {server.returncode}")
        try:
            if client.get(f"{url}/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"polyrl serve did not answer /health within {timeout:.0f} s")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def one_request(client, url: str, max_tokens: int, deadline: float) -> tuple[int, float, int]:
    """``(status, seconds, completion tokens)``; status 0 for a transport error, -1 when past the deadline."""
    import httpx

    if time.monotonic() > deadline:
        return -1, 0.0, 0
    body = {"messages": [{"role": "user", "content": "12+7"}], "max_tokens": max_tokens, "temperature": 1.0}
    t0 = time.perf_counter()
    try:
        response = client.post(f"{url}/v1/chat/completions", json=body)
    except httpx.TransportError:
        return 0, time.perf_counter() - t0, 0
    tokens = response.json()["usage"]["completion_tokens"] if response.status_code == 200 else 0
    return response.status_code, time.perf_counter() - t0, tokens


def oversize_probe(client, url: str, megabytes: int = 20) -> str:
    """How the server answers one ``megabytes`` MB body: status, seconds."""
    import httpx

    body = b'{"messages": [{"role": "user", "content": "' + b"x" * (megabytes << 20) + b'"}]}'
    t0 = time.perf_counter()
    try:
        response = client.post(
            f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        outcome = f"HTTP {response.status_code} ({response.json()['error'].get('code')})"
    except httpx.TransportError as exc:  # the server may close the connection before the client finishes sending
        outcome = f"connection closed by the server ({type(exc).__name__})"
    return f"{megabytes} MB body: {outcome} after {time.perf_counter() - t0:.2f} s"


def report(results: list[tuple[int, float, int]], wall: float) -> list[str]:
    ok = [(s, t, n) for s, t, n in results if s == 200]
    latencies = np.array([t for _, t, _ in ok]) * 1000
    lines = [f"sent {sum(s != -1 for s, _, _ in results)} requests in {wall:.1f} s"]
    if ok:
        lines.append(
            f"answered 200: {len(ok)}; latency p50 {np.percentile(latencies, 50):.0f} ms, "
            f"p99 {np.percentile(latencies, 99):.0f} ms"
        )
        lines.append(f"throughput: {len(ok) / wall:.1f} completions/s, {sum(n for _, _, n in ok) / wall:.0f} tokens/s")
    counts = {s: sum(1 for r in results if r[0] == s) for s in sorted({r[0] for r in results}) if s not in (200,)}
    names = {503: "503 queue full", 0: "transport errors", -1: "not sent (time limit)"}
    lines += [f"{names.get(s, f'HTTP {s}')}: {c}" for s, c in counts.items()]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=None, help="Default: the untrained embedded tiny model.")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-waiting", type=int, default=16, help="polyrl serve --max-waiting.")
    parser.add_argument("--threads", type=int, default=None, help="polyrl serve --threads (default: its own).")
    parser.add_argument("--time-limit", type=float, default=120.0, help="Seconds of sending, at most.")
    args = parser.parse_args()
    if not 1 <= args.requests <= 2000 or not 1 <= args.concurrency <= 256:
        raise SystemExit("--requests must be in 1..2000 and --concurrency in 1..256")
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or tiny_checkpoint(Path(tmp))
        port = free_port()
        url = f"http://{HOST}:{port}"
        server = start_server(checkpoint, port, args.max_waiting, args.max_tokens, args.threads)
        limits = httpx.Limits(max_connections=args.concurrency + 2)
        try:
            with httpx.Client(timeout=120.0, limits=limits) as client:
                wait_healthy(client, url, server)
                rss_before = rss_mb(server.pid)
                deadline = time.monotonic() + args.time_limit
                t0 = time.perf_counter()
                with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                    jobs = [
                        pool.submit(one_request, client, url, args.max_tokens, deadline) for _ in range(args.requests)
                    ]
                    results = [j.result() for j in jobs]
                wall = time.perf_counter() - t0
                rss_after = rss_mb(server.pid)
                probe = oversize_probe(client, url)
                rss_probe = rss_mb(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(
        f"{cpu_model()}; {args.requests} requests, {args.concurrency} concurrent, max_tokens {args.max_tokens}, "
        f"--max-waiting {args.max_waiting}, --threads {args.threads or 'default'}; "
        f"1-min load average {os.getloadavg()[0]:.1f}"
    )
    for line in report(results, wall):
        print("  " + line)
    print(f"  server RSS: {rss_before:.0f} MB before, {rss_after:.0f} MB after the load")
    print(f"  {probe}; server RSS after it {rss_probe:.0f} MB")


if __name__ == "__main__":
    main()
