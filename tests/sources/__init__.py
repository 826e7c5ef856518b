"""capsule.sources: the fetching mechanisms, against fakes (the real fetches are in tests/thirdparty)."""
