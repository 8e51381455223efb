"""The local dashboard (issue 13): FastAPI app, its data sources (live or a replayed capture), Prometheus metrics, and the static page."""
