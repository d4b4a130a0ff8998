"""Completions from any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, `polyrl serve`, hosted APIs).

Requests run on a bounded thread pool. Rate limits (429), server errors (5xx), timeouts and connection
errors are retried with exponential backoff; anything else (401, 404, 400) fails at once, because
retrying cannot fix a wrong key, model name or request.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from urllib.parse import urlparse

from polyrl.errors import UserError
from polyrl.eval.sources import Completion, OnDone, SampleRequest
from polyrl.tasks.base import TEXT_ONLY


class EndpointError(UserError):
    """The endpoint kept failing (after retries) or refused the request."""


def normalize_base_url(url: str) -> str:
    """``http://host:port`` → ``http://host:port/v1``; a URL with a path is kept as given."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UserError(f"endpoint {url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
    return url.rstrip("/") + ("/v1" if parsed.path in ("", "/") else "")


class EndpointSource:
    """Chat completions over HTTP with the official ``openai`` client, ``concurrency`` requests at a time."""

    modalities = TEXT_ONLY
    """Requests carry the problems' text only (a problem's images are not sent)."""

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout: float = 60.0,
        retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
    ):
        try:
            from openai import OpenAI
        except ImportError:
            raise UserError("evaluating an endpoint needs the openai client: pip install 'polyrl[serve]'") from None
        self.url = normalize_base_url(url)
        self.model = model
        self.concurrency = concurrency
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        # the client's own retries are off: ours are counted, logged in errors and backed off the same way
        self.client = OpenAI(base_url=self.url, api_key=api_key or "EMPTY", timeout=timeout, max_retries=0)
        self.description = f"{self.url} (model {model})"

    def complete(self, requests: Sequence[SampleRequest], on_done: OnDone) -> None:
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="polyrl-eval")
        # Set by the worker whose request failed, before its future completes: a worker that is free picks the next
        # request at once, before this thread can wake up and cancel what is queued, so the workers themselves must
        # stop sending (with one worker, a refused request is then the only one sent, whatever the timing).
        failed_once = threading.Event()

        def attempt(request: SampleRequest) -> Completion:
            if failed_once.is_set():
                raise _Cancelled
            try:
                return self.request(request)
            except BaseException:
                failed_once.set()
                raise

        pending: dict[Future, SampleRequest] = {pool.submit(attempt, r): r for r in requests}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                failed = None
                for future in done:
                    request = pending.pop(future)
                    if future.exception() is None:
                        on_done(request, future.result())
                    elif not isinstance(future.exception(), _Cancelled):
                        failed = failed or future.exception()
                if failed is not None:
                    raise failed
        finally:
            # on an error or Ctrl-C, drop what has not started; what finished is already saved by on_done
            pool.shutdown(wait=False, cancel_futures=True)

    def request(self, r: SampleRequest) -> Completion:
        """One chat completion, retried on transient failures."""
        import openai

        sampling = {"temperature": 0.0} if r.greedy else {"temperature": r.temperature, "top_p": r.top_p}
        for attempt in range(self.retries + 1):
            try:
                response = self.client.chat.completions.create(
                    model=self.model, messages=r.messages, max_tokens=r.max_new_tokens, n=1, **sampling
                )
                break
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as exc:
                if attempt == self.retries:
                    raise EndpointError(f"endpoint {self.url} failed {attempt + 1} times: {_describe(exc)}") from None
                time.sleep(self._delay(attempt, exc))
            except openai.APIStatusError as exc:
                raise EndpointError(f"endpoint {self.url} refused the request: {_describe(exc)}") from None
        choices = getattr(response, "choices", None) or []
        if not choices:  # an endpoint that returns no choice gave no answer: scored as an empty response
            return Completion("", 0, True)
        choice = choices[0]
        text = choice.message.content if choice.message is not None else None
        usage = getattr(response, "usage", None)
        tokens = getattr(usage, "completion_tokens", None) if usage is not None else None
        return Completion(text if isinstance(text, str) else "", tokens, choice.finish_reason != "length")

    def _delay(self, attempt: int, exc: Exception) -> float:
        """Exponential backoff with jitter; a server's Retry-After (seconds) wins when it asks for longer."""
        delay = min(self.max_backoff, self.backoff * 2**attempt) * (0.5 + random.random() / 2)
        response = getattr(exc, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        try:
            return max(delay, min(float(retry_after), self.max_backoff)) if retry_after else delay
        except ValueError:
            return delay


class _Cancelled(Exception):
    """A queued request that was not sent because another one had failed."""


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    kind = type(exc).__name__
    message = str(getattr(exc, "message", exc)).splitlines()[0][:200]
    return f"{kind} (HTTP {status}): {message}" if status else f"{kind}: {message}"
