"""A local OpenAI-compatible server on the engine (`python -m runtime serve`, or the app's setting).

- `openai_api.py`    the protocol mapped onto `ChatRequest` and the engine's events (no HTTP)
- `jobs.py`          one request's reply: a thread in the engine's line (runtime/engine_queue.py),
                     its events handed to the HTTP loop
- `http_app.py`      the FastAPI routes, the API key, errors in OpenAI's shape, SSE
- `runner.py`        uvicorn in a thread, the safe-address rules, the `serve` command

FastAPI and uvicorn are imported only by `http_app.py` and `runner.py`'s start, so importing the engine
never needs them.
"""
