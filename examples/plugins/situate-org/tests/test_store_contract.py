"""The store this package registers meets situate's store contract, imported from
`situate.testing` as any plugin imports it."""

from __future__ import annotations

import uuid

import pytest

from situate.storage import open_store
from situate.testing.store import StoreContract


class TestOrgMemoryStore(StoreContract):
    @pytest.fixture
    def store(self):
        s = open_store(f"orgmem://contract-{uuid.uuid4().hex}")
        assert s.uri.startswith("orgmem://")
        yield s
        s.close()
