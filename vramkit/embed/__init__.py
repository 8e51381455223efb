"""The embedding cache service (issues 3, 10): FastAPI app, HTTP guard, encoder worker, fair queue,
precache, stats.

`create_app(config)` in `app.py` is the entry; `server.serve(config)` runs it under uvicorn.
Pure key/vector/chunk logic lives in `vramkit.embed.keys`; Redis in `vramkit.adapters.redis_store`.
"""
