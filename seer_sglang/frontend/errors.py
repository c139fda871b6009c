"""OpenAI-style error responses: every bad input gets a JSON error with a 4xx status."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException


class APIError(Exception):
    def __init__(self, message: str, status_code: int = 400, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.status_code, self.type, self.param, self.code = message, status_code, type_, param, code


class ClientGone(Exception):
    """The client closed the connection before its answer was ready; its work has been freed."""


# nginx's status for a request whose client closed the connection: logged and counted, never read
CLIENT_CLOSED = 499


class BodyTooLarge(StarletteHTTPException):
    """The bytes read of a body passed ``--max-body-mb`` (raised while a route reads it). An HTTP
    exception, so FastAPI's body parsing passes it on as it is."""

    def __init__(self, message: str):
        super().__init__(413, message)


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | int | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(message: str, status_code: int = 400, **kwargs) -> JSONResponse:
    return JSONResponse(error_body(message, **kwargs), status_code=status_code)


def _branch_name(part) -> bool:
    """A union branch's tag in a pydantic error path (``RolloutPrompt``, ``str``, ``list[int]``)."""
    return isinstance(part, str) and (part[:1].isupper() or part in ("str", "int", "float", "bool")
                                      or part.startswith(("list[", "dict[")))


def _describe_validation(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    # In a union (a prompt is a string or an object) pydantic reports every branch; the deepest error
    # is the one about what the client meant. The branches' own names are not part of the path.
    first = max(errors, key=lambda e: len(e.get("loc", ())))
    loc = [str(p) for p in first.get("loc", ()) if p != "body" and not _branch_name(p)]
    if first.get("type") == "json_invalid":
        return f"invalid JSON body: {first.get('msg')}", None
    param = ".".join(loc) or None
    return f"{param or 'body'}: {first.get('msg')}", param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError):
        return error_response(exc.message, exc.status_code, type_=exc.type, param=exc.param, code=exc.code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError):
        message, param = _describe_validation(exc)
        return error_response(message, 400, param=param)

    @app.exception_handler(ClientGone)
    async def _client_gone(_: Request, exc: ClientGone):
        return Response(status_code=CLIENT_CLOSED)

    @app.exception_handler(BodyTooLarge)
    async def _body_too_large(_: Request, exc: BodyTooLarge):
        return error_response(str(exc.detail), 413, code="request_too_large")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException):
        return error_response(str(exc.detail), exc.status_code,
                              type_="invalid_request_error" if exc.status_code < 500 else "server_error")
