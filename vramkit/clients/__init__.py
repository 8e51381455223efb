"""Configuration for the editors and agents that use the server (issue 21): `vramkit client CLIENT`.

`configs.py` is pure: a `ClientTarget` (where the server is, what clients call the model, how long a request may
be) in, a ready configuration for aider, Continue, Cline or the OpenAI SDK out. `vramkit/commands/client.py`
builds the target from a plan or from the running server.
"""
