"""Every error the server sends, in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Schema violations (FastAPI's validation errors, malformed JSON) are 400 ``invalid_request_error`` as with
OpenAI and vLLM; unknown routes 404, wrong methods 405, oversized bodies 413, a full queue 503 with
``Retry-After``, anything unexpected 500 ``server_error`` (the traceback goes to the log, not to the client).
"""

from __future__ import annotations

import logging
from http import HTTPStatus

log = logging.getLogger("polyrl.serve")


class ServeError(Exception):
    """A request the server refuses: turned into an OpenAI error response by the app's handler."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, param=None, code=None, headers=None):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content=error_body(status, message, param, code), headers=headers)


def validation_message(errors: list[dict]) -> tuple[str, str | None]:
    """The first of FastAPI's validation errors as ``(message, param)``; ``param`` is the dotted field path."""
    err = errors[0]
    if err["type"] == "json_invalid":
        return f"the request body is not valid JSON ({err.get('ctx', {}).get('error', err['msg'])})", None
    where = ".".join(str(p) for p in err["loc"][1:]) if err["loc"][:1] == ("body",) else ""
    message = err["msg"].removeprefix("Value error, ")
    if not where:  # the body as a whole: missing, or not an object (or not sent as application/json)
        return f"the request body must be a JSON object (Content-Type: application/json): {message}", None
    return f"{where}: {message}", where


def install_handlers(app) -> None:
    """Route FastAPI's validation errors, Starlette's HTTP errors, ServeError and any other exception to
    OpenAI-shaped JSON responses."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    @app.exception_handler(RequestValidationError)
    async def _invalid(_, exc: RequestValidationError):
        message, where = validation_message(exc.errors())
        return error_response(400, message, param=where)

    @app.exception_handler(HTTPException)
    async def _http(request, exc: HTTPException):
        if exc.status_code == 404:
            return error_response(404, f"no route {request.url.path}", code="unknown_url")
        message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(ServeError)
    async def _refused(_, exc: ServeError):
        return error_response(exc.status, exc.message, param=exc.param, code=exc.code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request, exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal error ({type(exc).__name__}); see the server log")
