"""The HTTP edge: uvicorn's connection protocol with its bounds (``protocol``), the checks every request passes
(``edge``), each key's share of the connections (``shares``) and the router's refusals as JSON (``errors``).

Only ``_sdk.py`` touches uvicorn's internals; tests/frontends/http/test_sdk.py pins each.
"""
