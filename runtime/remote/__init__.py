"""Replies from an OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, another Elastic Chat's
`runtime serve`), as the same events as a local reply (runtime/events.py). No Qt.

    server = RemoteServer("http://gpu-box:8000", api_key)   # client.py: one bounded HTTP call at a time
    engine = RemoteEngine.connect(server, "star-elastic")    # engine.py: probes /v1/models, the depth levels
    for event in engine.stream(request, controls): ...       # reply.py: Token, Switch, Done

Everything the server sends is hostile until checked: sizes, ids and texts are validated, each
answer and each stream is bounded (sse.py), and every failure is one line saying what to do.
"""
