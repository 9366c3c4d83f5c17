"""The Claude contextualizer's tests: each gets a loopback fake of the Anthropic API, and the key
it expects in ANTHROPIC_API_KEY (no ANTHROPIC_BASE_URL: a test that wants one sets it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.claude_support import KEY
from tests.fakes.anthropic_server import FakeAnthropic


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(api_key=KEY, latency=0.02, output_tokens=50) as server:
        yield server


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
