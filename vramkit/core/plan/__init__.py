"""The request as asked (request.py), the launch knobs (knobs.py), the plan and its alternatives (planner.py),
the KT hybrid mode (kt_hybrid.py)."""
