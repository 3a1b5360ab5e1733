"""The HTTP side: a FastAPI app with OpenAI's routes over one `EngineQueue`.

    GET  /health                 200 when a model is ready, 503 while loading
    GET  /v1/models              the checkpoint's id and one id per submodel in memory
    GET  /v1/models/{id}
    POST /v1/chat/completions    JSON, or server-sent events with "stream": true
    POST /v1/completions         a raw prompt continued (completions_api.py)
    POST /v1/responses           OpenAI's Responses, stateless (responses_api.py)
    POST /v1/messages            Anthropic's Messages (anthropic_api.py)
    POST /v1/messages/count_tokens   the tokens such a request's prompt takes
    POST /api/chat, /api/generate    Ollama's (ollama_api.py), NDJSON when streamed
    GET  /api/tags, /api/version, POST /api/show

FastAPI/Starlette do the HTTP, the body limit and the SSE framing; this file only routes, checks the
key, and turns the engine's events into responses (each protocol is in its own module). No route
reads or writes a file. Every error leaves in the shape of its route's API: OpenAI's
{"error": {message, type, param, code}}, or Anthropic's on /v1/messages.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import deque
from dataclasses import replace

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.sse import EventSourceResponse, format_sse_event
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..engine_queue import READY, EngineQueue, EngineUnavailable, QueueFull
from ..errors import ElasticError
from ..events import Done
from .access_rules import key_matches
from .anthropic_api import MessagesApi, parse_count
from .completions_api import CompletionsApi
from .gate import RequestGate
from .jobs import Job
from .ollama_api import VERSION, OllamaChat, OllamaGenerate, model_entry, show_model
from .openai_api import ChunkStream, completion, new_id, parse_chat
from .request_log import RequestLog, RequestLogging
from .responses_api import ResponsesApi
from .serving import AnswerLogprobs, ApiError, ServedModel
from .web_rules import WebRules

MAX_BODY_BYTES = 4 * 1024 * 1024  # a long conversation is well under this; anything bigger is refused (413)
DISCONNECT_POLL_S = 0.25  # a non-streamed reply looks for a hung-up client this often


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class BodyLimit:
    """Refuses a request body over `limit` bytes with 413 in OpenAI's shape: at once when its
    Content-Length says so, else as soon as the bytes read pass the limit. (Starlette's own limiter
    answers in plain text.)"""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = ApiError(413, f"the request body is larger than {self.limit} bytes", None, "body_too_large")
        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > self.limit:
            return await JSONResponse(error_body(scope["path"], too_large), 413)(scope, receive, send)
        total = 0

        async def limited_receive():
            nonlocal total
            message = await receive()
            if message["type"] == "http.request":
                total += len(message.get("body", b""))
                if total > self.limit:
                    raise too_large  # inside the route's body read: answered by the ApiError handler
            return message

        await self.app(scope, limited_receive, send)


def create_app(queue: EngineQueue, api_key: str | None = None, max_body_bytes: int = MAX_BODY_BYTES, *,
               web: WebRules, requests: RequestLog | None = None) -> FastAPI:
    """The app over `queue`; `web`: the Host names and page origins it accepts (gate.py, web_rules.py);
    `requests`: where each request's method, route, status and time are kept (request_log.py)."""
    app = FastAPI(title="Elastic Chat", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    app.add_middleware(RequestGate, rules=web)  # outside the body limit: it refuses before the body is read
    if requests is not None:  # outermost: the gate's refusals are logged too
        app.add_middleware(RequestLogging, log=requests)
    server = _Server(queue, api_key)
    app.state.queue, app.state.records, app.state.jobs = queue, server.records, server.jobs
    _add_error_handlers(app)
    app.include_router(_health_routes(server))
    app.include_router(_model_routes(server))
    app.include_router(_reply_routes(server))
    app.include_router(_ollama_routes(server))
    return app


class _Server:
    """What the routes share: the engine queue, the key, the model served, the requests in flight."""

    def __init__(self, queue: EngineQueue, api_key: str | None):
        self.queue, self.api_key = queue, api_key
        self.records = deque(maxlen=256)  # JobRecord of finished requests, newest last
        self.jobs: set[Job] = set()  # requests in line or running
        self._served: tuple = (None, None)  # (engine, ServedModel): recomputed when the app loads another model

    def served(self) -> ServedModel:
        engine = self.queue.check_ready()
        if self._served[0] is not engine:
            self._served = (engine, ServedModel.from_engine(engine))
        return self._served[1]

    def authorized(self, request: Request) -> bool:
        """The key comes as `Authorization: Bearer KEY` (the scheme in any case), the only form read."""
        if not self.api_key:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":  # Anthropic's clients send the key as x-api-key
            token = request.headers.get("x-api-key", "")
        return key_matches(token.strip(), self.api_key)

    def require_key(self, request: Request) -> None:
        if not self.authorized(request):
            raise ApiError(401, "missing or incorrect API key: send it as 'Authorization: Bearer KEY' "
                                "(or 'x-api-key: KEY')", None, "invalid_api_key")

    def cache_scope(self, cache_key: str | None) -> str:
        """A request reuses no other request's cached prompt (nor the app window's), so neither its
        `cached_tokens` nor its speed can tell a client what anyone else asked; only requests that
        send the same `prompt_cache_key` with the same API key share theirs."""
        if cache_key is None:
            return f"server request {new_id()}"
        digest = hashlib.sha256(f"{self.api_key or ''}\0{cache_key}".encode("utf-8", "surrogatepass")).hexdigest()
        return f"server key {digest}"

    def open(self, parsed, request: Request) -> Job:
        """The request's reply enters the engine's line (QueueFull: the line is full, nothing started)."""
        client = request.client
        who = f"server {client.host}:{client.port}" if client else "server"
        # routes without OpenAI's prompt_cache_key (completions, messages): a fresh scope per request
        own = replace(parsed.request, cache_scope=self.cache_scope(getattr(parsed, "cache_key", None)))
        job = Job(self.queue, own, who, asyncio.get_running_loop(), self.records.append)
        self.jobs.add(job)
        return job

    def close(self, job: Job) -> None:
        job.cancel()  # a no-op once the reply is done
        self.jobs.discard(job)


# ---------------------------------------------------------------------- errors, each in its API's shape


def error_body(path: str, error: ApiError) -> dict:
    """The error in the shape of the API whose route `path` is (OpenAI's for every other path)."""
    path = path.rstrip("/").removesuffix("/count_tokens")  # (Anthropic's, as /v1/messages answers)
    if path.startswith("/api/"):
        return OllamaChat.error_body(error)
    api = next((api for api in REPLY_APIS if "/v1" + api.path == path), None)
    return api.error_body(error) if api else error.body()


def _add_error_handlers(app: FastAPI) -> None:
    """Every error leaves in the shape of the API whose route it came from (OpenAI's elsewhere)."""

    def answer(request, e: ApiError, headers=None) -> JSONResponse:
        return JSONResponse(error_body(request.url.path, e), e.status, headers=headers)

    @app.exception_handler(ApiError)
    async def _api_error(request, e: ApiError):
        return answer(request, e, {"WWW-Authenticate": "Bearer"} if e.status == 401 else None)

    @app.exception_handler(EngineUnavailable)
    async def _unavailable(request, e: EngineUnavailable):
        code = "model_loading" if e.state == "loading" else "model_not_ready"
        return answer(request, ApiError(503, str(e), None, code), {"Retry-After": "5"})

    @app.exception_handler(QueueFull)
    async def _full(request, e: QueueFull):
        return answer(request, ApiError(429, str(e), None, "queue_full"), {"Retry-After": "1"})

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, e: StarletteHTTPException):
        routes = ", ".join("/v1" + api.path for api in REPLY_APIS)
        messages = {404: f"no route {request.method} {request.url.path}; this server has /v1/models, "
                         f"{routes}, Ollama's /api/chat, /api/generate, /api/tags, /api/show, /api/version "
                         "and /health",
                    405: f"{request.method} is not allowed on {request.url.path}"}
        return answer(request, ApiError(e.status_code, messages.get(e.status_code, str(e.detail))))


# ---------------------------------------------------------------------- health and models


def _health_routes(server: _Server) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health(request: Request):
        state = server.queue.snapshot()
        if state.state != READY:
            return JSONResponse({"status": state.state, "message": state.message}, 503, headers={"Retry-After": "5"})
        if not server.authorized(request):
            return {"status": "ok"}
        return {"status": "ok", "model": server.served().id, "running": state.running is not None,
                "waiting": len(state.waiting)}

    return router


def _model_routes(server: _Server) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(server.require_key)])

    @router.get("/models")
    async def models():
        model = server.served()
        return {"object": "list", "data": [model.model_object(i) for i in model.ids()]}

    @router.get("/models/{model_id:path}")
    async def model(model_id: str):
        return server.served().model_object(model_id)

    return router


# ---------------------------------------------------------------------- the reply routes: a reply's life


class _ChatApi:
    """Chat completions in the shape every reply route has (see `_reply_routes`)."""
    path = "/chat/completions"
    parse = staticmethod(parse_chat)
    error_body = staticmethod(ApiError.body)

    def __init__(self, parsed):
        self.parsed, self.id, self.created = parsed, new_id(), int(time.time())
        self.chunks = ChunkStream(parsed, self.id, self.created)
        self.logprobs = AnswerLogprobs() if parsed.request.logprobs is not None else None

    def collect(self, event) -> None:
        if self.logprobs is not None:
            self.logprobs.add(event)

    def whole(self, prompt, done: Done, queue_ms: float) -> dict:
        return completion(self.parsed, prompt, done, self.id, self.created, queue_ms, self.logprobs)

    def on_event(self, event, queue_ms: float) -> list:
        out = [(None, chunk) for chunk in self.chunks.on_event(event, queue_ms)]
        return out + [(None, "[DONE]")] if isinstance(event, Done) else out

    def failed(self, error: ApiError) -> list:
        return [(None, error.body()), (None, "[DONE]")]


REPLY_APIS = (_ChatApi, CompletionsApi, ResponsesApi, MessagesApi)


def _reply_routes(server: _Server) -> APIRouter:
    """One POST route per API. An API class has `path`, `parse(body, served)` (-> a parsed request with
    `.request`, a ChatRequest, and `.stream`), `error_body(ApiError)`, and, built per reply from the
    parsed request, `collect(event)` (each event of a reply answered whole, before `whole`),
    `whole(prompt, done, queue_ms)` (the JSON answer) and `on_event(event, queue_ms)` /
    `failed(ApiError)` (its server-sent events as (event name or None, data) pairs; the stream ends after
    a Done or a failure)."""
    router = APIRouter(prefix="/v1", dependencies=[Depends(server.require_key)])
    for api in REPLY_APIS:
        router.add_api_route(api.path, _reply_route(server, api), methods=["POST"])
    router.add_api_route("/messages/count_tokens", _count_route(server), methods=["POST"])
    return router


def _ollama_routes(server: _Server) -> APIRouter:
    """Ollama's API: its two reply routes as the /v1 ones run (the same line, checks and rules), and
    the model routes its clients ask first. /api/version, as /health, tells nothing about the model and
    needs no key."""
    router = APIRouter(prefix="/api")
    keyed = [Depends(server.require_key)]
    for api in (OllamaChat, OllamaGenerate):
        router.add_api_route(api.path, _reply_route(server, api), methods=["POST"], dependencies=keyed)

    @router.get("/version")
    async def version():
        return {"version": VERSION}

    @router.get("/tags", dependencies=keyed)
    async def tags():
        served = server.served()
        return {"models": [model_entry(served, i) for i in served.ids()]}

    @router.post("/show", dependencies=keyed)
    async def show(request: Request):
        body = await _json_body(request)
        return Response(status_code=499) if body is None else show_model(server.served(), body)

    return router


def _count_route(server: _Server):
    """Anthropic's `/v1/messages/count_tokens`: the tokens the prompt of such a /v1/messages request
    takes, as the engine's template and tokenizer render it (tools and the thinking switch included)."""
    async def count_tokens(request: Request):
        body = await _json_body(request)
        if body is None:
            return Response(status_code=499)
        parsed = parse_count(body, server.served())
        request_ = parsed.request
        counter = server.queue.check_ready().token_counter(request_)
        if counter is None:  # a remote model's tokenizer is its own server's (chat_engine.py)
            raise ApiError(400, "this server relays a remote model and cannot count its tokens; ask the server "
                                "that runs the model", None, "invalid_request")
        try:
            tokens = await asyncio.to_thread(counter, list(request_.messages))
        except ElasticError as e:  # the template refused the conversation
            raise ApiError(400, str(e), "messages", "invalid_value") from None
        return {"input_tokens": tokens}

    return count_tokens


async def _json_body(request: Request):
    """The request's JSON body; None when the client hung up while sending it."""
    try:
        return json.loads(await request.body())
    except ClientDisconnect:  # hung up, or cut off for sending too slowly (connections.py)
        return None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "the request body is not valid JSON", None, "invalid_json") from None


def _reply_route(server: _Server, api):
    async def reply_route(request: Request):
        body = await _json_body(request)
        if body is None:
            return Response(status_code=499)
        parsed = api.parse(body, server.served())
        job = server.open(parsed, request)
        try:
            pending = await _first_items(job, request)
        except BaseException:
            server.close(job)
            raise
        if pending is None:  # the client hung up while waiting in line
            server.close(job)
            return Response(status_code=499)
        first = pending.pop(0)
        if isinstance(first, ApiError):
            server.close(job)
            raise first
        reply = api(parsed)
        if parsed.stream and getattr(api, "ndjson", False):  # Ollama's: one JSON object per line
            return StreamingResponse(_stream(server, job, reply, pending, _line), media_type="application/x-ndjson",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        if parsed.stream:
            return EventSourceResponse(_stream(server, job, reply, pending, _frame),
                                       headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            return await _whole(job, reply, pending, request)
        finally:
            server.close(job)

    return reply_route


async def _first_items(job: Job, request: Request) -> list | None:
    """Waits for the reply to begin (or fail), watching for a client that hangs up meanwhile."""
    while True:
        batch = await job.next_batch(DISCONNECT_POLL_S)
        if batch:
            return batch
        if await request.is_disconnected():
            return None


async def _whole(job: Job, reply, pending: list, request: Request):
    prompt, last_check = None, time.monotonic()
    while True:
        for event in pending:
            if isinstance(event, ApiError):
                raise event
            if prompt is None and getattr(event, "type", "") == "prefill":
                prompt = event
            reply.collect(event)
            if isinstance(event, Done):
                return reply.whole(prompt, event, job.queue_ms)
        if time.monotonic() - last_check > DISCONNECT_POLL_S:
            last_check = time.monotonic()
            if await request.is_disconnected():
                return Response(status_code=499)
        pending = await job.next_batch(DISCONNECT_POLL_S)


def _frame(name: str | None, data) -> bytes:
    return format_sse_event(data_str=data if isinstance(data, str) else _dumps(data), event=name)


def _line(name: str | None, data) -> bytes:
    return (_dumps(data) + "\n").encode("utf-8")


async def _stream(server: _Server, job: Job, reply, pending: list, frame):
    """The reply's events as `frame` writes them (server-sent events, or NDJSON lines); Starlette
    cancels this generator when the client hangs up, and the `finally` then stops the reply."""
    try:
        while True:
            out, finished = [], False
            for event in pending:
                try:
                    if isinstance(event, ApiError):
                        raise event
                    out += [frame(*item) for item in reply.on_event(event, job.queue_ms)]
                except ApiError as e:  # the reply failed after it began: the API's in-stream error
                    out += [frame(*item) for item in reply.failed(e)]
                    finished = True
                if finished or isinstance(event, Done):
                    finished = True
                    break
            if out:
                yield b"".join(out)
            if finished:
                return
            pending = await job.next_batch()
    finally:
        server.close(job)
