"""MooreEval HTTP client: batches, bounded concurrency, retries on transient failures only.

Transient: connection errors, 429 (waits Retry-After), 502/503/504. Anything else 4xx raises
ClientError naming the server's reason. Infrastructure results (verdict "infra_error") are
never turned into a score: reward_of() returns None and strict callers raise InfraError.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable


class ClientError(RuntimeError):
    """The server refused the request (bad input, auth); retrying will not help."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class InfraError(RuntimeError):
    """The verifier failed (not the candidate): no reward must be derived from it."""


def reward_of(row: dict) -> float | None:
    """The candidate's reward, or None when the verifier could not judge it."""
    if row.get("verdict") == "infra_error" or row.get("reward") is None:
        return None
    return float(row["reward"])


class MooreEvalClient:
    def __init__(self, url: str = "http://127.0.0.1:8080", token: str | None = None,
                 max_concurrency: int = 16, batch: int = 32, timeout_s: float = 3600,
                 poll_wait_s: float = 20, max_transient_retries: int = 8):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"server URL must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.max_concurrency = max(1, int(max_concurrency))
        self.batch = max(1, int(batch))
        self.timeout_s = timeout_s
        self.poll_wait_s = poll_wait_s
        self.max_transient_retries = max_transient_retries
        self._pool = ThreadPoolExecutor(max_workers=self.max_concurrency,
                                        thread_name_prefix="mooreeval")
        self._sem: asyncio.Semaphore | None = None
        self._sem_lock = threading.Lock()

    # -- HTTP -------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        backoff, transient = 0.2, 0
        while True:
            req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.poll_wait_s + 60) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as e:
                text = e.read().decode(errors="replace")
                if e.code == 429:
                    time.sleep(min(60.0, max(0.05, float(e.headers.get("Retry-After", "1")))))
                    continue
                if e.code not in (502, 503, 504):
                    try:
                        msg = json.loads(text).get("error", text)
                    except ValueError:
                        msg = text
                    raise ClientError(e.code, msg) from None
                err = f"HTTP {e.code}"
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                err = str(e)
            transient += 1
            if transient > self.max_transient_retries:
                raise InfraError(f"MooreEval at {self.url} unreachable after {transient} tries: {err}")
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def health(self) -> dict:
        return self._request("GET", "/health")

    # -- verification -----------------------------------------------------------------------
    def _verify_batch(self, items: list[dict]) -> list[dict]:
        sub = self._request("POST", "/v1/verify", {"candidates": items})
        ids = [j["id"] for j in sub["jobs"]]
        rows: list[dict | None] = [j.get("result") if j["status"] == "done" else None
                                   for j in sub["jobs"]]
        deadline = time.monotonic() + self.timeout_s
        while any(r is None for r in rows):
            if time.monotonic() > deadline:
                raise InfraError(f"timed out waiting for {sum(r is None for r in rows)} results")
            pending = [k for k, r in enumerate(rows) if r is None]
            got = self._request("POST", "/v1/results",
                                {"ids": [ids[k] for k in pending], "wait_s": self.poll_wait_s})
            for k, j in zip(pending, got["jobs"]):
                if j["status"] == "done":
                    rows[k] = j["result"]
                elif j["status"] == "unknown":
                    raise InfraError(f"server lost job {ids[k]}")
        return rows  # type: ignore[return-value]

    def verify(self, items: Iterable[dict]) -> list[dict]:
        """One result row per item, in order. An item: {"problem": key} or {"problem_source":
        src, "problem_name": name}, plus "answer" (raw model answer) and optional "sample_id"."""
        items = list(items)
        chunks = [items[i:i + self.batch] for i in range(0, len(items), self.batch)]
        out: list[dict] = []
        for rows in self._pool.map(self._verify_batch, chunks):
            out.extend(rows)
        return out

    async def averify(self, items: Iterable[dict]) -> list[dict]:
        """verify() for asyncio trainers: at most max_concurrency requests in flight, shared by
        every concurrent caller of this client."""
        items = list(items)
        with self._sem_lock:
            if self._sem is None:
                self._sem = asyncio.Semaphore(self.max_concurrency)
        loop = asyncio.get_running_loop()

        async def one(chunk: list[dict]) -> list[dict]:
            async with self._sem:
                return await loop.run_in_executor(self._pool, self._verify_batch, chunk)

        chunks = [items[i:i + self.batch] for i in range(0, len(items), self.batch)]
        out: list[dict] = []
        for rows in await asyncio.gather(*(one(c) for c in chunks)):
            out.extend(rows)
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False)
