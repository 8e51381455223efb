"""The embedding cache service (issue 3): FastAPI app, encoder, micro-batcher, precache, stats.

`create_app(config)` in `app.py` is the entry; `server.serve(config)` runs it under uvicorn.
Pure key/vector/chunk logic lives in `vramkit.core.embed_keys`; Redis in `vramkit.adapters.redis_store`.
"""
