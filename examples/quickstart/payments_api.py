"""A tiny payments REST API (Starlette) the quick-start gateway launches and fronts over HTTP.

    python payments_api.py --port 8181
"""

from __future__ import annotations

import argparse
import itertools

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

_ids = itertools.count(1)
_accounts = {"acc-1": {"id": "acc-1", "owner": "Ana", "balance": 1200.0},
             "acc-2": {"id": "acc-2", "owner": "Ben", "balance": 40.0}}


async def get_account(request: Request) -> JSONResponse:
    account = _accounts.get(request.path_params["account_id"])
    if account is None:
        return JSONResponse({"error": "no such account"}, status_code=404)
    return JSONResponse(account)


async def transfer(request: Request) -> JSONResponse:
    body = await request.json()
    source, target = _accounts.get(body.get("from_account", "")), _accounts.get(body.get("to_account", ""))
    amount = float(body.get("amount", 0))
    if source is None or target is None:
        return JSONResponse({"error": "unknown account"}, status_code=404)
    if amount <= 0 or amount > source["balance"]:
        return JSONResponse({"error": "invalid amount"}, status_code=422)
    source["balance"] -= amount
    target["balance"] += amount
    return JSONResponse({"transfer_id": f"tr-{next(_ids)}", "amount": amount, "currency": body.get("currency")})


app = Starlette(routes=[
    Route("/accounts/{account_id}", get_account, methods=["GET"]),
    Route("/transfers", transfer, methods=["POST"]),
])

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8181)
    uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port, log_level="warning")
