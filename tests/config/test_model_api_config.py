"""models[].api: which model API an entry's upstream speaks (docs/model-proxy.md), checked where it is written."""

from __future__ import annotations

from gateway.config.load import check_config, load_config


def test_api_defaults_to_chat_and_takes_the_three_apis(config):
    entries = "".join(f"  - {{name: m{i}, base_url: 'http://127.0.0.1:1/v1'{api}}}\n" for i, api in
                      enumerate(("", ", api: chat", ", api: responses", ", api: messages")))
    loaded = load_config(config(f"upstreams: []\nmodels:\n{entries}"))
    assert [m.api for m in loaded.spec.models] == ["chat", "chat", "responses", "messages"]


def test_an_unknown_api_is_refused_where_it_is_written(config):
    path = config("upstreams: []\nmodels:\n  - name: m\n    api: completions\n    base_url: 'http://127.0.0.1:1/v1'\n")
    loaded, diagnostics = check_config(path)
    assert loaded is None
    [problem] = diagnostics
    assert (problem.code, problem.line) == ("invalid-value", 4), problem
    assert "chat" in problem.message and "messages" in problem.message
