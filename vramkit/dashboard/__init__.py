"""The local dashboard (issue 13): the FastAPI app, its data sources (live, or a replayed capture),
Prometheus metrics, and the static page."""
