"""Every error class declares its HTTP status next to its code and exit code (errors.py): a
person's mistake is 4xx, never 500; 5xx only for the server's own configuration, storage or model.
There is no table of codes to forget a new error in."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from starlette.testclient import TestClient

import kb_ai
from kb_ai.config import Settings
from kb_ai.errors import ConfigError, KaasError, LLMError, StorageError, error_classes
from kb_ai.server import create_app
from kb_ai.server.pages import error_response
from kb_ai.store.access import OWNER


def _every_error_class() -> list[type[KaasError]]:
    for module in pkgutil.walk_packages(kb_ai.__path__, "kb_ai."):
        if module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)
    return error_classes()


def test_every_error_class_declares_a_sane_http_status():
    classes = _every_error_class()
    assert len(classes) > 20  # the walk found them all (errors.py alone has 20)
    for cls in classes:
        status = getattr(cls, "http_status", None)
        assert isinstance(status, int) and 400 <= status < 600, cls
        if status >= 500:  # only failures of the server itself
            assert issubclass(cls, (ConfigError, StorageError, LLMError)), f"{cls.__name__} is a user error: 4xx"
        try:
            error = cls("the message")
        except TypeError:
            continue
        response = error_response(error, OWNER)
        assert response.status_code == status, cls
    assert KaasError.http_status == 400  # a new error is a user's error unless it says otherwise


@pytest.mark.parametrize("citations", [[], None, ""])
def test_saving_an_answer_that_cites_nothing_is_a_client_error(sample_kb, citations):
    with TestClient(create_app(Settings(kb=sample_kb.root), mcp=False)) as client:
        response = client.post("/api/answers", json={"question": "q", "answer": "a", "citations": citations})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "not_saved"
    assert "cites no page" in response.json()["error"]["message"]
    assert not (sample_kb.wiki_dir / "answers").exists()


def test_an_unknown_page_on_the_wiki_route_keeps_its_status(sample_kb):
    with TestClient(create_app(Settings(kb=sample_kb.root), mcp=False)) as client:
        assert client.get("/wiki/nowhere/page.md").status_code == 404
        assert client.get("/api/pages/..%2f..%2fetc/passwd.md").status_code in (400, 404)
