"""Layer 5, sources: records into input changelogs, each exactly once (files, ticks). Imports `core` and
`storage`."""
