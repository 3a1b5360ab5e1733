"""A local OpenAI-compatible server on the engine (`python -m runtime serve`, or the app's setting).

Laid out as vLLM lays out its entrypoints/openai/ (no HTTP in the first five):

- `serving.py`       what the four routes share: the served model, the errors, a reply's end and `elastic` object
- `request_fields.py` the request fields they share: the reasoning fields on the depth table, sampling, stops
- `openai_api.py`    chat completions; `openai_tools.py` its tools and response formats
- `completions_api.py`, `responses_api.py`, `anthropic_api.py`   the other three routes' protocols
- `jobs.py`          one request's reply: a thread that runs it in turn (engine_queue.reply_in_turn),
                     its events handed to the HTTP loop
- `http_app.py`      the FastAPI routes, a cache scope per request, errors in each API's shape, SSE
- `access_rules.py`  the address it may listen on and the API key (its form, its constant-time check)
- `gate.py`          refuses what a web page could send, before any work (Host, Origin, content type, CORS)
- `web_rules.py`     which Host names and page origins are accepted (no web library: the settings use it too)
- `connections.py`   uvicorn's protocol with bounds: a request arrives whole in time, connections counted
- `runner.py`        uvicorn in a thread, and the `serve` command

The principles, one per class of attack (docs/server.md "Security" has the rules in full):
- Every request is addressed to this server by a name the user chose (DNS rebinding: web_rules.py).
- No web page calls the server unless the user allowed its origin; no body is read that is not JSON.
- Refusals come before any work: before the body is read, before the engine's line (gate.py).
- No client learns what another asked: a request reuses only its own cached prompt (http_app.py).
- No client holds the server: time and connections are bounded (connections.py); the key is compared
  in constant time (access_rules.py).

FastAPI and uvicorn are imported only by `http_app.py`, `connections.py` and `runner.py`'s start, so
importing the engine never needs them.
"""
