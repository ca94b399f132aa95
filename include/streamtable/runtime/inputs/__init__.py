"""What a batch reads: the lake's changelogs, Delta tables of other jobs, and a keyed input's changes."""
