"""What a document's stored rows are fingerprinted with: a change of anything that changes a
context (the contextualizer's identity) or the chunking re-processes the document."""

from __future__ import annotations

from situate.pipeline.plan import pipeline_id
from situate.tasks.contexts.base import Contextualizer, NoContext
from situate.tasks.contexts.structural import StructuralContextualizer


class _Paid(Contextualizer):
    name = "paid"

    def __init__(self, **identity: object) -> None:
        self.identity = {"provider": "paid", "model": "m", "prompt": "v1", "max_tokens": 100,
                         **identity}

    def cache_identity(self):
        return self.identity


def test_free_providers_keep_the_fingerprint_of_earlier_versions():
    # Collections ingested before the identity became a dict must not all be re-processed.
    assert pipeline_id(StructuralContextualizer(), 800, 100) == "structural|||800|100"
    assert pipeline_id(NoContext(), 800, 100) == "none|||800|100"


def test_every_identity_field_and_the_chunking_change_the_pipeline():
    base = pipeline_id(_Paid(), 800, 100)
    assert pipeline_id(_Paid(), 800, 100) == base
    for change in ({"model": "m2"}, {"prompt": "v2"}, {"max_tokens": 101}, {"group_size": 4}):
        assert pipeline_id(_Paid(**change), 800, 100) != base, change
    assert pipeline_id(_Paid(), 900, 100) != base
    assert pipeline_id(_Paid(), 800, 50) != base
