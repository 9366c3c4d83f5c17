"""What a plugin's tests need from situate: the store contract as capability mixins
(`situate.testing.store`) and a deterministic embedding that needs no model
(`situate.testing.fakes`). Imported by tests only: nothing in situate imports it."""
