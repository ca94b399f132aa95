"""What a pipeline did: its batches' progress, its status, where a row came from (explain, provenance)."""
