"""A PostgreSQL DSN that libpq cannot parse never shows its password: not in the error, its chain, a log
line or what `gateway serve` prints (issue 18, item 14). libpq quotes the connection string it could not
parse, so the text to scrub is libpq's own."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest
import yaml

from gateway.cli import main
from gateway.core.errors import StoreUnavailable
from gateway.store.dsn import DsnScrubber
from gateway.store.postgres import PostgresStore

PASSWORD = "pw-5ecret-81f2"

# Each is refused by libpq's parser with a message that quotes part of the DSN (today: the password too).
MALFORMED = {
    "unclosed IPv6 bracket": f"postgresql://app:{PASSWORD}@[127.0.0.1/db",
    "space in the password": f"postgresql://app:{PASSWORD} x@127.0.0.1:1/db",
    "bad percent escape": f"postgresql://app:{PASSWORD}%zz@127.0.0.1:1/db",
}


def _all_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc)


@pytest.mark.parametrize("dsn", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_dsn_leaves_its_password_out_of_the_error_and_the_log(dsn, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreUnavailable) as raised:
        PostgresStore(dsn)
    text = _all_text(raised.value)
    assert "cannot connect to" in text  # still says what went wrong
    assert PASSWORD not in text
    assert PASSWORD not in caplog.text


def test_serve_with_a_malformed_dsn_prints_no_password(tmp_path: Path, capsys, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("GATEWAY_TEST_BAD_DSN", MALFORMED["unclosed IPv6 bracket"])
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text("policy: p\nrules: []\n", encoding="utf-8")
    config = {"policies": ["policies"], "audit": {"file": "data/audit.jsonl"},
              "store": {"postgres": {"dsn": {"env": "GATEWAY_TEST_BAD_DSN"}}}}
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    try:
        assert main(["serve", str(tmp_path / "gateway.yaml"), "--port", "0", "--log-level", "debug"]) == 1
    finally:
        logging.getLogger("gateway").setLevel(logging.NOTSET)  # serve sets the process's levels
    out, err = capsys.readouterr()
    assert "IPv6 host address" in err  # libpq's reason is kept
    assert PASSWORD not in out + err + caplog.text


def test_the_scrubber_keeps_what_is_not_secret():
    scrub = DsnScrubber(f"postgresql://127.0.0.1:1/db?password={PASSWORD}&nonsense=1")
    assert scrub('invalid URI query parameter: "nonsense"') == 'invalid URI query parameter: "nonsense"'
    assert scrub(f'bad value "{PASSWORD}&nonsense"') == 'bad value "***"'
    dsn = f"postgresql://app:{PASSWORD}@db.internal:5432/gw"
    assert DsnScrubber(dsn)(f"failed for {dsn}: bad") == "failed for postgresql://db.internal:5432/gw: bad"
