"""Layer 3, quality: the declared expectations run as Great Expectations suites, and their Data Docs.
Imports `core` and `storage`."""
